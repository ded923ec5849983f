"""Fixtures of the unit tests: ``env``, a LogManager test's environment (tests/manager_env.py),
its managers shut down after the test; ``fx``, a partition for the command-line tests
(tests/cli_logs.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_logs import Fixture, write_log
from tests.manager_env import Env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    for m in e.managers:
        m.shutdown()


@pytest.fixture
def fx(tmp_path: Path) -> Fixture:
    return write_log(tmp_path / "t-0")
