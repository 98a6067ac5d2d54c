"""Streaming data for EDMem pre-training: corpus checks, sample order, sequences, masking, batches.

Sample order. The training samples form ONE global sequence that depends only on
the corpus and the seed, never on the number of ranks:

    epoch e: the train row groups (over all shards) in a seeded random order, cut into
    windows of ``shuffle_window_row_groups`` row groups; the rows of a window are
    shuffled together (the bounded shuffle buffer); windows follow each other.

Global sample k is therefore found without reading anything before it (resumable
from a sample count). Optimizer step s consumes global samples
[s*G, (s+1)*G) with G the global batch size; rank r of W takes the contiguous slice
[s*G + r*G/W, s*G + (r+1)*G/W) and splits it into micro-batches. After a change of
W, resuming at sample s*G continues the same sequence with the same global batches.
Every row is consumed by exactly one rank; each rank reads (with column projection)
only the row groups of the windows its rows fall in, one window in memory at a time.

Sequences. ``<s> tokens </s>`` with ``[Es]`` before and ``[Ee]`` after each mention,
the mention's entity id at its ``[Es]`` position. The markers count against
``max_seq_len``: when a passage does not fit, its last mentions lose their markers
first (counted as dropped mentions); tokens are cut only if the passage alone is too
long (mentions that cross the cut are dropped too).

Masking (encoder input only; the decoder reconstructs the original sequence): each
mention has all its tokens masked with P_ssm (salient span masking), then every other
non-special token with P_rtm. Special tokens (<s>, </s>, [Es], [Ee], <pad>) are never
masked; chosen tokens become <mask>. The masking RNG is seeded by (seed, global sample
index), so masks do not depend on ranks, workers or resumption.

Speed. ``build_example`` and ``mask_example`` define a sequence and its masks passage by
passage (``ReferenceCollator``). Training reads row groups as flat arrays (``Passages``: the
token ids and three mention fields, no Python object per token) and ``Collator`` makes the
same batches, bit for bit, with numpy over the whole batch (tests/trainer/test_data.py;
benchmarks/bench_data.py measures both). ``data.num_workers`` processes per rank make the
steps in turn (``WorkerBatches``), outside the training loop's GIL; the loop logs how long it
waited for them (``data_wait_s``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from schemas import ENTITY_VOCAB_SCHEMA

ENTITY_START, ENTITY_END = "[Es]", "[Ee]"
_COLUMNS = ["passage_id", "token_ids", "mentions"]


class CorpusError(RuntimeError):
    """The corpus directory is incomplete, corrupt or not the pipeline's output."""


# ----------------------------------------------------------------------------- corpus


@dataclass
class Corpus:
    root: Path
    manifest: dict
    train_shards: list[Path]
    validation_shards: list[Path]
    n_entities: int  # rows of the entity vocabulary = size of the entity table

    @property
    def tokenizer_dir(self) -> Path:
        return self.root / "tokenizer"


def open_corpus(path: str | Path, verify_sha256: bool = True) -> Corpus:
    """Check the pipeline's output contract before any training step; raise CorpusError naming the problem."""
    from wikiedm.validate import InvalidOutputError, validate_output

    root = Path(path)
    if not root.is_dir():
        raise CorpusError(f"corpus directory {root} does not exist")
    if not (root / "manifest.json").exists():
        raise CorpusError(f"{root} has no manifest.json: the pipeline did not finish writing this corpus "
                          "(the manifest is written last); refusing to train on it")
    try:  # files, sizes, rows, sha256 and schemas against the manifest
        manifest = validate_output(str(root), check_sha256=verify_sha256, kinds=("passages", "entity_vocab"))
    except InvalidOutputError as exc:
        raise CorpusError(str(exc)) from None
    shards = {"train": [], "validation": []}
    for entry in sorted(manifest["files"], key=lambda e: e["path"]):
        if entry["kind"] == "passages":
            split = Path(entry["path"]).name.split("-")[0]
            if split in shards:
                shards[split].append(root / entry["path"])
    if not shards["train"]:
        raise CorpusError(f"{root / 'manifest.json'} lists no passages/train-*.parquet shard")
    vocab_path = root / "entity_vocab" / "entity_vocab.parquet"
    if not vocab_path.exists():
        raise CorpusError(f"{vocab_path} is missing")
    ids = pq.read_table(vocab_path, columns=[ENTITY_VOCAB_SCHEMA.field("entity_id").name]).column(0)
    n_entities = int(pq.ParquetFile(vocab_path).metadata.num_rows)
    if n_entities and int(max(ids.to_pylist())) != n_entities - 1:
        raise CorpusError(f"{vocab_path}: entity ids are not 0..{n_entities - 1}")
    if not (root / "tokenizer").is_dir():
        raise CorpusError(f"{root / 'tokenizer'} is missing")
    for shard in shards["train"] + shards["validation"]:
        check_entity_id_range(shard, n_entities, root)
    return Corpus(root, manifest, shards["train"], shards["validation"], n_entities)


