"""The units `make test` sends to its 2 worker processes (tests/conftest.py): tests that share a session corpus
job or the training runs must land in one unit, or that job is made twice."""
from __future__ import annotations

from tests.conftest import ENWIKI206_UNIT, needs_shared, work_unit

UK = "ukwiki-2023-first100k-lines-truncated.xml.xz"
NEVER_WORSE = "tests/linker/test_never_worse_than_prior.py::test_default_linker_is_never_worse_than_the_alias_prior"


@needs_shared
def test_the_tests_reading_one_dumps_session_run_share_a_unit():
    assert work_unit(f"{NEVER_WORSE}[{UK}]") == f"dump {UK}"
    # the dump is named in the test's code, not in its id
    assert work_unit("tests/test_pipeline_real_dumps.py::test_truncated_ukrainian_dump_completes_with_a_dead_letter") \
        == f"dump {UK}"
    # ... or in a fixture of its module, through a module constant
    assert work_unit("tests/test_passage_text_job.py::test_passage_text_false_leaves_only_the_text_column_out") \
        == "dump simplewiki-2019-7pages.xml.bz2"
    # the id's dump decides, not the 206-page corpus the same code reads for another parameter
    assert work_unit(f"{NEVER_WORSE}[enwiki-2016-206pages-articles1-multistream.xml.bz2]") \
        == "dump enwiki-2016-206pages-articles1-multistream.xml.bz2"
    assert work_unit(f"{NEVER_WORSE}[enwiki-2016-206pages-articles1.xml.bz2]") == ENWIKI206_UNIT


def test_the_206_page_corpus_and_the_training_runs_are_one_unit():
    assert work_unit("tests/trainer/test_kill_resume.py::test_sigkill_then_rerun_repeats_the_lost_steps_exactly") \
        == ENWIKI206_UNIT
    assert work_unit("tests/trainer/test_model.py::test_few_steps_on_one_batch_reduce_both_losses") == ENWIKI206_UNIT
    assert work_unit("tests/test_pipeline_real_dumps.py::test_multistream_parallel_read_on_two_workers_is_byte_identical") \
        == ENWIKI206_UNIT  # takes enwiki206_corpus; the multistream dump it names is its own run


def test_other_tests_go_by_module():
    assert work_unit("tests/test_labels.py::test_anything") == "tests/test_labels.py"
    assert work_unit("tests/test_dag.py::test_dagbag_imports_with_the_expected_task_graph") == "tests/test_dag.py"
    assert work_unit("tests/test_wikitext_real_dumps.py::test_x[ukwiki-2023-first100k-lines-truncated.xml.xz]") \
        == "tests/test_wikitext_real_dumps.py"  # reads the dump itself, not a session run
