"""SaslHandshake and SaslAuthenticate outside a SASL exchange.

During an exchange (a SASL_PLAINTEXT or SASL_SSL connection not yet authenticated) the
connection serves these two itself (connection.py), since they change its state. Anywhere else
(a PLAINTEXT or SSL listener, or a connection already authenticated: sessions never expire, so
there is no re-authentication) they are answered ILLEGAL_SASL_STATE, as Kafka answers them.
"""

from __future__ import annotations

from typing import Any

from . import error_codes as ec
from .context import BrokerContext, Connection


async def handshake_out_of_state(ctx: BrokerContext, conn: Connection, req: dict[str, Any],
                                 version: int) -> dict[str, Any]:
    return {"error_code": ec.ILLEGAL_SASL_STATE, "mechanisms": []}


async def authenticate_out_of_state(ctx: BrokerContext, conn: Connection, req: dict[str, Any],
                                    version: int) -> dict[str, Any]:
    return {"error_code": ec.ILLEGAL_SASL_STATE, "error_message": "no SASL exchange on this connection",
            "auth_bytes": b"", "session_lifetime_ms": 0}
