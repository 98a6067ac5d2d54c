"""Memory-mapping tensors saved by torch.save (BLINK's .t7), in both of torch's file formats."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from linker.torchfile import NotMappable, convert_to_npy, map_tensor, tensor_layout

FORMATS = {"zip": True, "legacy": False}


def save(tensor, path, fmt: str):
    torch.save(tensor, path, _use_new_zipfile_serialization=FORMATS[fmt])
    return str(path)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_a_saved_tensor_is_mapped_in_place(tmp_path, fmt, dtype):
    tensor = (torch.randn(37, 16) * 100).to(dtype)
    path = save(tensor, tmp_path / "t.t7", fmt)
    layout = tensor_layout(path)
    assert layout.format == fmt and layout.shape == (37, 16)
    mapped = map_tensor(path)
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    np.testing.assert_array_equal(np.asarray(mapped), tensor.numpy())


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_row_slice_is_mapped_at_its_storage_offset(tmp_path, fmt):
    tensor = torch.randn(50, 8)
    path = save(tensor[7:], tmp_path / "v.t7", fmt)  # torch saves the whole storage and an offset
    np.testing.assert_array_equal(np.asarray(map_tensor(path)), tensor[7:].numpy())


@pytest.mark.parametrize("fmt", FORMATS)
def test_what_cannot_be_mapped_is_refused_then_converted_once(tmp_path, fmt):
    transposed = torch.randn(8, 30).T  # not C-contiguous
    path = save(transposed, tmp_path / "t.t7", fmt)
    with pytest.raises(NotMappable, match="contiguous"):
        tensor_layout(path)
    out = convert_to_npy(path, str(tmp_path / "t.npy"), block_rows=7)
    np.testing.assert_array_equal(np.load(out), transposed.numpy())
    with pytest.raises(NotMappable, match="holds a dict, not a tensor"):
        tensor_layout(save({"a": torch.zeros(2)}, tmp_path / "d.t7", fmt))


def test_a_cut_short_file_and_foreign_pickles_are_refused_without_running_code(tmp_path):
    path = save(torch.randn(100, 4), tmp_path / "t.t7", "legacy")
    data = open(path, "rb").read()
    (tmp_path / "cut.t7").write_bytes(data[: len(data) - 100])
    with pytest.raises(NotMappable, match="shorter"):
        tensor_layout(str(tmp_path / "cut.t7"))

    class Evil:
        def __reduce__(self):
            return (print, ("this must not run",))

    evil = tmp_path / "evil.t7"
    evil.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(NotMappable, match=r"pickles builtins\.print: not a plain tensor"):
        tensor_layout(str(evil))
