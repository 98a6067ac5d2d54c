"""Schemas of the corpus pipeline's Parquet outputs (see README, "Output")."""
from __future__ import annotations

import pyarrow as pa

# Entity ids 0..2 are reserved, as in LUKE's vocabulary.
PAD_ENTITY_ID = 0
UNK_ENTITY_ID = 1
MASK_ENTITY_ID = 2
SPECIAL_ENTITIES = ("[PAD]", "[UNK]", "[MASK]")


class MentionSource:
    """Where a mention came from: the one list of mention ``source`` values.

    Each value is a versioned labeler whose meaning never changes; a new rule gets a new value.
    Plain strings (not Enum members), so rows, Parquet files and counters hold exactly these.
    """

    HYPERLINK = "hyperlink"  # a link an editor wrote
    SAME_PAGE_ALIAS = "same_page_alias"  # an alias of an entity linked elsewhere on the same page
    TITLE_ALIAS = "title_alias"  # an alias of the page's own entity
    SAME_PAGE_NUMBER = "same_page_number"  # a letterless anchor the page itself links (e.g. a year)
    BLINK = "blink"  # a BLINK model's link (--blink_model)
    # Variants of a same-page or title alias, in text the exact rules left free (labels.py):
    ALIAS_FIRST_LETTER_CASE = "alias_first_letter_case"  # first letter's case swapped, on first-letter wikis
    ALIAS_PLURAL_EN = "alias_plural_en"  # English singular <-> plural of the alias's last word
    ALIAS_POSSESSIVE_EN = "alias_possessive_en"  # an English possessive alias ("Obama's") without its 's


MENTION_SOURCES = (MentionSource.HYPERLINK, MentionSource.SAME_PAGE_ALIAS, MentionSource.TITLE_ALIAS,
                   MentionSource.SAME_PAGE_NUMBER, MentionSource.BLINK, MentionSource.ALIAS_FIRST_LETTER_CASE,
                   MentionSource.ALIAS_PLURAL_EN, MentionSource.ALIAS_POSSESSIVE_EN)

# The Arrow type is the same in every version; only what char_start/char_end index changed
# (version 1: the article text; version 2: the passage's text, see passage_schema).
MENTION_TYPE = pa.struct(
    [
        pa.field("token_start", pa.int32(), nullable=False),
        pa.field("token_end", pa.int32(), nullable=False),  # exclusive
        pa.field("entity_id", pa.int32(), nullable=False),  # UNK_ENTITY_ID outside the vocabulary
        pa.field("entity", pa.string(), nullable=False),  # resolved title
        pa.field("source", pa.string(), nullable=False),  # one of MENTION_SOURCES
        pa.field("surface", pa.string(), nullable=False),
        pa.field("char_start", pa.int32(), nullable=False),  # into the passage's text (version 2)
        pa.field("char_end", pa.int32(), nullable=False),  # exclusive
    ]
)

PASSAGES_VERSION = "2"


def passage_schema(with_text: bool = True) -> pa.Schema:
    """The passages schema the job writes: with the ``text`` column, or without (``--passage_text false``).

    Version 2 (this one): ``char_offset`` is the window's first character in the
    article's plain text; ``text`` is the window's text, the exact UTF-8 decoding of
    its tokens' bytes, less a character that the window's first or last token holds
    only part of (GPT-2 byte-level BPE may split a character between two tokens);
    a mention's ``char_start``/``char_end`` index ``text``, so
    ``text[char_start:char_end] == surface``, and ``char_offset + char_start`` is its
    offset in the article. The offsets mean the same with or without ``text``.
    Version 1 (corpora written before): no ``char_offset`` nor ``text``; mention
    offsets index the article text.
    """
    fields = [
        pa.field("passage_id", pa.string(), nullable=False),  # "{page_id}:{window_index}"
        pa.field("page_id", pa.int64(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("window_index", pa.int32(), nullable=False),
        pa.field("char_offset", pa.int32(), nullable=False),  # the window's start in the article's plain text
    ]
    if with_text:
        fields.append(pa.field("text", pa.string(), nullable=False))  # the window's decoded text
    fields += [
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("mentions", pa.list_(MENTION_TYPE), nullable=False),
    ]
    return pa.schema(fields, metadata={"schema": "passages", "version": PASSAGES_VERSION,
                                       "text": "true" if with_text else "false"})


PASSAGE_SCHEMA = passage_schema(with_text=True)
PASSAGE_SCHEMA_NO_TEXT = passage_schema(with_text=False)
# What corpora written before version 2 hold: still read by the trainer, the linker and the checks.
PASSAGE_SCHEMA_V1 = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("page_id", pa.int64(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("window_index", pa.int32(), nullable=False),
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("mentions", pa.list_(MENTION_TYPE), nullable=False),
    ],
    metadata={"schema": "passages", "version": "1"},
)

ALIAS_SCHEMA = pa.schema(
    [
        pa.field("alias", pa.string(), nullable=False),
        pa.field("entity", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),  # hyperlinks with this anchor text to this entity
        pa.field("prior", pa.float64(), nullable=False),  # p(entity | alias) over hyperlinks; 0 when never an anchor
        pa.field("sources", pa.list_(pa.string()), nullable=False),  # sorted subset of anchor, title, redirect
    ],
    metadata={"schema": "alias_table", "version": "1"},
)

ENTITY_VOCAB_SCHEMA = pa.schema(
    [
        pa.field("entity_id", pa.int32(), nullable=False),
        pa.field("entity", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),  # resolved hyperlinks to it
    ],
    metadata={"schema": "entity_vocab", "version": "1"},
)

ENTITY_DESCRIPTION_SCHEMA = pa.schema(
    [
        pa.field("entity_id", pa.int32(), nullable=False),
        pa.field("entity", pa.string(), nullable=False),
        pa.field("description", pa.string(), nullable=False),  # first paragraph of the entity's article
    ],
    metadata={"schema": "entity_descriptions", "version": "1"},
)

DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("stage", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("page_id", pa.int64()),
        pa.field("title", pa.string()),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ],
    metadata={"schema": "dead_letters", "version": "1"},
)

# Output folder name -> schema; the manifest and the validators use this map.
SCHEMAS = {
    "passages": PASSAGE_SCHEMA,
    "alias_table": ALIAS_SCHEMA,
    "entity_vocab": ENTITY_VOCAB_SCHEMA,
    "entity_descriptions": ENTITY_DESCRIPTION_SCHEMA,
    "dead_letters": DEAD_LETTER_SCHEMA,
}

# Every schema a reader accepts in an output folder: the current one first, then the other
# variants the job writes (passages without text) and older versions.
READABLE_SCHEMAS = {
    **{name: (schema,) for name, schema in SCHEMAS.items()},
    "passages": (PASSAGE_SCHEMA, PASSAGE_SCHEMA_NO_TEXT, PASSAGE_SCHEMA_V1),
}


def readable_schema_of(kind: str, schema: pa.Schema) -> pa.Schema | None:
    """The schema of :data:`READABLE_SCHEMAS` a file's Arrow schema is (metadata ignored), or None."""
    bare = schema.remove_metadata()
    return next((s for s in READABLE_SCHEMAS.get(kind, ()) if bare.equals(s.remove_metadata())), None)


def schema_is_readable(kind: str, schema: pa.Schema) -> bool:
    """Whether a file's Arrow schema is one that readers of ``kind`` accept (metadata ignored)."""
    return readable_schema_of(kind, schema) is not None
