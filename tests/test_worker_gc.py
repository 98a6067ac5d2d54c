"""A job step raises the cyclic collector's thresholds of its worker process once (pipelines.worker_gc)."""
from __future__ import annotations

import ast
import subprocess
import sys

from pipelines.worker_gc import THRESHOLDS

_STEP = ("import gc; {before}; from pipelines.transforms.stats import CountingDoFn; "
         "fn = CountingDoFn(); fn.start_bundle(); fn.start_bundle(); print(tuple(gc.get_threshold()))")


def _thresholds_after_a_bundle(before: str = "pass") -> tuple:
    out = subprocess.run([sys.executable, "-c", _STEP.format(before=before)], check=True, capture_output=True,
                         text=True).stdout
    return ast.literal_eval(out)


def test_a_step_raises_the_defaults():
    assert _thresholds_after_a_bundle() == THRESHOLDS


def test_a_disabled_or_higher_setting_is_kept():
    assert _thresholds_after_a_bundle("gc.set_threshold(0)")[0] == 0
    assert _thresholds_after_a_bundle("gc.set_threshold(10**6, 50, 50)") == (10**6, 50, 50)
