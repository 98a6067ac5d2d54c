"""Moved to :mod:`wikiedm.validate` (the base package); this name stays so existing imports and
``python -m pipelines.validate OUT`` keep working."""
import sys

from wikiedm import validate

if __name__ == "__main__":
    sys.exit(validate.main())
sys.modules[__name__] = validate