ENTITY_ID_COLUMN = "mentions.list.element.entity_id"


def check_entity_id_range(shard: Path, n_entities: int, root: Path) -> None:
    """From the Parquet statistics alone (no data read): every linked entity id must index the table.

    Passages and entity_vocab from two different runs fail here, at start-up, with the shard and
    the id; shards written without statistics are checked batch by batch (``check_entity_ids``).
    """
    md = pq.ParquetFile(shard).metadata
    column = next((i for i in range(md.num_columns) if md.schema.column(i).path == ENTITY_ID_COLUMN), None)
    if column is None:
        return
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            continue
        bad = stats.max if stats.max >= n_entities else stats.min if stats.min < 0 else None
        if bad is not None:
            raise CorpusError(f"{root}: {shard.relative_to(root)} links entity id {bad}, outside the entity "
                              f"vocabulary of this corpus (ids 0..{n_entities - 1}): its passages were built with "
                              f"a different entity vocabulary")


@dataclass(frozen=True)
class TokenIds:
    pad: int
    bos: int
    eos: int
    mask: int
    entity_start: int
    entity_end: int
    vocab_size: int

    @property
    def special(self) -> tuple[int, ...]:
        return (self.pad, self.bos, self.eos, self.mask, self.entity_start, self.entity_end)


def load_tokenizer(tokenizer_dir: str | Path):
    """The corpus tokenizer with [Es]/[Ee] (and any missing pad/bos/eos/mask) added as special tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    defaults = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "mask_token": "<mask>"}
    missing = {k: v for k, v in defaults.items() if getattr(tok, k) is None}
    if missing:
        tok.add_special_tokens(missing)
    tok.add_special_tokens({"additional_special_tokens": [ENTITY_START, ENTITY_END]})
    ids = TokenIds(pad=tok.pad_token_id, bos=tok.bos_token_id, eos=tok.eos_token_id, mask=tok.mask_token_id,
                   entity_start=tok.convert_tokens_to_ids(ENTITY_START),
                   entity_end=tok.convert_tokens_to_ids(ENTITY_END), vocab_size=len(tok))
    return tok, ids


# ----------------------------------------------------------------------------- sequences and masking


@dataclass
class Example:
    tokens: list[int]  # <s> ... </s> with markers, original (unmasked)
    entity_ids: list[int]  # entity id at each [Es], 0 elsewhere
    mention_spans: list[tuple[int, int, int]]  # ([Es] position, first token, end token) in `tokens`
    dropped_mentions: int
    truncated_tokens: int


def select_mentions(n_tokens: int, starts: list[int], ends: list[int], entity_ids: list[int],
                    max_seq_len: int) -> tuple[list[tuple[int, int, int]], int, int]:
    """Which mentions keep their markers, and how many tokens stay: -> ([(start, end, entity id)], kept tokens,
    dropped mentions). The rules of the module docstring; shared by ``build_example`` and ``Collator``."""
    budget = max_seq_len - 2  # <s> and </s>
    spans, last_end = [], 0
    dropped = 0
    for i in sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i])):
        start, end = starts[i], ends[i]
        if start < last_end or not 0 <= start < end <= n_tokens:
            dropped += 1  # overlapping or malformed: the markers cannot nest
            continue
        spans.append((start, end, entity_ids[i]))
        last_end = end
    kept_tokens = n_tokens
    if n_tokens > budget:
        # Keep the most leading mentions whose markers fit beside them: the k-th mention (end e_k) survives
        # when e_k + 2k <= budget; the text is then cut to budget - 2k tokens (never all the markers for the
        # sake of a few tail tokens, which would leave a passage longer than the budget without any mention).
        keep = 0
        while keep < len(spans) and spans[keep][1] + 2 * (keep + 1) <= budget:
            keep += 1
        kept_tokens = len(range(n_tokens)[:budget - 2 * keep])
        dropped += len(spans) - keep
        spans = spans[:keep]
    while spans and kept_tokens + 2 * len(spans) > budget:
        spans.pop()
        dropped += 1
    return spans, kept_tokens, dropped


def build_example(token_ids, mentions, ids: TokenIds, max_seq_len: int) -> Example:
    """One passage's sequence (the per-example definition; ``Collator`` builds whole batches at once)."""
    spans, kept, dropped = select_mentions(len(token_ids), [m["token_start"] for m in mentions],
                                           [m["token_end"] for m in mentions], [m["entity_id"] for m in mentions],
                                           max_seq_len)
    tokens = list(token_ids)[:kept]
    seq, entity_ids, out_spans = [ids.bos], [0], []
    cursor = 0
    for start, end, entity_id in spans:
        seq += tokens[cursor:start]
        entity_ids += [0] * (start - cursor)
        es_pos = len(seq)
        seq += [ids.entity_start] + tokens[start:end] + [ids.entity_end]
        entity_ids += [entity_id] + [0] * (end - start + 1)
        out_spans.append((es_pos, es_pos + 1, es_pos + 1 + end - start))
        cursor = end
    seq += tokens[cursor:] + [ids.eos]
    entity_ids += [0] * (len(tokens) - cursor + 1)
    return Example(seq, entity_ids, out_spans, dropped, len(token_ids) - kept)


