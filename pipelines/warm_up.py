"""A one-row Python data source the job reads once to start Spark's data source daemons early.

Spark plans a Python data source's reads in Python processes forked from daemons of their own
(`create_data_source`, `plan_data_source_read`), each started with its imports on first use. The
streaming query's start and first batch started them, on the path of a restart's first batch; a
batch read of this source (`job.warm_python_workers`) starts them beside the query's start
instead, and keeps a standby's alive.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

SOURCE_NAME = "namesrv_warm_up"


class WarmUpSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return "n int"

    def reader(self, schema: Any) -> DataSourceReader:
        return _OneRow()


class _OneRow(DataSourceReader):
    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        yield (1,)
