"""Arrow schemas of every output the project writes, defined once.

Writers (``pipelines.transforms.write``) and readers (``trainer.data``, the
checks, the DAG's validation) import them from here; nothing else spells out
a column.
"""
from schemas.corpus import (
    ALIAS_SCHEMA,
    DEAD_LETTER_SCHEMA,
    ENTITY_DESCRIPTION_SCHEMA,
    ENTITY_VOCAB_SCHEMA,
    MASK_ENTITY_ID,
    MENTION_TYPE,
    PAD_ENTITY_ID,
    PASSAGE_SCHEMA,
    PASSAGE_SCHEMA_NO_TEXT,
    PASSAGE_SCHEMA_V1,
    PASSAGES_VERSION,
    READABLE_SCHEMAS,
    SCHEMAS,
    SPECIAL_ENTITIES,
    UNK_ENTITY_ID,
    passage_schema,
    readable_schema_of,
    schema_is_readable,
)

__all__ = [
    "ALIAS_SCHEMA",
    "DEAD_LETTER_SCHEMA",
    "ENTITY_DESCRIPTION_SCHEMA",
    "ENTITY_VOCAB_SCHEMA",
    "MENTION_TYPE",
    "PASSAGE_SCHEMA",
    "PASSAGE_SCHEMA_NO_TEXT",
    "PASSAGE_SCHEMA_V1",
    "PASSAGES_VERSION",
    "READABLE_SCHEMAS",
    "SCHEMAS",
    "SPECIAL_ENTITIES",
    "PAD_ENTITY_ID",
    "UNK_ENTITY_ID",
    "MASK_ENTITY_ID",
    "passage_schema",
    "readable_schema_of",
    "schema_is_readable",
]
