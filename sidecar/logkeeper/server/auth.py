"""Bearer tokens read from a mounted file (a Kubernetes Secret volume).

``TokenFile.check(header)`` answers whether an ``Authorization`` header carries the token:

- the file is re-read when its identity changes: (device, inode, size, mtime) of the path,
  following symlinks, so the ``..data`` symlink swap of a Secret update is seen at the next
  request (one ``stat`` a check);
- the comparison is constant-time (``hmac.compare_digest`` on bytes);
- surrounding whitespace and a trailing newline in the file are ignored; an empty file holds no
  token and nothing is accepted;
- when the file cannot be read, nothing is accepted (fail closed) and ``error`` says why.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading

log = logging.getLogger(__name__)

BEARER = "bearer "
MAX_TOKEN_FILE_BYTES = 64 * 1024


class TokenFile:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._identity: tuple[int, int, int, int] | None = None
        self._token: bytes = b""
        self.error: str | None = None
        self.reload_if_changed()

    def reload_if_changed(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError as e:
            self._set_error(f"cannot read the token file {self.path}: {e.strerror or e}")
            return
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if identity == self._identity:
            return
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_TOKEN_FILE_BYTES + 1)
        except OSError as e:
            self._set_error(f"cannot read the token file {self.path}: {e.strerror or e}")
            return
        with self._lock:
            if len(data) > MAX_TOKEN_FILE_BYTES:
                self._token, self.error = b"", f"the token file {self.path} is larger than {MAX_TOKEN_FILE_BYTES} bytes"
            else:
                self._token = data.strip()
                self.error = None if self._token else f"the token file {self.path} is empty"
            self._identity = identity
        if self.error:
            log.error("%s", self.error)
        else:
            log.info("bearer token (re)loaded from %s", self.path)

    def _set_error(self, message: str) -> None:
        with self._lock:
            if self.error != message:
                log.error("%s", message)
            self._token, self._identity, self.error = b"", None, message

    @property
    def usable(self) -> bool:
        return self.error is None

    def check(self, authorization: str | None) -> bool:
        """Whether ``authorization`` is ``Bearer <the token>`` (scheme case-insensitive)."""
        self.reload_if_changed()
        with self._lock:
            token = self._token
        if not token or not authorization or authorization[:len(BEARER)].lower() != BEARER:
            return False
        offered = authorization[len(BEARER):].strip().encode("utf-8", "surrogateescape")
        return hmac.compare_digest(offered, token)
