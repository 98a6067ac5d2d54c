"""Moved to :mod:`wikiedm.storage` (the base package); this name stays so existing imports keep working."""
import sys

from wikiedm import storage

sys.modules[__name__] = storage