def masking_rngs(seed: int, masking_stream: int, sample_indices: list[int]):
    """The masking RNG of each sample: ``default_rng([seed, masking_stream, sample_index])``.

    Values below 2**32 are passed as uint32 arrays, the very words SeedSequence makes of the list (the
    same streams), at half the cost of converting a list.
    """
    keys = [(seed, masking_stream, k) for k in sample_indices]
    if all(0 <= v < 2**32 for v in (seed, masking_stream, *sample_indices)):
        keys = np.array(keys, dtype=np.uint32)
    for key in keys:
        yield np.random.default_rng(key if isinstance(key, np.ndarray) else list(key))


def mask_example(example: Example, rng: np.random.Generator, ids: TokenIds, p_rtm: float, p_ssm: float):
    """-> (masked token list, [Es] positions whose mention was span-masked).

    The per-example definition of the masking: one draw per mention (span masking), then one per position
    (random tokens), in that order, from the sample's own RNG.
    """
    masked = np.array(example.tokens)
    chosen = np.zeros(len(masked), dtype=bool)
    ssm_positions = []
    span_draws = rng.random(len(example.mention_spans))
    for (es_pos, start, end), draw in zip(example.mention_spans, span_draws):
        if draw < p_ssm:
            chosen[start:end] = True
            ssm_positions.append(es_pos)
    maskable = ~np.isin(masked, ids.special)
    chosen |= maskable & (rng.random(len(masked)) < p_rtm)
    chosen &= maskable  # never a special token
    masked[chosen] = ids.mask
    return masked.tolist(), ssm_positions


def check_entity_ids(rows: list[dict], n_entities: int, source: str) -> None:
    """Every mention's entity id must index the entity table; else one clear line naming the corpus and the id."""
    for row in rows:
        for m in row["mentions"]:
            eid = m["entity_id"]
            if not 0 <= eid < n_entities:
                raise CorpusError(_entity_id_error(source, row["passage_id"], eid, n_entities))


def _entity_id_error(source: str, passage_id: str, entity_id: int, n_entities: int) -> str:
    return (f"{source}: passage {passage_id!r} links entity id {entity_id}, outside the entity vocabulary of this "
            f"corpus (ids 0..{n_entities - 1}): its passages were built with a different entity vocabulary")


@dataclass
class Passages:
    """Passages as flat arrays, in Arrow's own layout: passage b's tokens are
    ``token_ids[token_offsets[b]:token_offsets[b + 1]]``, its mentions likewise by ``mention_offsets``.

    A row group read into this form holds no Python object per token or mention (``to_pylist`` made
    one per token: most of the data path's time), and a batch is collated from it with numpy.
    """
    passage_ids: list[str]
    token_ids: np.ndarray  # int32, every passage's tokens one after the other
    token_offsets: np.ndarray  # int64, len(passages) + 1, starting at 0
    mention_starts: np.ndarray  # int32 token_start of every mention
    mention_ends: np.ndarray  # int32 token_end (exclusive)
    mention_entity_ids: np.ndarray  # int32
    mention_offsets: np.ndarray  # int64, len(passages) + 1, starting at 0

    def __len__(self) -> int:
        return len(self.passage_ids)

    @classmethod
    def from_table(cls, table: pa.Table) -> Passages:
        """From a table with passage_id, token_ids and mentions (mentions may hold only the three fields read)."""
        tokens = table.column("token_ids").combine_chunks()
        mentions = table.column("mentions").combine_chunks()
        token_values, token_offsets = _list_parts(tokens)
        struct, mention_offsets = _list_parts(mentions)
        fields = dict(zip((f.name for f in struct.type), struct.flatten()))
        return cls(table.column("passage_id").to_pylist(), token_values.to_numpy(), token_offsets,
                   *(fields[name].to_numpy() for name in ("token_start", "token_end", "entity_id")), mention_offsets)

    @classmethod
    def from_rows(cls, rows: list[dict]) -> Passages:
        """From rows as ``to_pylist`` gives them (validation batches, tests)."""
        def offsets(lengths):
            return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)

        mentions = [m for r in rows for m in r["mentions"]]
        column = lambda key: np.array([m[key] for m in mentions], dtype=np.int32)  # noqa: E731
        return cls([r["passage_id"] for r in rows],
                   np.array([t for r in rows for t in r["token_ids"]], dtype=np.int32),
                   offsets([len(r["token_ids"]) for r in rows]),
                   column("token_start"), column("token_end"), column("entity_id"),
                   offsets([len(r["mentions"]) for r in rows]))

    @classmethod
    def gather(cls, parts: list[tuple[Passages, int]]) -> Passages:
        """The passages ``source[row]`` of ``parts``, in that order, as one batch."""
        tokens, mentions, n_tokens, n_mentions = [], [], [], []
        for p, r in parts:
            lo, hi = p.token_offsets[r], p.token_offsets[r + 1]
            tokens.append(p.token_ids[lo:hi]), n_tokens.append(hi - lo)
            lo, hi = p.mention_offsets[r], p.mention_offsets[r + 1]
            mentions.append((p.mention_starts[lo:hi], p.mention_ends[lo:hi], p.mention_entity_ids[lo:hi]))
            n_mentions.append(hi - lo)
        offsets = lambda lengths: np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])  # noqa: E731
        columns = [np.concatenate([np.zeros(0, np.int32), *column]) for column in zip(*mentions)] if parts else \
            [np.zeros(0, np.int32)] * 3
        return cls([p.passage_ids[r] for p, r in parts], np.concatenate([np.zeros(0, np.int32), *tokens]),
                   offsets(n_tokens), *columns, offsets(n_mentions))

    def to_rows(self) -> list[dict]:
        """Rows as ``to_pylist`` gives them, with the mention fields the collators read."""
        tokens, mentions = self.token_ids.tolist(), zip(self.mention_starts.tolist(), self.mention_ends.tolist(),
                                                        self.mention_entity_ids.tolist())
        mentions = [{"token_start": s, "token_end": e, "entity_id": i} for s, e, i in mentions]
        t, m = self.token_offsets.tolist(), self.mention_offsets.tolist()
        return [{"passage_id": pid, "token_ids": tokens[t[b]:t[b + 1]], "mentions": mentions[m[b]:m[b + 1]]}
                for b, pid in enumerate(self.passage_ids)]

    def check_entity_ids(self, n_entities: int, source: str) -> None:
        """``check_entity_ids`` over the whole batch at once: the same error, for the same first bad mention."""
        bad = np.flatnonzero((self.mention_entity_ids < 0) | (self.mention_entity_ids >= n_entities))
        if len(bad):
            row = int(np.searchsorted(self.mention_offsets, bad[0], side="right")) - 1
            raise CorpusError(_entity_id_error(source, self.passage_ids[row], int(self.mention_entity_ids[bad[0]]),
                                               n_entities))


