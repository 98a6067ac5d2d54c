"""The Beam corpus job: dump -> pages -> mentions -> aliases -> labels -> windows -> shards.

    dump/        dump -> pages (decompression, page splitting, siteinfo, multistream ranges)
    wikitext/    pages -> article text + link mentions (titles, redirects, disambiguation)
    corpus/      mentions -> aliases (alias table, entity vocabulary) -> labels (missing mentions)
                 -> windows (token passages) -> the train/validation split
    transforms/  the named PTransforms around those rules; write.py: the shards and the manifest

Its output folder is what the trainer (``trainer/``) and the linker (``linker/``) read, through the
base package ``wikiedm`` (storage, validation, tokenizer), never through this package; this package
imports ``linker`` only in ``transforms/blink.py`` (import-linter contracts in pyproject.toml).
"""
from pipelines.beam_filesystem import BeamFileSystems as _BeamFileSystems
from wikiedm import storage as _storage

# Inside the job (and its workers), gs://, s3://... paths go through Beam's filesystems.
_storage.use_remote_filesystem(_BeamFileSystems())
