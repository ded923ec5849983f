"""The Kafka listener's server TLS: its context from PEM files, made again when those files change.

A certificate is renewed while the sidecar runs (cert-manager renews a month before expiry; the
kubelet then swaps the mounted Secret's files, the operator mounts it whole for that:
operator builders.py). So every TLS handshake first compares the files' stamps (a stat each:
microseconds, against a handshake's milliseconds) with those the context was made from; when one
changed, the context is made again and serves every later handshake. Connections already made
keep the certificate they agreed on.

A change that does not load (a certificate without its new key, a file briefly absent while it is
swapped) keeps the last good context: the listener never stops serving over a rotation; the error
is logged once per change, naming the file, and the next handshake tries again.
"""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..server.config import SidecarSettings

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int] | None, ...]


def read_secret(path: str) -> str | None:
    return Path(path).read_text(encoding="utf-8").strip() if path else None


def tls_context(settings: SidecarSettings) -> ssl.SSLContext:
    """The server TLS context of SSL and SASL_SSL listeners: TLS 1.2 and later (Kafka's
    ssl.enabled.protocols), the certificate chain and key from PEM files, client certificates as
    kafka.ssl.client.auth says. Raises ValueError naming the file when unusable."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        password = read_secret(settings.kafka_ssl_key_password_file)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read the TLS key password file {settings.kafka_ssl_key_password_file}: "
                         f"{e}") from None
    try:
        ctx.load_cert_chain(settings.kafka_ssl_certificate_location, settings.kafka_ssl_key_location or None,
                            password)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"cannot load the TLS certificate {settings.kafka_ssl_certificate_location} / key "
                         f"{settings.kafka_ssl_key_location or '(same file)'}: {e}") from None
    if settings.kafka_ssl_client_auth != "none":
        try:
            ctx.load_verify_locations(settings.kafka_ssl_ca_location)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"cannot load the client CA file {settings.kafka_ssl_ca_location}: {e}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if settings.kafka_ssl_client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


class ServerTls:
    """The listener's TLS context, made again when its files change (module docstring). Made
    once at start, where an unusable file raises ValueError: a listener that cannot serve TLS
    must not open."""

    def __init__(self, settings: SidecarSettings) -> None:
        self._settings = settings
        self._paths = [p for p in (settings.kafka_ssl_certificate_location, settings.kafka_ssl_key_location,
                                   settings.kafka_ssl_key_password_file,
                                   settings.kafka_ssl_ca_location if settings.kafka_ssl_client_auth != "none" else "")
                       if p]
        self._stamp = self._stamps()
        self._context = tls_context(settings)
        self._failed: Stamp | None = None  # the stamp whose load failed (logged once)
        self.reloads = 0

    def _stamps(self) -> Stamp:
        """(inode, mtime, size) of each file, None for one that cannot be stat'ed: stat follows the
        symbolic links of a Secret volume, whose swap changes all three."""
        out: list[tuple[int, int, int] | None] = []
        for path in self._paths:
            try:
                st = os.stat(path)
            except OSError:
                out.append(None)
            else:
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def context(self) -> ssl.SSLContext:
        """The context for the next handshake: made again first when a file changed."""
        stamp = self._stamps()
        if stamp == self._stamp or stamp == self._failed:
            return self._context
        try:
            context = tls_context(self._settings)
        except ValueError as e:
            self._failed = stamp
            log.error("kafka: the changed TLS files do not load; still serving the certificate loaded "
                      "before: %s", e)
            return self._context
        self._context, self._stamp, self._failed = context, stamp, None
        self.reloads += 1
        log.info("kafka: TLS certificate %s loaded again (it changed)", self._settings.kafka_ssl_certificate_location)
        return self._context
