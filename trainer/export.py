"""Consolidated weights out of a (ZeRO-sharded) DeepSpeed checkpoint, and weights into the model.

    wikiedm export --checkpoint RUN/checkpoints/step_00001000 --output edmem.safetensors
    wikiedm export --checkpoint RUN --output edmem.safetensors      (the latest checkpoint of a run)
    python -m trainer.export ...                                     (the same command line)

The safetensors file holds every parameter of EDMem once (the entity table, shared by
the encoder read, the decoder read and the linking head, is one tensor; the LM head
is the token embedding) and, in its metadata, the EDMemSpec to rebuild the model:
``load_exported(path)`` returns a ready EDMem. A table trained partitioned by rows is
put together from the ranks' shards into the one ``entity_memory.table`` tensor.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from trainer import checkpoint as ckpt_files
from trainer.model import EDMem, EDMemSpec
from trainer.run_guard import resolve_checkpoint


def consolidated_state_dict(ckpt_dir: Path, tag: str) -> dict[str, torch.Tensor]:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt_dir), tag=tag)
    # Store each storage once: if ZeRO's consolidation ever returns aliases of one tensor, keep the first name.
    seen, out = {}, {}
    for name, t in state.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key in seen:
            continue
        seen[key] = name
        out[name] = t.detach().contiguous().clone()
    return out


def checkpoint_state(checkpoint: str | Path) -> tuple[Path, dict, dict[str, torch.Tensor]]:
    """(the tag directory, the model spec as a dict, every weight in float32 with the whole entity table)
    of a checkpoint given as in ``resolve_checkpoint``, whatever the table's layout."""
    ckpt_dir, tag = resolve_checkpoint(checkpoint)
    spec_path = ckpt_dir / tag / "edmem_spec.json"
    if not spec_path.exists():
        raise SystemExit(f"{spec_path} is missing: not a checkpoint written by trainer.pretrain")
    spec = json.loads(spec_path.read_text())
    state = consolidated_state_dict(ckpt_dir, tag)
    if ckpt_files.saved_partition(ckpt_dir, tag) == "rows":  # DeepSpeed never held it: the ranks' shards
        n = ckpt_files.memory_layout(ckpt_dir / tag)["n_entities"]
        state["entity_memory.table"] = ckpt_files.read_rows(ckpt_dir / tag, 0, n, keys=("weight",))["weight"]
    return ckpt_dir / tag, spec, state


def export(checkpoint: str | Path, out_path: str | Path) -> Path:
    from safetensors.torch import save_file

    tag_dir, spec, state = checkpoint_state(checkpoint)
    expected = set(EDMem(EDMemSpec.from_dict(spec)).state_dict())
    if set(state) != expected:
        raise SystemExit(f"checkpoint parameters differ from the model: missing {sorted(expected - set(state))}, "
                         f"unexpected {sorted(set(state) - expected)}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside, then renamed: an export killed midway leaves no damaged file at --output. The checkpoint's
    # absolute path tells the next export into the same file whether it comes from the same run (trainer.run_guard).
    partial = out_path.with_name(f".{out_path.name}.{os.getpid()}.partial")
    try:
        save_file(state, str(partial), metadata={"edmem_spec": json.dumps(spec), "checkpoint": str(tag_dir.resolve()),
                                                 "format": "pt"})
        os.replace(partial, out_path)
    finally:
        partial.unlink(missing_ok=True)
    return out_path


def load_exported(path: str | Path, map_location: str = "cpu") -> EDMem:
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        spec = EDMemSpec.from_dict(json.loads(f.metadata()["edmem_spec"]))
    model = EDMem(spec)
    model.load_state_dict(load_file(str(path), device=map_location), strict=True)
    return model


def load_bart_weights(model: EDMem, path: str) -> None:
    """Initialise the transformer from a local Hugging Face BART checkpoint (model.* names).

    Layer i of a BART stack becomes lower[i] (i < L1) or upper[i - L1]; embeddings are copied
    over the rows both vocabularies share. The memory, its projections and the EL head keep
    their random initialisation.
    """
    from transformers import BartModel

    bart = BartModel.from_pretrained(path, local_files_only=True).state_dict()
    l1 = model.spec.model.lower_layers
    mapping = {"shared.weight": "shared.weight"}
    for stack in ("encoder", "decoder"):
        mapping[f"{stack}.embed_positions.weight"] = f"{stack}.embed_positions.weight"
        for suffix in ("weight", "bias"):
            mapping[f"{stack}.layernorm_embedding.{suffix}"] = f"{stack}.layernorm_embedding.{suffix}"
    for name in bart:
        parts = name.split(".")
        if len(parts) > 3 and parts[1] == "layers":
            i = int(parts[2])
            where = f"lower.{i}" if i < l1 else f"upper.{i - l1}"
            mapping[name] = ".".join([parts[0], where] + parts[3:])
    params = dict(model.named_parameters())
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(params.values()), modifier_rank=0,
                                           enabled=any(hasattr(p, "ds_id") for p in params.values())):
        with torch.no_grad():
            for src, dst in mapping.items():
                if src not in bart or dst not in params:
                    continue
                s, d = bart[src], params[dst]
                rows = min(s.shape[0], d.shape[0])
                if s.shape[1:] != d.shape[1:]:
                    raise SystemExit(f"--init_from {path}: {src} {tuple(s.shape)} does not fit {dst} {tuple(d.shape)}")
                d[:rows].copy_(s[:rows])


def main(argv: list[str] | None = None) -> int:
    from trainer.config import parse_export
    from trainer.run_guard import check_export_output
    from wikiedm.config import ConfigError, command_error

    try:
        args = parse_export(list(sys.argv[1:] if argv is None else argv))
        found = check_export_output(args.checkpoint, args.output, args.overwrite)  # another run's file: refused
    except ConfigError as exc:
        return command_error("wikiedm export", str(exc))
    if found == "overwrite":
        print(f"--overwrite true: replacing {args.output}, exported from another run", file=sys.stderr)
    out = export(args.checkpoint, args.output)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
