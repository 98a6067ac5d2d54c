"""EDMem pre-training on DeepSpeed: the last stage of the data flow.

    dump -> pages -> mentions -> aliases -> labels -> windows -> shards   (pipelines/, Beam)
    shards + entity vocabulary + tokenizer -> EDMem pre-training          (here)

It reads a finished corpus folder through the base package ``wikiedm`` (validation against the
manifest, the tokenizer, the shared config mechanism) and needs neither ``pipelines`` nor Apache Beam.
"""
