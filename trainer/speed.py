"""What makes the trainer fast on a GPU, each a no-op or a plain fallback on CPU.

- ``use_compile``/``compile_layers``: torch.compile of every transformer layer (``train.compile``);
  the embeddings, the memory reads and their data-dependent [Es] gathers stay eager.
- ``pad_batch``: every micro-batch padded to ``data.max_seq_len`` so the compiled layers see one shape.
- ``resolve_micro_batch``: ``train.micro_batch_size: auto``, the largest power of two dividing the
  per-rank batch whose forward + backward fits the GPU with headroom (probed), 16 on CPU.
- ``enable_tf32``: TF32 for whatever float32 matmul / convolution remains on an Ampere+ GPU.

bf16 is DeepSpeed's: with ``bf16.enabled`` its engine casts the module's parameters to bf16 (the
forward runs on bf16 weights, no autocast) and its ZeRO optimizer keeps the float32 master weights
and Adam states (see docs/pretraining.md, "Speed on a GPU").
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from trainer.data import MODEL_INPUTS

COMPILE_SETTINGS = ("auto", "true", "false")
# Pad values of the model inputs (labels: ignored; masks: off; entity ids: [PAD]); input ids take the pad token.
_PAD_VALUES = {"attention_mask": False, "labels": -100, "entity_ids": 0, "decoder_entity_ids": 0,
               "masked_mentions": False, "decoder_masked_mentions": False}


def enable_tf32(device: torch.device) -> None:
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def use_compile(setting: str, device: torch.device, zero_stage: int) -> bool:
    """``train.compile``: auto = on for CUDA (below ZeRO-3, whose parameter hooks run inside each layer), off on CPU."""
    setting = str(setting).lower()
    if setting not in COMPILE_SETTINGS:
        raise SystemExit(f"train.compile must be one of {COMPILE_SETTINGS}, got {setting!r}")
    if setting == "auto":
        return device.type == "cuda" and zero_stage < 3
    return setting == "true"


def transformer_layers(model) -> list[torch.nn.Module]:
    """The BART layers of both stacks of an EDMem (lower and upper), in order."""
    return [layer for stack in (model.encoder, model.decoder) for part in (stack.lower, stack.upper) for layer in part]


def compile_layers(model, dynamic: bool = False, backend: str = "inductor") -> int:
    """torch.compile every transformer layer in place (``nn.Module.compile``: parameter names and checkpoints
    unchanged). ``dynamic=False``: one graph per input shape, which ``pad_batch`` keeps to one in training;
    layers of one class share their graph (their parameters are graph inputs)."""
    layers = transformer_layers(model)
    for layer in layers:
        layer.compile(dynamic=dynamic, backend=backend)
    return len(layers)


def pad_batch(batch: dict, length: int, pad_id: int) -> dict:
    """The [B, S] model inputs of a collated batch right-padded to [B, length] (S <= length), as the collator pads."""
    out = dict(batch)
    for key in MODEL_INPUTS:
        t = batch[key]
        if t.shape[1] > length:
            raise ValueError(f"{key} has {t.shape[1]} positions, more than the {length} to pad to")
        if t.shape[1] < length:
            out[key] = F.pad(t, (0, length - t.shape[1]), value=_PAD_VALUES.get(key, pad_id))
    return out


def micro_batch_candidates(per_rank: int, largest: int = 1024) -> list[int]:
    """Powers of two dividing the per-rank batch, ascending, up to ``largest``."""
    out, b = [], 1
    while b <= min(per_rank, largest):
        if per_rank % b == 0:
            out.append(b)
        b *= 2
    return out


def cpu_micro_batch(per_rank: int, preferred: int = 16) -> int:
    """``auto`` without a GPU: the largest candidate <= ``preferred``."""
    return max(b for b in micro_batch_candidates(per_rank) if b <= preferred)


def optimizer_state_bytes(n_params: int, bf16: bool) -> int:
    """What the optimizer adds beyond the weights and their gradients once it has stepped: Adam's two float32
    moments, and under bf16 the float32 master weights and float32 gradient partition of DeepSpeed's ZeRO."""
    return n_params * (8 + (8 if bf16 else 0))


