"""Moved to :mod:`wikiedm.stopwords` (the base package); this name stays so existing imports keep working."""
import sys

from wikiedm import stopwords

sys.modules[__name__] = stopwords