def _list_parts(array: pa.ListArray) -> tuple[pa.Array, np.ndarray]:
    """A list array's values (only those its rows cover) and its offsets from 0."""
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return values, offsets - offsets[0]


# The tensors of a collated batch that the model takes (the rest is bookkeeping: sample indices, passage ids...).
MODEL_INPUTS = ("input_ids", "attention_mask", "decoder_input_ids", "labels", "entity_ids", "decoder_entity_ids",
                "masked_mentions", "decoder_masked_mentions")


class Collator:
    """Passages -> a padded batch of tensors for ``EDMem.forward`` (plus bookkeeping).

    The batch is exactly the one ``ReferenceCollator`` builds example by example (``build_example``,
    ``mask_example``; the tests compare them tensor for tensor), made with numpy over the whole batch:
    Python runs per passage and per mention, never per token. With ``n_entities`` set, every mention's
    entity id is checked against the table size first: a corpus mixed from two runs fails with its
    name and the bad id, not with an IndexError or a device-side assert deep in the model.
    """

    def __init__(self, ids: TokenIds, max_seq_len: int, p_rtm: float, p_ssm: float, seed: int,
                 n_entities: int | None = None, source: str = "corpus"):
        self.ids, self.max_seq_len, self.p_rtm, self.p_ssm, self.seed = ids, max_seq_len, p_rtm, p_ssm, seed
        self.n_entities, self.source = n_entities, source

    def __call__(self, passages: Passages | list[dict], sample_indices: list[int], masking_stream: int = 0) -> dict:
        if not isinstance(passages, Passages):
            passages = Passages.from_rows(passages)
        ids = self.ids
        if self.n_entities is not None:
            passages.check_entity_ids(self.n_entities, self.source)
        # Per passage (Python ints, a few mentions each): which mentions keep markers, how many tokens stay.
        B = len(passages)
        n_tokens = np.diff(passages.token_offsets)
        starts, ends = passages.mention_starts.tolist(), passages.mention_ends.tolist()
        entities, bounds = passages.mention_entity_ids.tolist(), passages.mention_offsets.tolist()
        kept, n_spans, spans, dropped = [], [], [], 0
        for b, n in enumerate(n_tokens.tolist()):
            lo, hi = bounds[b], bounds[b + 1]
            row_spans, row_kept, row_dropped = select_mentions(n, starts[lo:hi], ends[lo:hi], entities[lo:hi],
                                                               self.max_seq_len)
            spans += row_spans
            kept.append(row_kept), n_spans.append(len(row_spans))
            dropped += row_dropped
        kept, n_spans = np.array(kept, dtype=np.int64), np.array(n_spans, dtype=np.int64)
        span_start, span_end, span_entity = np.fromiter(chain.from_iterable(spans), dtype=np.int64,
                                                        count=3 * len(spans)).reshape(-1, 3).T
        first_span = np.concatenate([[0], np.cumsum(n_spans)])
        span_row = np.repeat(np.arange(B), n_spans)
        span_rank = np.arange(len(spans)) - first_span[span_row]  # i: the passage's i-th kept mention
        lengths = kept + 2 * n_spans + 2  # <s> tokens </s> and two markers per mention
        S = int(lengths.max())
        # Positions: <s> at 0; token j after the j tokens, the [Es] of every mention starting at or before j
        # and the [Ee] of every mention ending at or before j; [Es] of the i-th mention at 1 + start + 2i.
        boundaries = np.zeros((B, int(kept.max()) + 1), dtype=np.int64)
        boundaries[span_row, span_start] += 1  # starts are distinct within a passage, and so are ends
        boundaries[span_row, span_end] += 1
        before = np.cumsum(boundaries, axis=1)
        token_row = np.repeat(np.arange(B), n_tokens)
        token_pos = np.arange(len(passages.token_ids)) - np.repeat(passages.token_offsets[:-1], n_tokens)
        keep = token_pos < kept[token_row]
        token_row, token_pos = token_row[keep], token_pos[keep]
        es_col = 1 + span_start + 2 * span_rank
        ee_col = 2 + span_end + 2 * span_rank
        seq = np.full((B, S), ids.pad, dtype=np.int64)
        seq[:, 0] = ids.bos
        seq[token_row, 1 + token_pos + before[token_row, token_pos]] = passages.token_ids[keep]
        seq[span_row, es_col] = ids.entity_start
        seq[span_row, ee_col] = ids.entity_end
        seq[np.arange(B), lengths - 1] = ids.eos
        entity_ids = np.zeros((B, S), dtype=np.int64)
        entity_ids[span_row, es_col] = span_entity
        # Masking: each sample's own RNG draws its mentions', then its positions' uniforms (mask_example's order).
        token_draws = np.ones((B, S))  # 1.0 at padding: never below a probability
        span_draws = [np.zeros(0)]
        for b, (rng, row_spans, length) in enumerate(zip(masking_rngs(self.seed, masking_stream, sample_indices),
                                                         n_spans.tolist(), lengths.tolist())):
            span_draws.append(rng.random(row_spans))
            rng.random(out=token_draws[b, :length])
        span_draws = np.concatenate(span_draws)
        span_masked = span_draws < self.p_ssm
        inside = np.zeros((B, S + 1), dtype=np.int64)  # +1 from a chosen mention's first token to its [Ee]
        inside[span_row[span_masked], es_col[span_masked] + 1] += 1
        inside[span_row[span_masked], ee_col[span_masked]] -= 1
        maskable = np.logical_and.reduce([seq != s for s in ids.special])
        chosen = ((np.cumsum(inside, axis=1)[:, :S] > 0) | (token_draws < self.p_rtm)) & maskable
        masked_mentions = np.zeros((B, S), dtype=bool)
        masked_mentions[span_row[span_masked], es_col[span_masked]] = True
        labels = np.where(np.arange(S) < lengths[:, None], seq, -100)
        input_ids = np.where(chosen, ids.mask, seq)
        # Decoder: teacher forcing on the original sequence, shifted right, starting with </s> (BART's convention).
        decoder_input_ids = np.empty_like(seq)
        decoder_input_ids[:, 0], decoder_input_ids[:, 1:] = ids.eos, seq[:, :-1]
        arrays = {
            "input_ids": input_ids,
            "attention_mask": input_ids != ids.pad,
            "decoder_input_ids": decoder_input_ids,
            "labels": labels,
            "entity_ids": entity_ids,
            "decoder_entity_ids": _shift_right(entity_ids),
            "masked_mentions": masked_mentions,
            "decoder_masked_mentions": _shift_right(masked_mentions),
        }
        return {**{k: torch.from_numpy(v) for k, v in arrays.items()},
                # bookkeeping, not model inputs
                "passage_ids": list(passages.passage_ids),
                "sample_indices": list(sample_indices),
                "dropped_mentions": dropped,
                "truncated_tokens": int((n_tokens - kept).sum())}