def resolve_micro_batch(per_rank: int, device: torch.device, try_step, n_params: int, bf16: bool,
                        headroom: float = 0.15, say=print) -> int:
    """``train.micro_batch_size: auto``. On CUDA: ``try_step(b)`` runs one forward + backward of a micro-batch
    of b sequences at full length; the largest candidate whose peak memory plus the optimizer's states stays
    under (1 - headroom) of the GPU is chosen, probing upwards until one does not fit or runs out of memory.
    On CPU: ``cpu_micro_batch``."""
    if device.type != "cuda":
        return cpu_micro_batch(per_rank)
    total = torch.cuda.get_device_properties(device).total_memory
    budget = (1 - headroom) * total - optimizer_state_bytes(n_params, bf16)
    chosen = None
    for b in micro_batch_candidates(per_rank):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        try:
            try_step(b)
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as exc:  # cuBLAS reports its own failed allocations
            message = str(exc).upper()
            out_of_memory = "ALLOC" in message or "OUT OF MEMORY" in message
            if not (isinstance(exc, torch.cuda.OutOfMemoryError) or out_of_memory):
                raise
            say(f"micro-batch probe: {b} runs out of memory")
            break
        states = (1 - headroom) * total - budget
        say(f"micro-batch probe: {b} sequences peak at {peak / 2**30:.1f} GiB (+ {states / 2**30:.1f} GiB optimizer "
            f"states; budget {(1 - headroom) * total / 2**30:.1f} GiB)")
        if peak > budget:
            break
        chosen = b
    torch.cuda.empty_cache()
    if chosen is None:
        raise SystemExit(f"train.micro_batch_size auto: not even 1 sequence fits in {total / 2**30:.1f} GiB "
                         f"with {headroom:.0%} headroom")
    return chosen


def probe_batch(batch_size: int, seq_len: int, ids, n_entities: int, mentions_per_sequence: int, device) -> dict:
    """A full-length micro-batch for the probe: random tokens, ``mentions_per_sequence`` [Es] .. [Ee] spans with
    random entities (the collator's layout; every position a target), so memory is measured at its worst."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, ids.vocab_size, (batch_size, seq_len), generator=g)
    special = torch.tensor(ids.special)
    ordinary = min(set(range(len(ids.special) + 1)) - set(ids.special))
    tokens = torch.where(torch.isin(tokens, special), ordinary, tokens)
    entity_ids = torch.zeros_like(tokens)
    for j in range(mentions_per_sequence):
        pos = 1 + j * max(1, (seq_len - 4) // max(mentions_per_sequence, 1))
        if pos + 3 >= seq_len:
            break
        tokens[:, pos], tokens[:, pos + 3] = ids.entity_start, ids.entity_end
        entity_ids[:, pos] = torch.randint(3, max(n_entities, 4), (batch_size,), generator=g)
    decoder_input_ids = torch.cat([torch.full_like(tokens[:, :1], ids.eos), tokens[:, :-1]], dim=1)
    shift = lambda t: torch.cat([torch.zeros_like(t[:, :1]), t[:, :-1]], dim=1)  # noqa: E731
    masked = torch.zeros_like(tokens, dtype=torch.bool)
    batch = {"input_ids": tokens, "attention_mask": torch.ones_like(tokens, dtype=torch.bool),
             "decoder_input_ids": decoder_input_ids, "labels": tokens.clone(), "entity_ids": entity_ids,
             "decoder_entity_ids": shift(entity_ids), "masked_mentions": masked, "decoder_masked_mentions": masked}
    return {k: v.to(device) for k, v in batch.items()}
