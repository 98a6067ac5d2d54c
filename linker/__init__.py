"""A BLINK-compatible entity linker (Wu et al. 2020, facebookresearch/BLINK).

The project's own implementation of BLINK's models: a bi-encoder (two BERT
encoders, the last layer's [CLS] vectors, dot-product scores) and an optional
cross-encoder re-ranker, loading BLINK's released ``biencoder_wiki_large.bin``
/ ``crossencoder_wiki_large.bin`` from a local folder or models trained here
on a corpus's own hyperlinks (same state-dict layout). Entities, their
descriptions and the alias table come from a corpus output folder.

Modules:
  inputs       BLINK's input formats (context, candidate, cross-encoder pair)
  wordpiece    BERT WordPiece tokenizer loading, and a small vocabulary builder
  biencoder    BertEncoder, BiEncoder, BLINK state-dict mapping, load/save
  crossencoder the re-ranker, load/save
  catalogue    entities, descriptions and the alias table of a corpus folder
  index        exact (chunked) and HNSW (FAISS) top-k search; saved encodings
  mentions     mention detection in raw text (spaCy tokenizer + alias table, NER)
  link         the Linker: detect, retrieve, (re-rank), score
  corpus_data  training/evaluation examples from a corpus's passages
  train        bi-encoder training with in-batch negatives
  evaluate     accuracy@1 and recall@k beside the alias-prior baseline
  cli          ``python -m linker.cli {vocab,index,link,train,evaluate}``
"""
from __future__ import annotations

__all__ = ["ENT_START_TAG", "ENT_END_TAG", "ENT_TITLE_TAG"]

from linker.inputs import ENT_END_TAG, ENT_START_TAG, ENT_TITLE_TAG
