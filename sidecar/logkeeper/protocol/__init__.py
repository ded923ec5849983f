"""Kafka's wire protocol for stock clients: codec, message schemas, framing, the listener, the
request handlers, the group coordinator and the committed-offsets store."""