def _shift_right(a: np.ndarray) -> np.ndarray:
    out = np.zeros_like(a)
    out[:, 1:] = a[:, :-1]
    return out


class ReferenceCollator(Collator):
    """The batch built example by example (``build_example``, ``mask_example``): the definition that ``Collator``
    must reproduce exactly. The tests and benchmarks/bench_data.py compare the two; training uses ``Collator``."""

    def __call__(self, rows: Passages | list[dict], sample_indices: list[int], masking_stream: int = 0) -> dict:
        if isinstance(rows, Passages):
            rows = rows.to_rows()
        ids = self.ids
        if self.n_entities is not None:
            check_entity_ids(rows, self.n_entities, self.source)
        examples, masked_inputs, ssm = [], [], []
        for row, k in zip(rows, sample_indices):
            ex = build_example(row["token_ids"], row["mentions"], ids, self.max_seq_len)
            rng = np.random.default_rng([self.seed, masking_stream, k])
            inp, ssm_pos = mask_example(ex, rng, ids, self.p_rtm, self.p_ssm)
            examples.append(ex), masked_inputs.append(inp), ssm.append(ssm_pos)
        B, S = len(examples), max(len(e.tokens) for e in examples)
        input_ids = torch.full((B, S), ids.pad, dtype=torch.long)
        labels = torch.full((B, S), -100, dtype=torch.long)
        entity_ids = torch.zeros((B, S), dtype=torch.long)
        masked_mentions = torch.zeros((B, S), dtype=torch.bool)
        for b, (ex, inp, ssm_pos) in enumerate(zip(examples, masked_inputs, ssm)):
            n = len(ex.tokens)
            input_ids[b, :n] = torch.tensor(inp)
            labels[b, :n] = torch.tensor(ex.tokens)
            entity_ids[b, :n] = torch.tensor(ex.entity_ids)
            masked_mentions[b, ssm_pos] = True
        # Decoder: teacher forcing on the original sequence, shifted right, starting with </s> (BART's convention).
        decoder_input_ids = torch.full((B, S), ids.pad, dtype=torch.long)
        decoder_input_ids[:, 0] = ids.eos
        decoder_input_ids[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1].eq(-100), ids.pad)
        shift = lambda t: torch.cat([torch.zeros_like(t[:, :1]), t[:, :-1]], dim=1)  # noqa: E731
        return {
            "input_ids": input_ids,
            "attention_mask": input_ids.ne(ids.pad),
            "decoder_input_ids": decoder_input_ids,
            "labels": labels,
            "entity_ids": entity_ids,
            "decoder_entity_ids": shift(entity_ids),
            "masked_mentions": masked_mentions,
            "decoder_masked_mentions": shift(masked_mentions),
            # bookkeeping, not model inputs
            "passage_ids": [r["passage_id"] for r in rows],
            "sample_indices": list(sample_indices),
            "dropped_mentions": sum(e.dropped_mentions for e in examples),
            "truncated_tokens": sum(e.truncated_tokens for e in examples),
        }


