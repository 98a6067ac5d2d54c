"""Deterministic page-level train/validation split.

A page goes to the same split on every run, on every worker and in every
process: the decision is a stable hash (BLAKE2b) of the page id and a salt,
never Python's randomised ``hash()`` or a shuffle. Splitting by page (not by
passage) keeps the overlapping windows of one article on one side, so the
validation set never shares text with the training set.
"""
from __future__ import annotations

import hashlib

TRAIN = "train"
VALIDATION = "validation"

_HASH_BYTES = 8
_HASH_RANGE = float(1 << (8 * _HASH_BYTES))


def unit_interval_hash(page_id: int, salt: str = "") -> float:
    """Map ``(page_id, salt)`` to a uniform-looking float in ``[0, 1)``.

    The id is hashed as its decimal text, so any int works (negative or
    larger than 64 bits); the NUL separator keeps ``(12, "3")`` and
    ``(1, "23")`` apart.
    """
    if isinstance(page_id, bool) or not isinstance(page_id, int):
        raise TypeError(f"page_id must be an int, got {type(page_id).__name__}")
    payload = str(page_id).encode("ascii") + b"\x00" + salt.encode("utf-8")
    digest = hashlib.blake2b(payload, digest_size=_HASH_BYTES).digest()
    return int.from_bytes(digest, "big") / _HASH_RANGE


def split_of(page_id: int, validation_fraction: float, *, salt: str = "") -> str:
    """Return ``"train"`` or ``"validation"`` for a page, deterministically.

    ``validation_fraction`` 0 sends every page to train and 1 every page to
    validation. Changing ``salt`` draws an independent split.
    """
    if not 0.0 <= validation_fraction <= 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1], got {validation_fraction!r}")
    return VALIDATION if unit_interval_hash(page_id, salt) < validation_fraction else TRAIN
