"""protocol/tls.py: the Kafka listener's TLS context, made again when its files change (the
rotation through a real sidecar and real clients: tests/interop/test_kafka_security.py)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from logkeeper.protocol.tls import ServerTls
from logkeeper.server.config import SIDECAR_SETTINGS, SidecarSettings


def _cert(directory: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: no certificate to load")
    directory.mkdir(parents=True, exist_ok=True)
    crt, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True, timeout=60)
    return crt, key


def _tls(crt: Path, key: Path) -> ServerTls:
    return ServerTls(SidecarSettings(**SIDECAR_SETTINGS.resolve({
        "kafka.ssl.certificate.location": str(crt), "kafka.ssl.key.location": str(key)})))


def _replace(target: Path, source: Path) -> None:
    """As an atomic writer does: a new file renamed over the old name."""
    shutil.copy(source, target.with_suffix(".new"))
    os.replace(target.with_suffix(".new"), target)


def test_changed_files_are_loaded_for_the_next_handshake(tmp_path: Path) -> None:
    crt, key = _cert(tmp_path / "live")
    new_crt, new_key = _cert(tmp_path / "renewed")
    tls = _tls(crt, key)
    first = tls.context()
    assert tls.context() is first and tls.reloads == 0  # unchanged: the same context
    _replace(crt, new_crt)
    _replace(key, new_key)
    second = tls.context()
    assert second is not first and tls.reloads == 1
    assert tls.context() is second


def test_files_that_do_not_load_keep_the_last_good_context_logged_once(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    crt, key = _cert(tmp_path / "live")
    other_crt, _other_key = _cert(tmp_path / "other")
    tls = _tls(crt, key)
    first = tls.context()
    with caplog.at_level(logging.ERROR, logger="logkeeper.protocol.tls"):
        crt.rename(tmp_path / "away")  # a file briefly absent while it is swapped
        assert tls.context() is first and tls.context() is first
        (tmp_path / "away").rename(crt)
        assert tls.context() is first and tls.reloads == 0  # the same files as loaded: nothing to do
        _replace(crt, other_crt)  # a certificate without its key
        assert tls.context() is first and tls.context() is first
    failures = [r.getMessage() for r in caplog.records if "do not load" in r.getMessage()]
    assert len(failures) == 2 and str(crt) in failures[0] and "key values mismatch" in failures[1]


def test_unusable_files_at_start_raise_naming_the_file(tmp_path: Path) -> None:
    crt, _key = _cert(tmp_path)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "missing.key"))):
        _tls(crt, tmp_path / "missing.key")
