"""benchmarks/bench_pipeline.py's per-stage profile names functions of the job as it is, so its breakdown cannot
rot: a renamed or removed function would drop its stage's time, unseen, into "Beam machinery"."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.conftest import WIKIDUMPS, needs_shared

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_pipeline  # noqa: E402


def _functions_under(folder: Path) -> set[str]:
    """``Class.method`` and module-level ``function`` names of every module below ``folder``."""
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.ClassDef):
                names.update(f"{node.name}.{item.name}" for item in node.body
                             if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return names


def test_every_stage_function_is_in_the_job():
    defined = _functions_under(REPO / "pipelines")
    named = {entry.lstrip("-") for functions in bench_pipeline.STAGES.values() for entry in functions}
    assert sorted(named - defined) == []


@pytest.mark.slow
@needs_shared
def test_the_profile_of_a_real_run_sees_every_stage(tmp_path):
    """One profiled run of the job on the 196-page dump: every stage function is called (but pass 2's re-extraction,
    used with --article_cache false only), and the shares are fractions that sum to 1."""
    breakdown = bench_pipeline.profile_stages(WIKIDUMPS / "enwiki-2019-196pages-namespaces.xml.bz2", str(tmp_path))
    assert breakdown["functions_not_profiled"] == ["WritePassagesByRangeFn._articles"]
    shares = breakdown["shares"]
    assert set(shares) == {*bench_pipeline.STAGES, "Beam machinery (coders, shuffles, per-element calls) and start-up"}
    assert all(0 <= share <= 1 for share in shares.values()), shares
    assert abs(sum(shares.values()) - 1) < 1e-3
