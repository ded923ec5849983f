"""API errors: the sidecar's own failures, and the HTTP status and code of every failure.

Every error response has the body ``{"error": CODE, "detail": MESSAGE}``:

    status  error                    raised for
    400     bad_request              malformed JSON, bad parameters, invalid config values, bad names
    400     invalid_records          record batch bytes that fail validation (CRC, sizes, deltas...)
    400     invalid_timestamp        a record timestamp outside the topic's window
    401     unauthorized             a mutating request without the bearer token (or a wrong one)
    404     not_found                an unknown topic, partition or path
    405     method_not_allowed       a known path with another method
    409     conflict                 the topic exists; a cleaning state forbids the change
    413     payload_too_large        a body over max.request.bytes, a batch over max.message.bytes
    415     unsupported_media_type   a produce body neither JSON nor application/vnd.kafka.batch
    416     offset_out_of_range      a fetch outside [log start offset, log end offset]
    422     unrepresentable          fetched bytes that are not UTF-8 where encoding=utf-8 was asked
    503     not_ready                recovery still running, or shutting down
    503     storage_error            the partition is offline: its log directory failed, or it has
                                     a copy in two directories; the body adds ``log_dir`` and
                                     ``partition`` (when the request named one)
    503     token_unavailable        the token file cannot be read (nothing is accepted)
    500     internal_error           anything else (a bug: logged with its traceback)
"""

from __future__ import annotations

from ..errors import (
    CleanerShutdownError,
    CorruptRecordError,
    InvalidConfigError,
    InvalidTimestampError,
    KafkaStorageError,
    LogkeeperError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownPartitionError,
)
from .record_json import RecordFormatError, UnrepresentableError


class NotReadyError(LogkeeperError):
    """The sidecar is still recovering its logs, or shutting down."""


class TopicNotFoundError(LogkeeperError):
    """A topic the sidecar does not know."""


class TopicExistsError(LogkeeperError):
    """A create for a topic that already exists."""


class CleaningConflictError(LogkeeperError):
    """A cleaning request the partition's cleaning state does not allow (e.g. resume when not paused)."""


class BadRequestError(LogkeeperError):
    """A request whose parameters or body do not make sense; the message says which."""


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, extra: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra or {}  # fields a client can act on without parsing the detail

    def body(self) -> dict[str, str]:
        return {"error": self.code, "detail": self.detail, **self.extra}


# (the failures, status, code), first match wins: each answer once, with every failure it is for
_MAPPING: tuple[tuple[tuple[type[BaseException], ...], int, str], ...] = (
    ((UnrepresentableError,), 422, "unrepresentable"),
    ((RecordFormatError, BadRequestError, InvalidConfigError), 400, "bad_request"),  # before ValueError
    ((InvalidTimestampError,), 400, "invalid_timestamp"),
    ((CorruptRecordError,), 400, "invalid_records"),
    ((RecordTooLargeError,), 413, "payload_too_large"),
    ((TopicNotFoundError, UnknownPartitionError), 404, "not_found"),
    ((TopicExistsError, CleaningConflictError), 409, "conflict"),
    ((OffsetOutOfRangeError,), 416, "offset_out_of_range"),
    ((NotReadyError, CleanerShutdownError), 503, "not_ready"),
    ((ValueError,), 400, "bad_request"),  # names.validate_topic and friends
)


def api_error_of(exc: BaseException) -> ApiError | None:
    """The API error for a known failure; None for anything else (a 500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, KafkaStorageError):  # which directory failed, and for which partition
        extra = {"log_dir": exc.log_dir, **({"partition": exc.partition} if exc.partition else {})}
        return ApiError(503, "storage_error", str(exc), extra)
    for classes, status, code in _MAPPING:
        if isinstance(exc, classes):
            return ApiError(status, code, str(exc))
    return None
