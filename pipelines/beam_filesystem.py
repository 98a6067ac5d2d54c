"""Beam's ``FileSystems`` as :mod:`wikiedm.storage`'s remote filesystem, inside the corpus job.

:mod:`pipelines` registers it on import (so in every Beam worker too): gs://, s3://... paths of the
job then go through Beam's filesystems, with the pipeline options and credentials Beam was given.
Beam is imported on first use, not here.
"""
from __future__ import annotations

from typing import BinaryIO


def _filesystems():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


class BeamFileSystems:
    def join(self, root: str, *parts: str) -> str:
        return _filesystems().join(root, *parts)

    def exists(self, path: str) -> bool:
        return _filesystems().exists(path)

    def open(self, path: str) -> BinaryIO:
        from apache_beam.io.filesystem import CompressionTypes

        return _filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def create(self, path: str) -> BinaryIO:
        from apache_beam.io.filesystem import CompressionTypes

        return _filesystems().create(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def rename(self, source: str, destination: str) -> None:
        _filesystems().rename([source], [destination])

    def delete(self, paths: list[str]) -> None:
        _filesystems().delete(paths)

    def list_files(self, folder: str) -> list[str]:
        try:
            results = _filesystems().match([self.join(folder, "**")])
        except Exception:  # noqa: BLE001 - a missing folder matches nothing
            return []
        return sorted(m.path for r in results for m in r.metadata_list)
