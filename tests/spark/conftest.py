"""Fixtures of the real-Spark tests (``make spark``, which installs the spark extra; not part of
``make test``): one local[2] SparkSession shared by a module's tests, and a skip with the reason
when pyspark is not installed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        skip = pytest.mark.skip(reason="pyspark is not installed (make spark installs the spark extra)")
        for item in items:
            if Path(str(item.fspath)).parent == Path(__file__).parent:
                item.add_marker(skip)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local[2] session for the module (the job's own session builder)."""
    os.environ.setdefault("NUMBA_CACHE_DIR", str(REPO / ".cache" / "numba"))
    from logkeeper.spark.job import spark_session

    session = spark_session("local[2]", app_name="logkeeper-spark-tests")
    try:
        yield session
    finally:
        session.stop()