# ----------------------------------------------------------------------------- global sample order


class GlobalSampleOrder:
    """Maps a global sample index to (shard, row group, row), the same on every rank; see module docstring."""

    def __init__(self, shards: list[Path], seed: int, window_row_groups: int, limit_rows: int = 0):
        """``limit_rows`` > 0: only the first rows of the split (in shard order) form the epoch (overfit runs)."""
        self.shards = list(shards)
        self.seed = seed
        self.window = max(1, window_row_groups)
        self.row_groups = []  # (shard index, row group index, rows)
        for s, path in enumerate(self.shards):
            md = pq.ParquetFile(path).metadata
            self.row_groups += [(s, g, md.row_group(g).num_rows) for g in range(md.num_row_groups)]
        self.row_groups = [rg for rg in self.row_groups if rg[2] > 0]
        if limit_rows > 0:  # keep the first row groups, the last one cut to its first rows
            kept, left = [], limit_rows
            for s, g, n in self.row_groups:
                if left <= 0:
                    break
                kept.append((s, g, min(n, left)))
                left -= n
            self.row_groups = kept
        self.epoch_size = sum(rg[2] for rg in self.row_groups)
        if self.epoch_size == 0:
            raise CorpusError("the train split has no rows")
        self._epoch_cache: tuple[int, list[list[int]], np.ndarray] | None = None

    def _epoch_plan(self, epoch: int):
        """Windows of row-group indices, and the first global-in-epoch sample of each window."""
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            order = np.random.default_rng([self.seed, epoch, 0]).permutation(len(self.row_groups)).tolist()
            windows = [order[i:i + self.window] for i in range(0, len(order), self.window)]
            starts = np.cumsum([0] + [sum(self.row_groups[g][2] for g in w) for w in windows])
            self._epoch_cache = (epoch, windows, starts)
        return self._epoch_cache[1], self._epoch_cache[2]

    def window_rows(self, epoch: int, window: int) -> list[tuple[int, int]]:
        """The shuffled (row group, row) pairs of one window."""
        windows, _ = self._epoch_plan(epoch)
        pairs = [(g, r) for g in windows[window] for r in range(self.row_groups[g][2])]
        perm = np.random.default_rng([self.seed, epoch, 1, window]).permutation(len(pairs))
        return [pairs[i] for i in perm]

    def locate(self, index: int) -> tuple[int, int, int]:
        """Global sample index -> (epoch, window, position in window)."""
        epoch, within = divmod(index, self.epoch_size)
        _, starts = self._epoch_plan(epoch)
        window = int(np.searchsorted(starts, within, side="right") - 1)
        return epoch, window, int(within - starts[window])


