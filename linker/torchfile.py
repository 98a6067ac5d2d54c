"""Memory-map a tensor saved by ``torch.save`` (BLINK's ``all_entities_large.t7``) without loading it.

BLINK's released entity encodings are one float32 tensor of 5.9M x 1024
(24 GB) written by ``torch.save``. ``torch.load`` reads all of it into memory,
in every process that opens it. This module reads only the file's pickle (a
few hundred bytes) to learn the tensor's dtype, shape, strides and where its
storage lies, and returns an ``np.memmap`` over those bytes: workers share the
page cache and touch only the rows they read.

Both of torch's file formats are read:

* the zip format (torch >= 1.6): ``<name>/data.pkl`` plus one stored (not
  compressed) entry ``<name>/data/<key>`` per storage;
* the legacy format (what older torch, and BLINK's release, wrote): four
  pickles (magic number, protocol, system info, the object), the list of
  storage keys, then each storage as an 8-byte element count and its bytes.

The pickle is read by a restricted unpickler that only knows tensor rebuilding
and storage types: no code from the file runs. A file that is not a single
C-contiguous tensor (or whose storage is not directly addressable) raises
:class:`NotMappable`; callers then convert it once (see
:func:`convert_to_npy`).
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass

import numpy as np

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class NotMappable(ValueError):
    """The file holds something other than one plain tensor whose bytes can be mapped."""


@dataclass(frozen=True)
class _StorageType:
    name: str

    @property
    def dtype(self):
        return np.dtype(_STORAGE_DTYPES[self.name])


@dataclass(frozen=True)
class _StorageRef:
    dtype: np.dtype
    key: str
    numel: int | None


@dataclass(frozen=True)
class _TensorRef:
    storage: _StorageRef
    offset: int  # in elements
    shape: tuple
    stride: tuple


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored):
    return _TensorRef(storage, int(storage_offset), tuple(int(s) for s in size), tuple(int(s) for s in stride))


class _TensorUnpickler(pickle.Unpickler):
    """Unpickles torch's tensor description only; refuses every other global."""

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch" and name == "device":
            return str
        raise NotMappable(f"the file pickles {module}.{name}: not a plain tensor")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise NotMappable(f"unexpected persistent id {pid!r}")
        storage_type = pid[1]
        if isinstance(storage_type, _StorageType):
            dtype = storage_type.dtype
        else:
            raise NotMappable(f"unknown storage type {storage_type!r}")
        key = str(pid[2])
        numel = int(pid[4]) if len(pid) > 4 and isinstance(pid[4], int) else None
        if len(pid) > 5 and pid[5] is not None:  # legacy view metadata: a view into a bigger storage
            raise NotMappable("the tensor is a view of a larger storage")
        return _StorageRef(dtype, key, numel)


@dataclass(frozen=True)
class TensorLayout:
    """Where the tensor's elements lie in the file."""

    path: str
    format: str  # "zip" or "legacy"
    dtype: str
    shape: tuple
    data_offset: int  # byte offset of element [0, 0, ...] in the file

    def open(self) -> np.memmap:
        return np.memmap(self.path, dtype=np.dtype(self.dtype), mode="r", offset=self.data_offset, shape=self.shape)


def _check_contiguous(ref: _TensorRef) -> None:
    if not isinstance(ref, _TensorRef):
        raise NotMappable(f"the file holds a {type(ref).__name__}, not a tensor")
    expected, step = [], 1
    for size in reversed(ref.shape):
        expected.append(step)
        step *= max(size, 1)
    if tuple(reversed(expected)) != ref.stride and int(np.prod(ref.shape)) > 1:
        raise NotMappable(f"the tensor is not C-contiguous (strides {ref.stride})")


def _zip_layout(path: str) -> TensorLayout:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            raise NotMappable(f"{path}: a zip file without data.pkl")
        prefix = pkl[: -len("data.pkl")]
        order = f"{prefix}byteorder"
        if order in names and zf.read(order).strip() not in (b"little", b""):
            raise NotMappable(f"{path}: big-endian tensor data")
        ref = _TensorUnpickler(io.BytesIO(zf.read(pkl))).load()
        _check_contiguous(ref)
        info = zf.getinfo(f"{prefix}data/{ref.storage.key}")
        if info.compress_type != zipfile.ZIP_STORED:
            raise NotMappable(f"{path}: the tensor's storage is compressed")
        with open(path, "rb") as fh:  # the entry's bytes follow its local header
            fh.seek(info.header_offset)
            header = fh.read(30)
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            start = info.header_offset + 30 + name_len + extra_len
    itemsize = ref.storage.dtype.itemsize
    needed = (ref.offset + int(np.prod(ref.shape))) * itemsize
    if needed > info.file_size:
        raise NotMappable(f"{path}: the storage is smaller than the tensor")
    return TensorLayout(path, "zip", ref.storage.dtype.str, ref.shape, start + ref.offset * itemsize)


def _legacy_layout(path: str) -> TensorLayout:
    with open(path, "rb") as fh:
        if _TensorUnpickler(fh).load() != LEGACY_MAGIC:
            raise NotMappable(f"{path}: not a torch file (bad magic number)")
        _TensorUnpickler(fh).load()  # protocol version
        sys_info = _TensorUnpickler(fh).load()
        if isinstance(sys_info, dict) and not sys_info.get("little_endian", True):
            raise NotMappable(f"{path}: big-endian tensor data")
        ref = _TensorUnpickler(fh).load()
        _check_contiguous(ref)
        keys = _TensorUnpickler(fh).load()
        if not isinstance(keys, list) or ref.storage.key not in [str(k) for k in keys]:
            raise NotMappable(f"{path}: unexpected storage key list")
        if len(keys) != 1:
            raise NotMappable(f"{path}: {len(keys)} storages (expected the tensor's only)")
        (count,) = struct.unpack("<q", fh.read(8))
        start = fh.tell()
    itemsize = ref.storage.dtype.itemsize
    if (ref.offset + int(np.prod(ref.shape))) > count or os.path.getsize(path) < start + count * itemsize:
        raise NotMappable(f"{path}: the storage is shorter than the tensor (file cut short?)")
    return TensorLayout(path, "legacy", ref.storage.dtype.str, ref.shape, start + ref.offset * itemsize)


def tensor_layout(path: str) -> TensorLayout:
    """Where the single tensor ``torch.save``-d in ``path`` lies (raises NotMappable otherwise)."""
    if zipfile.is_zipfile(path):
        return _zip_layout(path)
    try:
        return _legacy_layout(path)
    except (pickle.UnpicklingError, EOFError, struct.error) as err:
        raise NotMappable(f"{path}: not a readable torch file ({err})") from None


def map_tensor(path: str) -> np.memmap:
    """A read-only memory map of the tensor in ``path``."""
    return tensor_layout(path).open()


def convert_to_npy(path: str, out_path: str, block_rows: int = 65536) -> str:
    """Convert a torch-saved 2-D tensor to ``.npy`` once, block by block (the fallback for files
    that cannot be mapped in place: views, compressed entries). ``torch.load(mmap=True)`` keeps the
    zip format out of memory; the legacy format has to be loaded whole, once."""
    import torch

    try:
        tensor = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:
        tensor = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
        raise ValueError(f"{path}: expected one 2-D tensor, got {type(tensor).__name__}")
    tmp = out_path + ".tmp.npy"
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=tuple(tensor.shape))
    for lo in range(0, tensor.shape[0], block_rows):
        out[lo: lo + block_rows] = tensor[lo: lo + block_rows].float().numpy()
    out.flush()
    del out
    os.replace(tmp, out_path)
    return out_path
