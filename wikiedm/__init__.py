"""wikiedm: a Wikipedia dump -> an entity-annotated pre-training corpus -> an EDMem model.

The data flow, and the package that holds each step:

    dump -> pages -> mentions -> aliases -> labels -> windows -> shards     pipelines/  (Beam corpus job)
    corpus shards + entity vocabulary -> EDMem pre-training                trainer/    (DeepSpeed)
    corpus KB + BLINK models -> entity links                               linker/     (BLINK-compatible)
    one dump date -> one published corpus partition                        dags/       (Airflow)

This base package sits under all of them and imports none of them (nor Beam): storage,
output validation, tokenizer loading, stopwords, the shared records, and the one config mechanism
(:mod:`wikiedm.config`, fields declared with :func:`wikiedm.fields.option`). ``wikiedm``
(:mod:`wikiedm.cli`) is the one command over all of them.
"""
