"""The Beam provider's Python-pipeline operator, as the wiki_corpus DAG uses it.

Two changes to ``BeamRunPythonPipelineOperator`` (apache-airflow-providers-apache-beam 6.x):

* ``py_interpreter`` is a templated field, so a DAG param can say which environment runs
  the job (the project's venv when Airflow lives in another one);
* it can be built and run with the DirectRunner where the Google provider is not installed.
  The provider's ``BeamDataflowMixin.__init__`` raises at construction when
  apache-airflow-providers-google is missing, for every runner, and ``execute`` builds a
  ``DataflowConfiguration`` (a Google provider class) even for the DirectRunner. The Google
  provider cannot be installed beside this project's pinned dependencies (its ``gcsfs``
  pins an ``fsspec`` other than constraints.txt's), so without it this subclass skips the
  guard for non-Dataflow runners and fails a DataflowRunner run with a clear message.
  With the Google provider installed (Cloud Composer has it) nothing changes.
"""
from __future__ import annotations

from airflow.providers.apache.beam.operators import beam as beam_operators
from airflow.providers.apache.beam.operators.beam import BeamDataflowMixin, BeamRunPythonPipelineOperator
from airflow.providers.common.compat.sdk import AirflowException

GOOGLE_PROVIDER = bool(beam_operators.GOOGLE_PROVIDER)


class _DataflowMixinWithoutGuard(BeamDataflowMixin):
    """Placed before BeamDataflowMixin in the MRO: its constructor check runs only with the Google provider."""

    def __init__(self):  # noqa: D107 - BaseOperator's cooperative super().__init__() lands here
        if GOOGLE_PROVIDER:
            super().__init__()


class BeamPythonJobOperator(BeamRunPythonPipelineOperator, _DataflowMixinWithoutGuard):
    """Run a Beam Python pipeline (``py_file``, or a module with ``py_options=["-m"]``) in ``py_interpreter``."""

    template_fields = (*BeamRunPythonPipelineOperator.template_fields, "py_interpreter")

    def _cast_dataflow_config(self):
        if GOOGLE_PROVIDER:
            return super()._cast_dataflow_config()
        self.dataflow_config = None  # read only on the Dataflow path, which needs the provider

    def execute(self, context):
        if self.runner.lower() == "dataflowrunner" and not GOOGLE_PROVIDER:
            raise AirflowException(
                "runner DataflowRunner needs apache-airflow-providers-google in Airflow's environment "
                "(it tracks and cancels the Dataflow job); install it there, or run the job with "
                "`python -m pipelines.wiki_mentions --runner=DataflowRunner ...` (docs/orchestration.md)")
        return super().execute(context)
