"""Write tests/golden/corpus_rows.json: the digests of what the corpus job makes of each shared dump.

    PYTHONPATH=$PWD .venv/bin/python tests/golden/make_corpus_rows.py [--dumps DIR]

The file is the oracle of tests/test_twopass_equality.py: per distinct shared dump (tests/conftest.py:
distinct_dumps), run with SHARED_DUMP_JOB_ARGS, the row count and sha256 of each output's rows in canonical
order (passages with every column and their split, also per page; alias table; entity vocabulary; entity
descriptions; dead letters) and the counters, less those that describe how the work was done
(tests/corpus_equality.py: COUNTERS_THAT_DIFFER).

Regenerate it only for an intended change of the corpus (new markup handling, a new column, a labelling rule),
in the same commit as that change, and review its diff: every output and counter that moved must be one the
change meant to move. A change of how the job runs (steps, shuffles, buffers, shard layout) must leave it as is.
It was first made with both the two-pass job and the earlier shuffle job, which gave identical digests on all
eight dumps.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "corpus_rows.json"


def make(names: list[str], work: Path, extra_args: tuple[str, ...] = ()) -> dict:
    """{dump name: digests} of the job's outputs on ``names`` (run here, in ``work``)."""
    from tests.conftest import SHARED_DUMP_JOB_ARGS, dump, run_job_here
    from tests.corpus_equality import digests

    found = {}
    for name in names:
        out = work / name
        run_job_here(dump(name), out, *SHARED_DUMP_JOB_ARGS, *extra_args)
        found[name] = digests(out)
        print(f"{name}: {found[name]['passages']['rows']} passages", file=sys.stderr, flush=True)
    return found


def write(found: dict, path: Path = GOLDEN) -> None:
    doc = {"about": "made by tests/golden/make_corpus_rows.py (read its docstring before regenerating)",
           "dumps": dict(sorted(found.items()))}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--output", default=str(GOLDEN), help="where to write the digests")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.conftest import HAVE_WIKIDUMPS, WIKIDUMPS, distinct_dumps

    if not HAVE_WIKIDUMPS:
        print(f"no shared dumps at {WIKIDUMPS} (set WIKIDUMPS_DIR)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as work:
        write(make(distinct_dumps(), Path(work)), Path(args.output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
