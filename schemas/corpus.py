"""Schemas of the corpus pipeline's Parquet outputs (see README, "Output")."""
from __future__ import annotations

import pyarrow as pa

# Entity ids 0..2 are reserved, as in LUKE's vocabulary.
PAD_ENTITY_ID = 0
UNK_ENTITY_ID = 1
MASK_ENTITY_ID = 2
SPECIAL_ENTITIES = ("[PAD]", "[UNK]", "[MASK]")

MENTION_SOURCES = ("hyperlink", "same_page_alias", "title_alias", "same_page_number", "blink")

MENTION_TYPE = pa.struct(
    [
        pa.field("token_start", pa.int32(), nullable=False),
        pa.field("token_end", pa.int32(), nullable=False),  # exclusive
        pa.field("entity_id", pa.int32(), nullable=False),  # UNK_ENTITY_ID outside the vocabulary
        pa.field("entity", pa.string(), nullable=False),  # resolved title
        pa.field("source", pa.string(), nullable=False),  # one of MENTION_SOURCES
        pa.field("surface", pa.string(), nullable=False),
        pa.field("char_start", pa.int32(), nullable=False),  # offsets into the article text
        pa.field("char_end", pa.int32(), nullable=False),
    ]
)

PASSAGE_SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),  # "{page_id}:{window_index}"
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
