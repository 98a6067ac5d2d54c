"""A BLINK-compatible entity linker (Wu et al. 2020, facebookresearch/BLINK).

The project's own implementation of BLINK's models: a bi-encoder (two BERT
encoders, the last layer's [CLS] vectors, dot-product scores) and an optional
cross-encoder re-ranker, loading BLINK's released ``biencoder_wiki_large.bin``
/ ``crossencoder_wiki_large.bin`` from a local folder or models trained here
on a corpus's own hyperlinks (same state-dict layout). The knowledge base is
a corpus's entity vocabulary and descriptions, or BLINK's released
``entity.jsonl`` + ``all_entities_large.t7`` (+ FAISS files) used as they are;
the alias table of a corpus gives mention spans and the prior the final score
combines with the model's. Golden tests against BLINK's own outputs:
``tests/linker/test_blink_golden.py``.

In the data flow (dump -> pages -> mentions -> aliases -> labels -> windows -> shards) it reads a
finished corpus (entities, descriptions, alias table, passages) through the base package
``wikiedm``; it needs neither ``pipelines`` nor Apache Beam. The corpus job calls it back only
through ``pipelines/transforms/blink.py`` (BLINK labels).

Modules:
  inputs       BLINK's input formats (context, candidate, cross-encoder pair), BLINK's tokenization
  wordpiece    BERT WordPiece tokenizer loading, and a small vocabulary builder
  biencoder    BertEncoder, BiEncoder, BLINK state-dict mapping, load/save
  crossencoder the re-ranker, load/save
  torchfile    memory-map a torch.save-d tensor (BLINK's .t7) without loading it
  mmap_store   memory-mapped string columns and hash lookups shared by worker processes
  kb           the knowledge base (corpus or BLINK's files), built once, memory-mapped
  alias_index  the alias candidate index (vocabulary entities, top-K aliases each), memory-mapped
  catalogue    in-memory entities and alias table of a corpus folder (training, evaluation)
  index        exact (chunked), HNSW (FAISS) and BLINK's FAISS files; saved encodings
  mentions     mention detection in raw text (spaCy tokenizer + alias table, NER)
  combine      the final score: model scores and alias prior, fitted on validation hyperlinks
  link         the Linker: detect, retrieve, (re-rank), combine; prepare_linker
  blink_io     BLINK's mention records, main_dense-style output and metrics
  corpus_data  training/evaluation examples from a corpus's passages
  train        bi-encoder training with in-batch negatives
  evaluate     accuracy@1 and recall@k: bi-encoder, + cross-encoder, linker, alias prior
  cli          ``python -m linker.cli {vocab,index,link,interactive,train,evaluate}``
"""
from __future__ import annotations

__all__ = ["ENT_START_TAG", "ENT_END_TAG", "ENT_TITLE_TAG"]

from linker.inputs import ENT_END_TAG, ENT_START_TAG, ENT_TITLE_TAG
