"""Configuration of a pre-training run: dataclasses with help text, YAML, command-line overrides.

A run is described by one YAML file (``configs/pretrain/*.yaml``) whose sections
mirror the dataclasses below. Any key can be overridden on the command line with
its dotted path, ``--model.entity_dim=64`` or ``--optim.lr 3e-4``; the common
ones have short forms (``--corpus``, ``--output``, ``--max_steps``,
``--deepspeed_config``). Parsing, value conversion (``--train.bf16 false``,
``--optim.lr 1e-4``), ``--help`` and ``--help-config`` are the shared
:mod:`wikiedm.config`, as for the corpus job and the linker.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from wikiedm.config import IGNORED, ConfigError, ConfigParser, unknown_option
from wikiedm.fields import option

MEMORY_KINDS = ("entity", "none")


@dataclass
class ModelConfig:
    d_model: int = option(1024, "hidden size of the BART encoder and decoder")
    attention_heads: int = option(16, "attention heads per layer (encoder and decoder)")
    ffn_dim: int = option(4096, "feed-forward inner size")
    lower_layers: int = option(4, "L1: layers before the entity-memory read, in the encoder and in the decoder")
    upper_layers: int = option(8, "L2: layers after the entity-memory read, in the encoder and in the decoder")
    entity_dim: int = option(256, "width of the entity memory table")
    max_positions: int = option(256, "learned position embeddings (>= data.max_seq_len)")
    dropout: float = option(0.1, "dropout on hidden states")
    attention_dropout: float = option(0.0, "dropout on attention probabilities")
    activation_dropout: float = option(0.0, "dropout inside the feed-forward block")
    inference_top_k: int = option(100, "entities aggregated by a memory read outside training (EaE/EDMem: 100)")
    entity_block_size: int = option(16384, "entities per block in the blocked log-sum-exp (bounds memory to mentions x "
                                    "block; 16384 measured fastest on CPU, base.yaml keeps 65536 for a GPU)")
    init_std: float = option(0.02, "std of the normal initialisation")
    entity_init_std: float = option(0.0, "std of the entity table's initialisation; 0: 1/sqrt(entity_dim), unit-norm rows "
                                     "(see docs/pretraining.md, 'The memory's initial scales')")
    query_init_std: float = option(0.0, "std of W_in and of the linking head's projection; 0: 1/sqrt(d_model), "
                                    "unit-variance queries")
    memory_partition: str = option("auto", "entity table layout: 'rows' (each rank owns N/k rows and their optimizer "
                                       "state; reads move queries, never the table), 'replicated' (one "
                                       "DeepSpeed parameter, ZeRO-partitioned at rest and gathered to read), or "
                                       "'auto': a resumed checkpoint's layout, else rows above 1 rank")
    memory_kernel: str = option("auto", "backend of the memory's softmax over the table: 'blocked' (torch products "
                                "over blocks of entity_block_size rows, float32 whatever the parameter dtype; exact to "
                                "1e-5), 'triton' (fused Triton kernels on tensor cores: bf16 products, float32 "
                                "accumulation and softmax; tested within 5e-4 of float64 in the lse and 1e-2 in the "
                                "read and the gradients, relative; CUDA only, entity_dim <= 256), 'flex' (torch's "
                                "FlexAttention over the table in chunks, same precision and tolerances, CUDA only), "
                                "or 'auto': on a GPU the backend benchmarks/gpu_check.sh measured faster "
                                "(trainer.entity_softmax.CUDA_DEFAULT), else blocked")
    init_from: str | None = option(None, "optional local Hugging Face BART checkpoint to initialise the transformer from",
                                   path="exists")
    memory: str = option("entity", "'entity': EDMem (the entity memory read in both stacks, the linking head, the EL "
                                   "loss); 'none': the same BART encoder-decoder with no memory reads, no EL loss and "
                                   "no entity table or read/linking parameters (the ablation baseline, "
                                   "docs/ablation.md)")


@dataclass
class DataConfig:
    path: str = option("", "corpus directory written by the pipeline (holds manifest.json, passages/, tokenizer/, entity_vocab/)",
                       path="corpus")
    max_seq_len: int = option(160, "encoder/decoder length incl. <s>, </s>, [Es], [Ee]; longer passages lose their last "
                               "mentions' markers first, then tail tokens (counted as dropped)")
    random_token_mask_prob: float = option(0.3, "P_rtm: probability that a non-special token becomes <mask>")
    salient_span_mask_prob: float = option(0.5, "P_ssm: probability that all tokens of a mention become <mask>")
    shuffle_window_row_groups: int = option(8, "row groups shuffled together (the bounded shuffle buffer, in row groups)")
    verify_sha256: bool = option(True, "check every passage shard against the manifest's sha256 before training")
    validation_batches: int = option(4, "micro-batches per rank in a validation pass (0: the whole validation split)")
    overfit_passages: int = option(0, "train on only the first K passages of the train split, repeated (a debugging and "
                                  "test knob: the model should memorise them; 0: off)")
    num_workers: int = option(1, "processes per rank that make the training batches ahead of the loop, outside its GIL "
                              "(steps in turn: the same batches); 0: a thread of the rank (a loop busy in Python "
                              "starves it: benchmarks/bench_data.py)")


@dataclass
class OptimConfig:
    lr: float = option(1e-4, "peak learning rate")
    weight_decay: float = option(0.01, "AdamW weight decay (not applied to biases and LayerNorm weights)")
    betas: list[float] = option([0.9, 0.999], "AdamW betas")
    eps: float = option(1e-8, "AdamW epsilon")
    warmup_fraction: float = option(0.1, "fraction of max_steps with linear warm-up, then linear decay to 0")
    grad_clip: float = option(0.1, "global gradient-norm clipping")
    el_weight: float = option(1.0, "lambda_EL: weight of the entity-linking loss")


@dataclass
class TrainConfig:
    output_dir: str = option("runs/pretrain", "run directory: checkpoints/, metrics.jsonl, config.yaml, loss.png")
    max_steps: int = option(1000, "optimizer steps")
    global_batch_size: int = option(2048, "sequences per optimizer step over all ranks (fixes the sample order)")
    micro_batch_size: int | str = option(16, "sequences per rank per forward pass; accumulation = global / "
                                         "(micro x ranks). 'auto': on a GPU the largest power of two dividing "
                                         "global / ranks whose forward + backward at data.max_seq_len fits in "
                                         "0.85 of its memory (probed at start-up; ZeRO-3 or split rows over "
                                         "several ranks: 16); on CPU 16")
    seed: int = option(1234, "seed of initialisation, shuffle, masking and dropout")
    bf16: str = option("auto", "'auto' (bf16 on a GPU that supports it), true or false. DeepSpeed casts the "
                                "weights to bf16 (the forward runs on them) and keeps float32 master weights and "
                                "Adam states", choices=("auto", "true", "false"))
    compile: str = option("auto", "torch.compile each transformer layer ('auto': on a CUDA device below ZeRO-3, "
                                   "off on CPU; true or false). Micro-batches are then padded to "
                                   "data.max_seq_len (one shape); the memory reads stay eager",
                          choices=("auto", "true", "false"))
    zero_stage: int | None = option(None, "ZeRO stage 0-3; unset: the DeepSpeed JSON's (zero2.json by default: "
                                         "stage 2, also on one GPU: bf16 stage 0 would accumulate gradients in bf16)")
    deepspeed_config: str = option("configs/deepspeed/zero2.json", "DeepSpeed JSON; batch, optimizer, precision and "
                                                               "clipping are filled in from this config",
                                    path="file")
    log_every: int = option(10, "optimizer steps between log lines / metrics.jsonl rows")
    eval_every: int = option(500, "optimizer steps between validation passes (0: never)")
    save_every: int = option(1000, "optimizer steps between checkpoints (0: only at the end)")
    keep_checkpoints: int = option(3, "checkpoints kept on disk (oldest deleted; 0: keep all)")
    resume: str = option("auto", "'auto' (latest checkpoint in output_dir if any), 'none', or a checkpoint tag/path")
    log_loss_grad_norms: bool = option(True, "at each logging step, also log the gradient norms of the LM term and of "
                                       "the weighted EL term alone (lm_grad_norm, el_grad_norm: one micro-batch, "
                                       "before clipping; two extra backward passes per logged step). One rank "
                                       "below ZeRO-3 with a replicated table only; elsewhere not logged")
    log_sample_ids: bool = option(False, "also write the passage ids of every global batch to samples.jsonl (tests)")
    stop_after_steps: int = option(0, "exit after this many steps (simulates a kill; 0: off). Schedule still uses max_steps")
    plot: bool = option(True, "write loss.png at the end of the run")
    peak_tflops: float = option(0.0, "per-device peak TFLOP/s for MFU (0: guess from the GPU name; no MFU on CPU)")
    report_to: list[str] = option(["auto"], "where the metrics also go, besides metrics.jsonl and loss.png: tensorboard "
                                  "(event files in output_dir/tensorboard), wandb, none, or a list (tensorboard,wandb); "
                                  "auto: tensorboard when it is installed, else none")


@dataclass
class Config:
    model: ModelConfig = option(ModelConfig(), "the EDMem model (a BART encoder-decoder around the entity memory)")
    data: DataConfig = option(DataConfig(), "the corpus and the masking")
    optim: OptimConfig = option(OptimConfig(), "AdamW and the learning-rate schedule")
    train: TrainConfig = option(TrainConfig(), "the run: batch, precision, ZeRO, logging, checkpoints")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Short forms of the most used overrides.
ALIASES = {
    "corpus": "data.path",
    "output": "train.output_dir",
    "max_steps": "train.max_steps",
    "deepspeed_config": "train.deepspeed_config",
    "zero_stage": "train.zero_stage",
    "seed": "train.seed",
    "init_from": "model.init_from",
}
# Old spellings, still accepted, not listed by --help.
HIDDEN_ALIASES = {"data": "data.path", "output_dir": "train.output_dir"}
# Keys --help shows besides the short forms (--help-config shows them all).
COMMON = ("train.global_batch_size", "train.micro_batch_size", "train.bf16", "train.report_to", "train.resume")
PROG = "wikiedm pretrain"
DESCRIPTION = "EDMem pre-training: joint masked-LM + entity linking, on DeepSpeed, with the entity memory split by rows."


def config_parser(prog: str = PROG, description: str = "") -> ConfigParser:
    """The trainer's command line: the shared parser over :class:`Config`, with the short forms."""
    from trainer.launch import add_launcher_flags

    parser = ConfigParser(Config, prog=prog, description=description or DESCRIPTION, aliases=ALIASES,
                          hidden_aliases=HIDDEN_ALIASES, common=COMMON, pass_unknown=False, validator=validate)
    add_launcher_flags(parser)  # --num_gpus N ...: start the ranks through DeepSpeed's launcher
    # The deepspeed launcher's conventions: a bare --deepspeed (DeepSpeed is always on here; with a value it
    # names the DeepSpeed JSON) and --local_rank (LOCAL_RANK is in the environment too).
    # Both are accepted and not listed: --deepspeed_config is the documented name.
    parser.parser.add_argument("--deepspeed", nargs="?", const=IGNORED, dest="train.deepspeed_config",
                               default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parser.parser.add_argument("--local_rank", dest="_local_rank", help=argparse.SUPPRESS)
    parser.add_bool("--overwrite", default=False,
                    help="replace another run's checkpoints and metrics in --output (they are removed first); a "
                         "resume with the same config and corpus needs no --overwrite")
    return parser


def load_config(path: str | None, overrides: list[str] = ()) -> Config:
    """Defaults, then the YAML file, then ``--key=value`` / ``--key value`` overrides."""
    try:
        cfg, _ = config_parser().parse([*(["--config", path] if path else []), *overrides])
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None
    validate(cfg)
    return cfg


# Keys whose value must be at least this (a 0 or a negative size fails late: inside the ranks, after DeepSpeed started).
_AT_LEAST = {
    "model.d_model": 1, "model.attention_heads": 1, "model.ffn_dim": 1, "model.entity_dim": 1,
    "model.max_positions": 1, "model.inference_top_k": 1, "model.entity_block_size": 1,
    "model.lower_layers": 0, "model.upper_layers": 0,
    "data.max_seq_len": 8, "data.shuffle_window_row_groups": 1, "data.validation_batches": 0,
    "data.overfit_passages": 0,
    "train.max_steps": 1, "train.global_batch_size": 1, "train.log_every": 1, "train.eval_every": 0,
    "train.save_every": 0, "train.keep_checkpoints": 0, "train.stop_after_steps": 0,
}
# Keys whose value must lie in [low, high].
_WITHIN = {
    "model.dropout": (0.0, 1.0), "model.attention_dropout": (0.0, 1.0), "model.activation_dropout": (0.0, 1.0),
    "optim.warmup_fraction": (0.0, 1.0), "optim.lr": (0.0, float("inf")), "optim.weight_decay": (0.0, float("inf")),
    "optim.el_weight": (0.0, float("inf")),
}


def _value(cfg: Config, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def validate(cfg: Config) -> None:
    for key, least in _AT_LEAST.items():
        value = _value(cfg, key)
        if value < least:
            raise SystemExit(f"{key} must be >= {least}, got {value}")
    for key, (low, high) in _WITHIN.items():
        value = _value(cfg, key)
        if not low <= value <= high:
            raise SystemExit(f"{key} must be in [{low:g}, {high:g}], got {value}")
    if cfg.train.zero_stage not in (None, 0, 1, 2, 3):
        raise SystemExit(f"train.zero_stage must be 0..3, got {cfg.train.zero_stage}")
    if cfg.model.max_positions < cfg.data.max_seq_len:
        raise SystemExit("model.max_positions must be >= data.max_seq_len")
    if cfg.model.d_model % cfg.model.attention_heads:
        raise SystemExit("model.d_model must be divisible by model.attention_heads")
    if not 0 <= cfg.data.random_token_mask_prob <= 1 or not 0 <= cfg.data.salient_span_mask_prob <= 1:
        raise SystemExit("masking probabilities must be in [0, 1]")
    if cfg.data.num_workers < 0:
        raise SystemExit(f"data.num_workers must be >= 0, got {cfg.data.num_workers}")
    micro = cfg.train.micro_batch_size
    if isinstance(micro, str) and micro.strip().isdigit():
        cfg.train.micro_batch_size = micro = int(micro)
    if not (micro == "auto" or (isinstance(micro, int) and not isinstance(micro, bool) and micro >= 1)):
        raise SystemExit(f"train.micro_batch_size must be a positive integer or auto, got {micro!r}")
    if str(cfg.train.compile).lower() not in ("auto", "true", "false"):
        raise SystemExit(f"train.compile must be auto, true or false, got {cfg.train.compile!r}")
    if cfg.model.memory not in MEMORY_KINDS:
        raise SystemExit(f"model.memory must be one of {', '.join(MEMORY_KINDS)}, got {cfg.model.memory!r}")
    if cfg.model.memory_partition not in ("auto", "rows", "replicated"):
        raise SystemExit(f"model.memory_partition must be auto, rows or replicated, got {cfg.model.memory_partition!r}")
    if cfg.model.memory_kernel not in ("auto", "triton", "flex", "blocked"):
        raise SystemExit(f"model.memory_kernel must be auto, triton, flex or blocked, got {cfg.model.memory_kernel!r}")
    # train.report_to's sinks are checked by trainer.metrics.report_sinks (it imports torch): in pretrain's parse_args


def help_text() -> str:
    """Every config key with its help text and default: the ``--help-config`` of ``wikiedm pretrain``."""
    return config_parser().format_help()


def dump_config(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def config_json(cfg: Config) -> str:
    return json.dumps(cfg.to_dict(), sort_keys=True)


def check_pretrain_command(prog: str, argv: list[str]) -> None:
    """What ``wikiedm pretrain`` checks before it imports torch or DeepSpeed, builds an op or writes a file."""
    from trainer.run_guard import check_run_folder, run_identity

    cfg, flags, _ = config_parser(prog).check(argv)
    if not cfg.data.path:
        raise ConfigError("--corpus is required (the corpus job's output folder)")
    check_run_folder(cfg.train.output_dir, run_identity(cfg), flags.overwrite)  # another run's checkpoints: refused


# ----------------------------------------------------------------------------- wikiedm export, wikiedm evaluate


@dataclass
class ExportConfig:
    checkpoint: str = option("", "RUN, RUN/checkpoints, or RUN/checkpoints/step_XXXXXXXX", path="dir", required=True)
    output: str = option("", "path of the .safetensors file to write", required=True, metavar="FILE")
    overwrite: bool = option(False, "replace a file exported from another run (one exported from the same run is "
                                    "replaced without it)")


def export_parser(prog: str = "wikiedm export") -> ConfigParser:
    parser = ConfigParser(ExportConfig, prog=prog, pass_unknown=False,
                          description="Export consolidated EDMem weights (safetensors) from a checkpoint")
    # the old form, `export CHECKPOINT OUTPUT`
    parser.parser.add_argument("_positional", nargs="*", default=[], help=argparse.SUPPRESS)
    return parser


def check_export_command(prog: str, argv: list[str]) -> None:
    from trainer.run_guard import check_export_output

    cfg = parse_export(argv, prog)
    check_export_output(cfg.checkpoint, cfg.output, cfg.overwrite)  # a file of another run: refused


def parse_export(argv: list[str], prog: str = "wikiedm export") -> ExportConfig:
    """The export's config; the old positional form ``export CHECKPOINT OUTPUT`` still reads."""
    parser = export_parser(prog)
    ns, unknown = parser.parser.parse_known_args(list(argv))
    flags = [a for a in unknown if a.startswith("-")]
    if flags:  # before the old positional form takes its value for a path
        raise unknown_option(flags[0], parser.option_strings())
    given = list(ns._positional)
    rest = [a for a in argv if a not in given]
    for key in ("checkpoint", "output"):
        if given and f"--{key}" not in rest and not any(a.startswith(f"--{key}=") for a in rest):
            rest += [f"--{key}", given.pop(0)]
    if given:
        raise ConfigError(f"unexpected argument(s): {' '.join(given)}")
    return parser.check(rest)[0]


@dataclass
class EvaluateConfig:
    checkpoint: str = option("", "RUN, RUN/checkpoints, or RUN/checkpoints/step_XXXXXXXX", path="dir", required=True)
    corpus: str = option("", "the corpus whose validation passages are scored (use the hyperlinks-only corpus: "
                             "--labels.hyperlinks_only true)", path="corpus", required=True)
    model_corpus: str = option("", "the corpus the model was trained on (its entity vocabulary); '': the run's "
                                   "data.path (RUN/config.yaml)", path="corpus")
    batch_size: int = option(32, "passages per forward pass")
    max_seq_len: int = option(0, "sequence length with markers; 0: the run's data.max_seq_len (as in training)")
    device: str = option("auto", "torch device: auto (CUDA when available), cpu, cuda, cuda:1")
    max_passages: int = option(0, "score this many validation passages, evenly spaced in passage-id order (0: all)")
    output: str = option("", "write the metrics here as JSON (else only printed)", metavar="FILE")

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be >= 1, got {self.batch_size}")
        for name in ("max_seq_len", "max_passages"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")


def evaluate_parser(prog: str = "wikiedm evaluate") -> ConfigParser:
    return ConfigParser(EvaluateConfig, prog=prog, pass_unknown=False,
                        description="fixed evaluation of a checkpoint on a corpus's validation hyperlinks")
