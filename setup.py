"""Packaging shim for Dataflow's ``--setup_file``: workers ``pip install`` this
folder, which brings the ``wikiedm``, ``pipelines`` and ``schemas`` packages and the job's
runtime dependencies (pyproject.toml holds the metadata; this file only
exists because Dataflow asks for a setup.py)."""
from setuptools import setup

setup()
