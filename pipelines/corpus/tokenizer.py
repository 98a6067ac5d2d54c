"""Moved to :mod:`wikiedm.tokenizer` (the base package); this name stays so existing imports keep working."""
import sys

from wikiedm import tokenizer

sys.modules[__name__] = tokenizer
