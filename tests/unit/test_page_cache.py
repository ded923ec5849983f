"""log/page_cache.py: the page-cache query that decides whether a fetch's records are sent from
the event loop, and what happens on a kernel that cannot answer it."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from logkeeper.log import page_cache


def test_a_range_read_in_is_found_in_the_page_cache(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(3 * page_cache.PAGE + 100))
    fd = os.open(path, os.O_RDONLY)
    try:
        page_cache.warm(fd, 0, 3 * page_cache.PAGE + 100)
        # cachestat answers on Linux 6.5+; elsewhere every range is "not known cached" (a thread reads it)
        assert page_cache.cached(fd, 10, 3 * page_cache.PAGE) is page_cache._supported
        assert page_cache.cached(fd, 0, 0)  # nothing to send
        page_cache.warm(fd, 0, 10 * page_cache.PAGE)  # past the end: reads what there is
    finally:
        os.close(fd)


def test_a_kernel_without_cachestat_sends_every_fetch_to_a_thread(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def refused(*args: Any) -> int:
        calls.append(args)
        ctypes.set_errno(errno.ENOSYS)
        return -1

    monkeypatch.setattr(page_cache, "_CALL", refused)
    monkeypatch.setattr(page_cache, "_supported", True)
    with caplog.at_level(logging.INFO, logger=page_cache.__name__):
        assert not page_cache.cached(0, 0, page_cache.PAGE)
        assert not page_cache.cached(0, 0, page_cache.PAGE)
    assert len(calls) == 1  # not asked again
    assert "cannot be queried" in caplog.text


def test_another_error_is_only_this_range_not_known_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    def bad_descriptor(*args: Any) -> int:
        ctypes.set_errno(errno.EBADF)
        return -1

    monkeypatch.setattr(page_cache, "_CALL", bad_descriptor)
    monkeypatch.setattr(page_cache, "_supported", True)
    assert not page_cache.cached(-1, 0, page_cache.PAGE)
    assert page_cache._supported
