"""The Beam corpus job: dump -> pages -> mentions -> aliases -> labels -> windows -> shards.
"""
from pipelines.beam_filesystem import BeamFileSystems as _BeamFileSystems
from wikiedm import storage as _storage

# Inside the job (and its workers), gs://, s3://... paths go through Beam's filesystems.
_storage.use_remote_filesystem(_BeamFileSystems())
