"""SASL on the Kafka listener: the users file and the server side of PLAIN and SCRAM-SHA-256/512.

Users file (``kafka.sasl.users.file``, typically a mounted Kubernetes Secret)::

    # comments and blank lines are ignored
    alice:alice-secret          name, then the password: everything after the first ':'

Names cannot hold ':'. The file is read at start (a missing or empty file stops the listener)
and again when its size or modification time changes, so a rotated Secret applies to the next
authentication without a restart. Passwords are never logged, nor are the tokens that carry them
(listener.py does not hex-dump SASL frames).

PLAIN (RFC 4616): one token ``[authzid] NUL name NUL password``; an authzid other than the
name is refused, as Kafka does. The password travels as it is: use it over TLS (SASL_SSL) or
loopback.

SCRAM (RFC 5802/7677, as Kafka's ScramSaslServer): client-first ``n,[a=authzid],n=name,r=cnonce``;
server-first ``r=cnonce+snonce,s=salt,i=4096``; client-final ``c=biws,r=nonce,p=proof``;
server-final ``v=signature``. Channel binding (``p=``) and delegation tokens
(``tokenauth=true``) are refused. The stored keys are derived here from the file's password with
a salt drawn at start (4096 iterations, Kafka's minimum), once per user and mechanism. An unknown
name gets a made-up salt and fails at the proof, like a wrong password, so names cannot be probed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import threading
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

SCRAM_ITERATIONS = 4096
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
FAILED = "Authentication failed: invalid username or password"


class SaslFailure(Exception):
    """Authentication failed; the message is safe to send to the client and to log."""


class UsersFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._users: dict[str, str] = {}
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._scram: dict[tuple[str, str, str], tuple[bytes, bytes, bytes]] = {}
        self._salt_secret = secrets.token_bytes(32)

    def ensure_usable(self) -> int:
        """Read the file now; the number of users. ValueError when missing, unreadable or empty."""
        self._maybe_reload(force=True)
        if not self._users:
            raise ValueError(f"the SASL users file {self.path} has no name:password line")
        return len(self._users)

    def password(self, name: str) -> str | None:
        self._maybe_reload()
        return self._users.get(name)

    def _maybe_reload(self, force: bool = False) -> None:
        try:
            st = os.stat(self.path)
        except OSError as e:
            if force:
                raise ValueError(f"cannot read the SASL users file {self.path}: {e.strerror or e}") from None
            return  # keep the users last read: a Secret being swapped may be briefly absent
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp == self._stamp and not force:
                return
            try:
                with open(self.path, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as e:
                if force:
                    raise ValueError(f"cannot read the SASL users file {self.path}: {e}") from None
                return
            users: dict[str, str] = {}
            for number, line in enumerate(text.splitlines(), 1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                name, sep, password = line.partition(":")
                name = name.strip()
                if not sep or not name or not password:
                    # the line number only: the line may hold a password
                    log.warning("SASL users file %s: line %d is not name:password; skipped", self.path, number)
                    continue
                users[name] = password.rstrip("\r")
            self._users = users
            self._stamp = stamp
        log.info("SASL users file %s: %d users", self.path, len(users))

    def scram_keys(self, mechanism: str, name: str) -> tuple[bytes, bytes, bytes] | None:
        """(salt, stored key, server key) of a user, or None when the name is unknown."""
        password = self.password(name)
        if password is None:
            return None
        cache_key = (mechanism, name, password)
        with self._lock:
            found = self._scram.get(cache_key)
        if found is not None:
            return found
        algo = SCRAM_HASHES[mechanism]
        salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac(algo, password.encode("utf-8"), salt, SCRAM_ITERATIONS)
        client_key = hmac.new(salted, b"Client Key", algo).digest()
        keys = (salt, hashlib.new(algo, client_key).digest(), hmac.new(salted, b"Server Key", algo).digest())
        with self._lock:
            self._scram[cache_key] = keys
        return keys

    def decoy_salt(self, name: str) -> bytes:
        """A stable salt for an unknown name (the same on every try, as a real user's would be)."""
        return hmac.new(self._salt_secret, name.encode("utf-8"), "sha256").digest()[:16]


class Mechanism(Protocol):
    done: bool
    principal: str | None

    def step(self, token: bytes) -> bytes: ...


def server_for(mechanism: str, users: UsersFile) -> Mechanism:
    if mechanism == "PLAIN":
        return PlainServer(users)
    if mechanism in SCRAM_HASHES:
        return ScramServer(users, mechanism)
    raise ValueError(f"unknown SASL mechanism {mechanism!r}")


class PlainServer:
    def __init__(self, users: UsersFile) -> None:
        self.users = users
        self.done = False
        self.principal: str | None = None

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise SaslFailure("PLAIN takes one token")
        self.done = True
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure("Authentication failed: PLAIN token is not authzid NUL name NUL password")
        try:
            authzid, name, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure(FAILED) from None
        if authzid and authzid != name:
            raise SaslFailure("Authentication failed: the authorization id differs from the username")
        expected = self.users.password(name) if name else None
        # compare even for an unknown name, so that the time taken does not tell names apart
        ok = hmac.compare_digest(password.encode("utf-8"), (expected or "\x00" + password).encode("utf-8"))
        if expected is None or not ok:
            raise SaslFailure(FAILED)
        self.principal = name
        return b""


def _scram_name(text: str) -> str:
    """saslname -> name: '=2C' is ',' and '=3D' is '='; any other '=' is malformed."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "=":
            code = text[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise SaslFailure("Authentication failed: malformed SCRAM username")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslFailure("Authentication failed: malformed SCRAM message")
        out.append((key, value))
    return out


@dataclass
class _First:
    gs2_header: str
    bare: str
    name: str
    client_nonce: str


class ScramServer:
    def __init__(self, users: UsersFile, mechanism: str) -> None:
        self.users = users
        self.mechanism = mechanism
        self.algo = SCRAM_HASHES[mechanism]
        self.done = False
        self.principal: str | None = None
        self._first: _First | None = None
        self._server_first = ""
        self._nonce = ""
        self._keys: tuple[bytes, bytes, bytes] | None = None

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: SCRAM message is not UTF-8") from None
        if self._first is None:
            return self._client_first(text)
        if self.done:
            raise SaslFailure("SCRAM exchange already complete")
        self.done = True
        return self._client_final(text)

    def _client_first(self, text: str) -> bytes:
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            raise SaslFailure("Authentication failed: SCRAM channel binding is not supported" if flag.startswith("p=")
                              else "Authentication failed: malformed SCRAM client-first message")
        parts = bare.split(",")
        attrs = _attributes(",".join(parts[:2]))
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise SaslFailure("Authentication failed: malformed SCRAM client-first message")
        if any(extension.startswith("tokenauth=") for extension in parts[2:]):  # Kafka's extension
            raise SaslFailure("Authentication failed: delegation tokens are not supported")
        name = _scram_name(attrs[0][1])
        if authzid and (not authzid.startswith("a=") or _scram_name(authzid[2:]) != name):
            raise SaslFailure("Authentication failed: the authorization id differs from the username")
        self._first = _First(text[:len(flag) + len(authzid) + 2], bare, name, attrs[1][1])
        self._keys = self.users.scram_keys(self.mechanism, name)
        salt = self._keys[0] if self._keys is not None else self.users.decoy_salt(name)
        self._nonce = attrs[1][1] + base64.b64encode(secrets.token_bytes(18)).decode("ascii")
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode('ascii')},i={SCRAM_ITERATIONS}"
        return self._server_first.encode("ascii")

    def _client_final(self, text: str) -> bytes:
        first = self._first
        if first is None:
            raise SaslFailure("SCRAM client-final before client-first")
        without_proof, sep, proof_attr = text.rpartition(",")
        if not sep or not proof_attr.startswith("p="):
            raise SaslFailure("Authentication failed: malformed SCRAM client-final message")
        attrs = dict(_attributes(without_proof))
        expected_binding = base64.b64encode(first.gs2_header.encode("utf-8")).decode("ascii")
        if attrs.get("c") != expected_binding:
            raise SaslFailure("Authentication failed: SCRAM channel binding does not match")
        if attrs.get("r") != self._nonce:
            raise SaslFailure("Authentication failed: SCRAM nonce does not match")
        try:
            proof = base64.b64decode(proof_attr[2:], validate=True)
        except ValueError:
            raise SaslFailure("Authentication failed: malformed SCRAM proof") from None
        if self._keys is None:
            raise SaslFailure(FAILED)
        _salt, stored_key, server_key = self._keys
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.algo).digest()
        if len(proof) != len(signature):
            raise SaslFailure(FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), stored_key):
            raise SaslFailure(FAILED)
        self.principal = first.name
        server_signature = hmac.new(server_key, auth_message, self.algo).digest()
        return b"v=" + base64.b64encode(server_signature)
