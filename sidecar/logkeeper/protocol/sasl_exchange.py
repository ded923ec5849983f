"""The SASL exchange of a Kafka connection (SASL_PLAINTEXT, SASL_SSL): SaslHandshake (v1) names
a mechanism, SaslAuthenticate carries its tokens until it is done. What the connection allows
before and after authentication, and when it gives up waiting, is connection.py's.

A failed authentication is answered SASL_AUTHENTICATION_FAILED after ``FAILED_AUTH_DELAY_S``
(Kafka's connection.failed.authentication.delay.ms) and closes the connection; a mechanism step
runs on the I/O pool (SCRAM's key derivation is CPU work). Tokens and passwords are never logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import error_codes as ec
from . import messages as m
from .context import BrokerContext, CloseConnection
from .framing import parse_request_header, response_frame
from .listener_metrics import ListenerFigures
from .sasl import Mechanism, SaslFailure, UsersFile, server_for

log = logging.getLogger(__name__)

FAILED_AUTH_DELAY_S = 0.1  # Kafka's connection.failed.authentication.delay.ms (100)


class SaslHost(Protocol):
    """What the exchange uses of the listener (connection.py's ConnectionHost has it)."""

    figures: ListenerFigures
    ctx: BrokerContext | None

    def users_or_fail(self) -> UsersFile: ...


@dataclass
class SaslState:
    mechanisms: list[str]
    mechanism: Mechanism | None = None
    authenticated: bool = False
    principal: str | None = None
    started: float = field(default_factory=time.monotonic)


async def sasl_step(frame: memoryview, sasl: SaslState, listener: SaslHost, peer_host: str) -> bytearray:
    """The answer to one SaslHandshake or SaslAuthenticate frame; CloseConnection (with the
    answer to write first, when there is one) ends the connection."""
    header, spec, reader = parse_request_header(frame)
    request = spec.request.decode(reader, header.api_version)
    version, correlation_id = header.api_version, header.correlation_id

    def answer(body: dict[str, Any]) -> bytearray:
        return response_frame(correlation_id, spec.response_header_version(version), spec.response, body, version)

    if header.api_key == m.SASL_HANDSHAKE:
        mechanisms = list(sasl.mechanisms)
        if sasl.mechanism is not None:
            raise CloseConnection("a second SaslHandshake")
        if version < 1:  # v0's unframed tokens are not served; v1 is what clients send
            raise CloseConnection("SaslHandshake v0 is not supported", answer(
                {"error_code": ec.UNSUPPORTED_VERSION, "mechanisms": mechanisms}))
        name = request["mechanism"]
        if name not in mechanisms:
            raise CloseConnection(f"SASL mechanism {name!r} is not enabled", answer(
                {"error_code": ec.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}))
        sasl.mechanism = server_for(name, listener.users_or_fail())
        return answer({"error_code": ec.NONE, "mechanisms": mechanisms})
    mech = sasl.mechanism
    if mech is None:
        raise CloseConnection("SaslAuthenticate before SaslHandshake")
    token = request["auth_bytes"] or b""
    ctx = listener.ctx
    try:
        reply = await ctx.run(mech.step, token) if ctx is not None else mech.step(token)
    except SaslFailure as e:
        listener.figures.event("auth_failures")
        await asyncio.sleep(FAILED_AUTH_DELAY_S)
        raise CloseConnection(f"SASL authentication failed: {e}", answer(
            {"error_code": ec.SASL_AUTHENTICATION_FAILED, "error_message": str(e), "auth_bytes": b"",
             "session_lifetime_ms": 0})) from None
    if mech.done:
        sasl.authenticated, sasl.principal = True, mech.principal
        log.info("kafka: %s authenticated as %s", peer_host, mech.principal)
    return answer({"error_code": ec.NONE, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": 0})
