"""server/auth.py: bearer tokens from a mounted file, re-read when it changes, compared in constant time."""

from __future__ import annotations

import os
from pathlib import Path

from logkeeper.server.auth import TokenFile


def test_token_checks(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    token = TokenFile(path)
    assert token.usable
    assert token.check("Bearer s3cret")
    assert token.check("bearer s3cret ")
    assert not token.check("Bearer s3cre")
    assert not token.check("Bearer s3cret2")
    assert not token.check("Basic s3cret")
    assert not token.check("s3cret")
    assert not token.check("")
    assert not token.check(None)
    assert not token.check("Bearer \udcff")  # undecodable header bytes: no crash


def test_reloaded_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    token = TokenFile(path)
    assert token.check("Bearer old")
    path.write_text("new-token")
    assert token.check("Bearer new-token")
    assert not token.check("Bearer old")


def test_secret_volume_symlink_swap(tmp_path: Path) -> None:
    """Kubernetes updates a Secret volume by pointing the ..data symlink at a new directory."""
    for name, value in (("v1", "first"), ("v2", "second")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "token").write_text(value)
    os.symlink("v1", tmp_path / "..data")
    os.symlink("..data/token", tmp_path / "token")
    token = TokenFile(tmp_path / "token")
    assert token.check("Bearer first")
    os.symlink("v2", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert token.check("Bearer second")
    assert not token.check("Bearer first")


def test_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  \n")
    token = TokenFile(path)
    assert not token.usable and "empty" in (token.error or "")
    assert not token.check("Bearer ")
    path.write_text("t")
    assert token.check("Bearer t") and token.usable
    path.unlink()
    assert not token.check("Bearer t")
    assert not token.usable and "cannot read the token file" in (token.error or "")
    missing = TokenFile(tmp_path / "absent")
    assert not missing.usable and not missing.check("Bearer x")