class RowReader:
    """Reads passages by (row group, row), one window's row groups in memory at a time, as ``Passages``."""

    def __init__(self, order: GlobalSampleOrder):
        self.order = order
        self._files: dict[int, tuple[pq.ParquetFile, list[str]]] = {}
        self._cache: dict[int, Passages] = {}
        self._cache_key = None

    def row_group(self, key, g: int) -> Passages:
        """Row group ``g`` (an index into ``order.row_groups``) of the window ``key``."""
        if self._cache_key != key:  # a new window: forget the previous one (bounded memory)
            self._cache, self._cache_key = {}, key
        if g not in self._cache:
            s, rg, _ = self.order.row_groups[g]
            if s not in self._files:
                f = pq.ParquetFile(self.order.shards[s])
                self._files[s] = f, passage_columns(f)
            f, columns = self._files[s]
            self._cache[g] = Passages.from_table(f.read_row_group(rg, columns=columns))
        return self._cache[g]


def passage_columns(f: pq.ParquetFile) -> list[str]:
    """The Parquet columns the collator reads: passage_id, token_ids and three of the mentions' eight fields."""
    wanted = {"token_start", "token_end", "entity_id"}
    paths = [f.schema.column(i).path for i in range(f.metadata.num_columns)]
    mentions = [p for p in paths if p.startswith("mentions.") and p.rsplit(".", 1)[-1] in wanted]
    return ["passage_id", "token_ids", *mentions] if len(mentions) == len(wanted) else _COLUMNS


class TrainBatches:
    """This rank's micro-batches, global batch after global batch, from a global sample index on.

    Yields lists of micro-batches: one optimizer step's worth (global_batch / world / micro of them).
    With ``every_steps`` = n, only every n-th step from the start (what one of n worker processes makes).
    """

    def __init__(self, order: GlobalSampleOrder, collator: Collator, global_batch: int, micro_batch: int,
                 rank: int, world_size: int, start_sample: int = 0, every_steps: int = 1):
        if global_batch % (micro_batch * world_size):
            raise ValueError(f"global batch {global_batch} is not a multiple of micro batch {micro_batch} "
                             f"x {world_size} ranks")
        if start_sample % global_batch:
            raise ValueError(f"resume position {start_sample} is not at a global-batch boundary of {global_batch}")
        self.order, self.collator = order, collator
        self.global_batch, self.micro_batch = global_batch, micro_batch
        self.rank, self.world_size = rank, world_size
        self.samples_seen = start_sample  # global samples consumed by all ranks together: the resume position
        self.every_steps = every_steps
        self.reader = RowReader(order)
        self._window_key, self._window_rows = None, []

    @property
    def accumulation_steps(self) -> int:
        return self.global_batch // (self.micro_batch * self.world_size)

    def _samples(self, first: int, count: int) -> tuple[Passages, list[int]]:
        parts, k = [], first
        while k < first + count:  # consecutive samples, window by window
            epoch, window, pos = self.order.locate(k)
            if self._window_key != (epoch, window):  # the window's shuffle, made once per window
                self._window_key, self._window_rows = (epoch, window), self.order.window_rows(epoch, window)
            taken = self._window_rows[pos:pos + first + count - k]
            parts += [(self.reader.row_group((epoch, window), g), r) for g, r in taken]
            k += len(taken)
        return Passages.gather(parts), list(range(first, first + count))

    def __iter__(self):
        return self

    def __next__(self) -> list[dict]:
        per_rank = self.global_batch // self.world_size
        first = self.samples_seen + self.rank * per_rank
        micro_batches = []
        for m in range(self.accumulation_steps):
            passages, indices = self._samples(first + m * self.micro_batch, self.micro_batch)
            micro_batches.append(self.collator(passages, indices))
        self.samples_seen += self.global_batch * self.every_steps
        return micro_batches


