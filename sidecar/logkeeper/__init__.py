"""logkeeper: Kafka's log layer as a Python sidecar."""

__version__ = "0.1.0"
