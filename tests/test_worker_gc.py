"""A job step raises the cyclic collector's thresholds of its worker process and freezes its heap, once (pipelines.worker_gc)."""
from __future__ import annotations

import ast
import subprocess
import sys

from pipelines.worker_gc import THRESHOLDS

_STEP = ("import gc; {before}; early = gc.get_freeze_count(); from pipelines.transforms.stats import CountingDoFn; "
         "fn = CountingDoFn(); fn.start_bundle(); frozen = gc.get_freeze_count(); fn.start_bundle(); "
         "print((tuple(gc.get_threshold()), early, frozen, gc.get_freeze_count()))")


def _after_two_bundles(before: str = "pass") -> tuple:
    """(thresholds, objects frozen before the step's module is imported, after its first bundle, after its
    second) in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _STEP.format(before=before)], check=True, capture_output=True,
                         text=True).stdout
    return ast.literal_eval(out)


def _thresholds_after_a_bundle(before: str = "pass") -> tuple:
    return _after_two_bundles(before)[0]


def test_a_step_raises_the_defaults():
    assert _thresholds_after_a_bundle() == THRESHOLDS


def test_a_disabled_or_higher_setting_is_kept():
    assert _thresholds_after_a_bundle("gc.set_threshold(0)")[0] == 0
    assert _thresholds_after_a_bundle("gc.set_threshold(10**6, 50, 50)") == (10**6, 50, 50)


def test_the_first_bundle_freezes_the_heap_once():
    """The modules and objects made before the first bundle are frozen (full passes skip them), once: the
    second bundle freezes nothing more, so the frozen set does not grow with the work."""
    _thresholds, early, first, second = _after_two_bundles("kept = [{'a': [i]} for i in range(20000)]")
    assert early == 0
    assert first > 2 * 20000  # the process's heap, with the 20,000 dicts and lists made before
    assert second == first


def test_a_disabled_collector_or_a_frozen_heap_is_left_alone():
    assert _after_two_bundles("gc.disable()")[1:] == (0, 0, 0)
    assert _after_two_bundles("gc.set_threshold(0)")[1:] == (0, 0, 0)
    _thresholds, early, first, second = _after_two_bundles("x = [[i] for i in range(1000)]; gc.freeze()")
    assert early > 0 and second == first <= early  # nothing frozen again (the modules imported since: not frozen)


def test_froze_heap_says_whether_the_step_froze_it():
    step = ("import gc; {before}; from pipelines.transforms.stats import CountingDoFn; "
            "from pipelines.worker_gc import froze_heap; before = froze_heap(); CountingDoFn().start_bundle(); "
            "print((before, froze_heap()))")
    for before, expected in (("pass", (False, True)), ("gc.disable()", (False, False)), ("gc.freeze()", (False, False))):
        out = subprocess.run([sys.executable, "-c", step.format(before=before)], check=True, capture_output=True,
                             text=True).stdout
        assert ast.literal_eval(out) == expected
