"""Fixtures of the unit tests: ``env``, a LogManager test's environment (tests/manager_env.py),
its managers shut down after the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.manager_env import Env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    for m in e.managers:
        m.shutdown()
