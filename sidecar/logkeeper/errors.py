"""Exceptions of the storage engine: one class per failure, each naming where it happened.

Every error that concerns bytes on disk or on the wire carries the position (and, where one is
known, the file) so that a command line tool can print one line that names both.
"""

from __future__ import annotations


class LogkeeperError(Exception):
    """Base of every error raised by logkeeper."""


class UsageError(LogkeeperError):
    """The user's input is wrong (a path, an argument), not their data: the CLI exits 2. The
    message is a sentence the user can act on."""


# --------------------------------------------------------------------------------------------
# Corrupt or invalid record bytes. Positions are byte offsets in the buffer or file inspected.
# --------------------------------------------------------------------------------------------
class CorruptRecordError(LogkeeperError):
    """Bytes that do not form a valid record batch. ``fault`` is a short noun phrase."""

    fault = "corrupt record"

    def __init__(self, position: int, detail: str = "", file: str | None = None) -> None:
        self.position = position
        self.detail = detail
        self.file = file
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"{self.file} at position {self.position}" if self.file else f"position {self.position}"
        extra = f": {self.detail}" if self.detail else ""
        return f"{self.fault} at {where}{extra}"

    def in_file(self, file: str, base_position: int = 0) -> CorruptRecordError:
        """The same error re-anchored to a file (positions relative to ``base_position``)."""
        err = type(self)(self.position + base_position, self.detail, file)
        return err


class ShortBatchError(CorruptRecordError):
    fault = "short batch"


class BadMagicError(CorruptRecordError):
    fault = "bad magic"


class CrcMismatchError(CorruptRecordError):
    fault = "CRC mismatch"


class LengthPastEndError(CorruptRecordError):
    fault = "length past end"


class BadVarintError(CorruptRecordError):
    fault = "bad varint"


class UnknownCodecError(CorruptRecordError):
    fault = "unknown codec"


class InvalidRecordError(CorruptRecordError):
    """Structurally decodable bytes whose content breaks a rule (counts, deltas, sizes)."""

    fault = "invalid record"


# --------------------------------------------------------------------------------------------
# Indexes
# --------------------------------------------------------------------------------------------
class CorruptIndexError(LogkeeperError):
    """An index file fails its sanity check; the index is rebuilt from its segment."""


class IndexFullError(LogkeeperError):
    """An append to an index that has no free slot."""


class InvalidOffsetError(LogkeeperError):
    """An index append whose offset is not larger than the last entry's."""


# --------------------------------------------------------------------------------------------
# Log operations
# --------------------------------------------------------------------------------------------
class RecordTooLargeError(LogkeeperError):
    """A batch larger than max.message.bytes or than a segment can hold."""


class InvalidTimestampError(LogkeeperError):
    """A record timestamp outside the window the topic config allows."""


class OffsetOutOfRangeError(LogkeeperError):
    """A read below the log start offset or above the log end offset."""


class OutOfOrderSequenceError(LogkeeperError):
    """An idempotent producer's batch whose sequence does not follow the last one appended."""


class InvalidProducerEpochError(LogkeeperError):
    """An idempotent producer's batch with an epoch older than the producer's current one."""


class LogSegmentOffsetOverflowError(LogkeeperError):
    """A batch whose offsets do not fit in a segment as int32 deltas from its base offset."""

    def __init__(self, segment_base_offset: int, offset: int, file: str | None = None) -> None:
        self.segment_base_offset = segment_base_offset
        self.offset = offset
        self.file = file
        super().__init__(
            f"offset {offset} does not fit in segment {file or segment_base_offset} "
            f"(base offset {segment_base_offset}): relative offset overflows int32"
        )


class InvalidConfigError(LogkeeperError):
    """A configuration value that fails its validator; the message names the key."""


class KafkaStorageError(LogkeeperError):
    """An I/O failure in a log directory: that directory goes offline, the process goes on."""

    def __init__(self, log_dir: str, detail: str, *, partition: str | None = None) -> None:
        self.log_dir = log_dir
        self.partition = partition  # the partition the operation was for, when there was one
        super().__init__(f"log directory {log_dir}: {detail}" if partition else
                         f"I/O failure in log directory {log_dir}: {detail}")


class CompressionError(CorruptRecordError):
    """A compressed records block that its codec cannot decode."""

    fault = "decompression failed"


class IndexOffsetOverflowError(LogkeeperError):
    """An index entry whose offset does not fit as an int32 delta from the index's base offset."""

    def __init__(self, offset: int, base_offset: int, file: str) -> None:
        self.offset = offset
        self.base_offset = base_offset
        self.file = file
        super().__init__(
            f"offset {offset} cannot be stored in index {file} (base offset {base_offset}): "
            f"relative offset {offset - base_offset} is outside 0..2147483647"
        )


# --------------------------------------------------------------------------------------------
# Log directories and the LogManager
# --------------------------------------------------------------------------------------------
class DuplicateLogDirError(LogkeeperError):
    """Two configured log directories resolve to the same canonical path."""

    def __init__(self, first: str, second: str, canonical: str) -> None:
        self.first = first
        self.second = second
        self.canonical = canonical
        super().__init__(f"duplicate log directory: {first} and {second} are both {canonical}")


class LogDirLockedError(LogkeeperError):
    """Another process (or another LogManager in this one) holds the directory's ``.lock``."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        super().__init__(
            f"log directory {log_dir} is in use: another process holds its lock file {log_dir}/.lock")


class LogDirUnusableError(LogkeeperError):
    """A configured log directory that cannot be created, is not a directory, or is unreadable."""

    def __init__(self, log_dir: str, detail: str) -> None:
        self.log_dir = log_dir
        super().__init__(f"log directory {log_dir} is unusable: {detail}")


class NoLiveLogDirsError(LogkeeperError):
    """None of the configured log directories can be used; the message lists each one's error."""


class LogDirNotFoundError(LogkeeperError):
    """A path that is not one of the configured log directories."""


class UnknownPartitionError(LogkeeperError):
    """An operation on a partition that has no log in the LogManager."""


# --------------------------------------------------------------------------------------------
# Log cleaner
# --------------------------------------------------------------------------------------------
class LogCleaningAbortedError(LogkeeperError):
    """The cleaning of a partition was aborted (paused, truncated or deleted) while in progress."""


class CleanerShutdownError(LogkeeperError):
    """A cleaner thread was asked to stop while cleaning; the round is abandoned."""