def validation_batches(shards: list[Path], collator: Collator, micro_batch: int, rank: int, world_size: int,
                       max_batches: int):
    """Fixed validation micro-batches for this rank: rows r, r+W, ... (wrapping), fixed masks.

    Every rank gets the same number of batches (ZeRO-3 needs all ranks in every forward).
    """
    rows_per_shard = [pq.ParquetFile(p).metadata.num_rows for p in shards]
    total = sum(rows_per_shard)
    if total == 0:
        return []
    n_batches = -(-total // (world_size * micro_batch))
    if max_batches:
        n_batches = min(n_batches, max_batches)
    wanted = [(rank + world_size * i) % total for i in range(n_batches * micro_batch)]
    table_rows, offset = {}, 0
    needed = set(wanted)
    for path, n in zip(shards, rows_per_shard):  # stream row groups; keep only this rank's rows
        f = pq.ParquetFile(path)
        for g in range(f.metadata.num_row_groups):
            m = f.metadata.row_group(g).num_rows
            if any(offset <= k < offset + m for k in needed):
                rows = f.read_row_group(g, columns=_COLUMNS).to_pylist()
                for k in range(offset, offset + m):
                    if k in needed:
                        table_rows[k] = rows[k - offset]
            offset += m
    batches = []
    for b in range(n_batches):
        idx = wanted[b * micro_batch:(b + 1) * micro_batch]
        batches.append(collator([table_rows[k] for k in idx], idx, masking_stream=1))
    return batches


def prefetch(batches: TrainBatches, num_workers: int, depth: int = 2):
    """The training loop's batches, made ahead: in ``num_workers`` processes, or in a thread when 0."""
    return WorkerBatches(batches, num_workers, depth) if num_workers > 0 else Prefetcher(batches, depth)


class Prefetcher:
    """Makes the next steps' batches in a background thread while the current step computes.

    The wrapped iterator is consumed strictly in order by one thread, so the batches and
    their order are exactly those of the plain iterator. The thread shares the GIL with the
    training loop (``data.num_workers`` 0); ``WorkerBatches`` makes the batches outside it.
    """

    def __init__(self, iterator, depth: int = 2):
        import queue
        import threading

        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._iterator = iterator
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _put(self, kind: str, value) -> bool:
        """Queue one entry unless close() was called (then False): never blocks a closing thread."""
        import queue

        while not self._stop.is_set():
            try:
                self._queue.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self) -> None:
        try:
            for item in self._iterator:
                if not self._put("item", item):
                    return
        except BaseException as exc:  # surfaced in the consumer, not lost in the thread
            self._put("error", exc)
            return
        self._put("end", None)

    def __iter__(self):
        return self

    def __next__(self):
        kind, value = self._queue.get()
        if kind == "error":
            raise value
        if kind == "end":
            raise StopIteration
        return value

    def close(self) -> None:
        """Stop and join the thread. A daemon thread still inside Parquet or torch code when the interpreter
        exits is torn down mid-C++ call, which aborts the process ("terminate called without an active
        exception") after a run that otherwise finished."""
        self._stop.set()
        self._thread.join()


class WorkerBatches:
    """``TrainBatches`` made by worker processes, ahead of the training loop and outside its GIL.

    Worker w of n makes steps w, w + n, w + 2n, ... of the sequence (``every_steps``); the loop takes
    them from the workers in turn, so it gets exactly the plain iterator's batches, in its order
    (the masks depend on the sample index only). Batches travel as numpy arrays through a pipe.
    An error in a worker is raised in the loop; a worker that dies is reported with its exit code.
    """

    def __init__(self, batches: TrainBatches, num_workers: int, depth: int = 2):
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # never fork a process that holds CUDA or threads
        self._stop = context.Event()
        self._queues = [context.Queue(maxsize=max(1, depth)) for _ in range(num_workers)]
        self._workers = []
        for w, queue in enumerate(self._queues):
            mine = TrainBatches(batches.order, batches.collator, batches.global_batch, batches.micro_batch,
                                batches.rank, batches.world_size, batches.samples_seen + w * batches.global_batch,
                                every_steps=num_workers)
            process = context.Process(target=_make_batches, args=(mine, queue, self._stop, os.getpid()),
                                      daemon=True, name=f"batch-worker-{w}")
            process.start()
            self._workers.append(process)
        self._turn = 0

    def __iter__(self):
        return self

    def __next__(self) -> list[dict]:
        import queue

        w, self._turn = self._turn, (self._turn + 1) % len(self._workers)
        while True:
            try:
                kind, value = self._queues[w].get(timeout=1.0)
                break
            except queue.Empty:
                if not self._workers[w].is_alive() and self._queues[w].empty():
                    raise RuntimeError(f"batch worker {w} died (exit code {self._workers[w].exitcode})") from None
        if kind == "error":
            raise value
        return [{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in mb.items()} for mb in value]

    def close(self) -> None:
        """Stop the workers and wait for them (terminated if one does not stop within seconds)."""
        self._stop.set()
        for process in self._workers:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()
        for queue in self._queues:
            queue.close()
            queue.cancel_join_thread()


def _make_batches(batches: TrainBatches, queue, stop, parent: int) -> None:
    """A worker process: put every step ``batches`` makes on ``queue`` until ``stop`` is set or the rank is gone
    (a rank killed with SIGKILL sets nothing: its workers see their parent change)."""
    import queue as queues

    torch.set_num_threads(1)

    def put(entry) -> bool:
        while not stop.is_set() and os.getppid() == parent:
            try:
                queue.put(entry, timeout=0.1)
                return True
            except queues.Full:
                continue
        return False

    try:
        for micro_batches in batches:
            arrays = [{k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in mb.items()} for mb in micro_batches]
            if not put(("item", arrays)):
                break
    except BaseException as exc:  # raised in the training loop, not lost with this process
        import pickle

        try:
            pickle.dumps(exc)
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        if put(("error", exc)):
            return  # the queue's thread sends it before the process exits: the loop is waiting for it
    queue.cancel_join_thread()  # stopped: exit without flushing what the loop will never read
