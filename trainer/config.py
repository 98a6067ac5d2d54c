"""Configuration of a pre-training run: dataclasses with help text, YAML, command-line overrides.

A run is described by one YAML file (``configs/pretrain/*.yaml``) whose sections
mirror the dataclasses below. Any key can be overridden on the command line with
its dotted path, ``--model.entity_dim=64`` or ``--optim.lr 3e-4``; the common
ones have short forms (``--data``, ``--output_dir``, ``--max_steps``,
``--deepspeed_config``). Values are parsed as YAML scalars, so ``--train.bf16 false``
and ``--optim.lr 1e-4`` get their natural types.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wikiedm.fields import option as _f


@dataclass
class ModelConfig:
    d_model: int = _f(1024, "hidden size of the BART encoder and decoder")
    attention_heads: int = _f(16, "attention heads per layer (encoder and decoder)")
    ffn_dim: int = _f(4096, "feed-forward inner size")
    lower_layers: int = _f(4, "L1: layers before the entity-memory read, in the encoder and in the decoder")
    upper_layers: int = _f(8, "L2: layers after the entity-memory read, in the encoder and in the decoder")
    entity_dim: int = _f(256, "width of the entity memory table")
    max_positions: int = _f(256, "learned position embeddings (>= data.max_seq_len)")
    dropout: float = _f(0.1, "dropout on hidden states")
    attention_dropout: float = _f(0.0, "dropout on attention probabilities")
    activation_dropout: float = _f(0.0, "dropout inside the feed-forward block")
    inference_top_k: int = _f(100, "entities aggregated by a memory read outside training (EaE/EDMem: 100)")
    entity_block_size: int = _f(16384, "entities per block in the blocked log-sum-exp (bounds memory to mentions x "
                                "block; 16384 measured fastest on CPU, base.yaml keeps 65536 for a GPU)")
    init_std: float = _f(0.02, "std of the normal initialisation")
    entity_init_std: float = _f(0.0, "std of the entity table's initialisation; 0: 1/sqrt(entity_dim), unit-norm rows "
                                     "(see trainer/README.md, 'Why entity linking learns')")
    query_init_std: float = _f(0.0, "std of W_in and of the linking head's projection; 0: 1/sqrt(d_model), "
                                    "unit-variance queries")
    memory_partition: str = _f("auto", "entity table layout: 'rows' (each rank owns N/k rows and their optimizer "
                                       "state; reads move queries, never the table), 'replicated' (one "
                                       "DeepSpeed parameter, ZeRO-partitioned at rest and gathered to read), or "
                                       "'auto': a resumed checkpoint's layout, else rows above 1 rank")
    init_from: str | None = _f(None, "optional local Hugging Face BART checkpoint to initialise the transformer from")


@dataclass
class DataConfig:
    path: str = _f("", "corpus directory written by the pipeline (holds manifest.json, passages/, tokenizer/, entity_vocab/)")
    max_seq_len: int = _f(160, "encoder/decoder length incl. <s>, </s>, [Es], [Ee]; longer passages lose their last "
                               "mentions' markers first, then tail tokens (counted as dropped)")
    random_token_mask_prob: float = _f(0.3, "P_rtm: probability that a non-special token becomes <mask>")
    salient_span_mask_prob: float = _f(0.5, "P_ssm: probability that all tokens of a mention become <mask>")
    shuffle_window_row_groups: int = _f(8, "row groups shuffled together (the bounded shuffle buffer, in row groups)")
    verify_sha256: bool = _f(True, "check every passage shard against the manifest's sha256 before training")
    validation_batches: int = _f(4, "micro-batches per rank in a validation pass (0: the whole validation split)")
    overfit_passages: int = _f(0, "train on only the first K passages of the train split, repeated (a debugging and "
                                  "test knob: the model should memorise them; 0: off)")


@dataclass
class OptimConfig:
    lr: float = _f(1e-4, "peak learning rate")
    weight_decay: float = _f(0.01, "AdamW weight decay (not applied to biases and LayerNorm weights)")
    betas: list = _f([0.9, 0.999], "AdamW betas")
    eps: float = _f(1e-8, "AdamW epsilon")
    warmup_fraction: float = _f(0.1, "fraction of max_steps with linear warm-up, then linear decay to 0")
    grad_clip: float = _f(0.1, "global gradient-norm clipping")
    el_weight: float = _f(1.0, "lambda_EL: weight of the entity-linking loss")


@dataclass
class TrainConfig:
    output_dir: str = _f("runs/pretrain", "run directory: checkpoints/, metrics.jsonl, config.yaml, loss.png")
    max_steps: int = _f(1000, "optimizer steps")
    global_batch_size: int = _f(2048, "sequences per optimizer step over all ranks (fixes the sample order)")
    micro_batch_size: int = _f(16, "sequences per rank per forward pass; accumulation = global / (micro x ranks)")
    seed: int = _f(1234, "seed of initialisation, shuffle, masking and dropout")
    bf16: str = _f("auto", "'auto' (bf16 on a GPU that supports it), true or false")
    zero_stage: int | None = _f(None, "ZeRO stage 0-3; unset: the DeepSpeed JSON's (zero2.json by default: stage 2)")
    deepspeed_config: str = _f("configs/deepspeed/zero2.json", "DeepSpeed JSON; batch, optimizer, precision and "
                                                               "clipping are filled in from this config")
    log_every: int = _f(10, "optimizer steps between log lines / metrics.jsonl rows")
    eval_every: int = _f(500, "optimizer steps between validation passes (0: never)")
    save_every: int = _f(1000, "optimizer steps between checkpoints (0: only at the end)")
    keep_checkpoints: int = _f(3, "checkpoints kept on disk (oldest deleted; 0: keep all)")
    resume: str = _f("auto", "'auto' (latest checkpoint in output_dir if any), 'none', or a checkpoint tag/path")
    log_sample_ids: bool = _f(False, "also write the passage ids of every global batch to samples.jsonl (tests)")
    stop_after_steps: int = _f(0, "exit after this many steps (simulates a kill; 0: off). Schedule still uses max_steps")
    plot: bool = _f(True, "write loss.png at the end of the run")
    peak_tflops: float = _f(0.0, "per-device peak TFLOP/s for MFU (0: guess from the GPU name; no MFU on CPU)")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Short forms of the most used overrides.
ALIASES = {
    "data": "data.path",
    "output_dir": "train.output_dir",
    "max_steps": "train.max_steps",
    "deepspeed_config": "train.deepspeed_config",
    "deepspeed": "train.deepspeed_config",
    "zero_stage": "train.zero_stage",
    "seed": "train.seed",
    "init_from": "model.init_from",
}


def _set(cfg: Config, dotted: str, value: Any) -> None:
    dotted = ALIASES.get(dotted, dotted)
    section_name, _, key = dotted.partition(".")
    section = getattr(cfg, section_name, None)
    if section is None or not key or not hasattr(section, key):
        known = sorted(f"{s.name}.{f.name}" for s in dataclasses.fields(cfg) for f in dataclasses.fields(getattr(cfg, s.name)))
        raise SystemExit(f"unknown config key {dotted!r}; known keys: {', '.join(known)}")
    default = next(f for f in dataclasses.fields(section) if f.name == key)
    kind = type(default.default) if default.default is not dataclasses.MISSING else type(getattr(section, key))
    if isinstance(value, str) and kind is not str:
        value = yaml.safe_load(value) if value != "" else None
    # Coerce to the field's type: PyYAML reads "1e-4" as a string and "1" as an int.
    if kind is float and value is not None:
        value = float(value)
    elif kind is int and isinstance(value, (str, float)):
        value = int(value)
    elif kind is bool and isinstance(value, str):
        value = {"true": True, "false": False}.get(value.lower(), value)
    elif kind is str and value is not None and not isinstance(value, str):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    setattr(section, key, value)


def load_config(path: str | None, overrides: list[str] = ()) -> Config:
    """Defaults, then the YAML file, then ``--key=value`` / ``--key value`` overrides."""
    cfg = Config()
    if path:
        raw = yaml.safe_load(Path(path).read_text()) or {}
        for section, values in raw.items():
            if not isinstance(values, dict):
                raise SystemExit(f"{path}: section {section!r} must be a mapping")
            for key, value in values.items():
                _set(cfg, f"{section}.{key}", value)
    args = list(overrides)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise SystemExit(f"unexpected argument {arg!r} (overrides look like --model.entity_dim=64)")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise SystemExit(f"override {arg} has no value")
            key, value = arg[2:], args[i + 1]
            i += 2
        _set(cfg, key, value)
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    if cfg.train.zero_stage not in (None, 0, 1, 2, 3):
        raise SystemExit(f"train.zero_stage must be 0..3, got {cfg.train.zero_stage}")
    if cfg.model.max_positions < cfg.data.max_seq_len:
        raise SystemExit("model.max_positions must be >= data.max_seq_len")
    if cfg.model.d_model % cfg.model.attention_heads:
        raise SystemExit("model.d_model must be divisible by model.attention_heads")
    if not 0 <= cfg.data.random_token_mask_prob <= 1 or not 0 <= cfg.data.salient_span_mask_prob <= 1:
        raise SystemExit("masking probabilities must be in [0, 1]")
    if cfg.model.memory_partition not in ("auto", "rows", "replicated"):
        raise SystemExit(f"model.memory_partition must be auto, rows or replicated, got {cfg.model.memory_partition!r}")


def help_text() -> str:
    lines = ["config keys (override with --section.key=value):"]
    for s in dataclasses.fields(Config):
        for f in dataclasses.fields(s.type if isinstance(s.type, type) else globals()[s.type]):
            lines.append(f"  {s.name}.{f.name:<28} {f.metadata.get('help', '')}")
    return "\n".join(lines)


def dump_config(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def config_json(cfg: Config) -> str:
    return json.dumps(cfg.to_dict(), sort_keys=True)
