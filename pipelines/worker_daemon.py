"""The Python workers' daemon, with what every worker imports imported before it forks them.

Spark starts Python workers by forking them from one daemon process (`pyspark.daemon`). A
freshly forked worker imported pandas, pyarrow, kafka-python and the step's modules on its first
task: about half a second of the first batch with records (a starting fleet's first
registrations wait for it) and again whenever Spark forks a new worker. Imported here once, in
the daemon, a fork starts with them, and their pages are shared between the workers instead of
each holding its own copy.
"""

from __future__ import annotations


def preload() -> None:
    """Import what the step and the source's reads use (`pipelines.job` names this module as
    `spark.python.daemon.module` for local masters, where this tree is importable)."""
    import kafka  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    from pyspark.sql.pandas import serializers  # noqa: F401

    import pipelines.kafka_source
    import pipelines.step  # noqa: F401


if __name__ == "__main__":
    preload()
    from pyspark import daemon
    daemon.manager()
