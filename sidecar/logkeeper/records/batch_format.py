"""The v2 record batch (magic 2) format: the one definition of its offsets, sizes and attribute bits.

Every module that reads or writes batch bytes takes its numbers from here: the Python parsers
(batch.py, scan.py), the compiled kernels (scan, append, CRC, the cleaner's filter) and the
cleaner. The module imports nothing, so that a numba kernel can use its names as compile-time
constants; the kernels' build stamp (logkeeper.aot.source_stamp) covers this file, so a change
here rebuilds them.

All integers big-endian. ``size = LOG_OVERHEAD + batchLength``.

| byte | field                | type   | notes                                              |
|------|----------------------|--------|----------------------------------------------------|
| 0    | baseOffset           | int64  | not covered by the CRC                             |
| 8    | batchLength          | int32  | bytes after this field                             |
| 12   | partitionLeaderEpoch | int32  | not covered by the CRC                             |
| 16   | magic                | int8   | always 2                                           |
| 17   | crc                  | uint32 | CRC-32C of bytes 21..end                           |
| 21   | attributes           | int16  | see below                                          |
| 23   | lastOffsetDelta      | int32  |                                                    |
| 27   | baseTimestamp        | int64  | the delete horizon when attribute 0x40 is set      |
| 35   | maxTimestamp         | int64  | the append time when attribute 0x08 is set         |
| 43   | producerId           | int64  | -1 when none                                       |
| 51   | producerEpoch        | int16  | -1 when none                                       |
| 53   | baseSequence         | int32  | -1 when none                                       |
| 57   | recordCount          | int32  |                                                    |
| 61   | records              |        | one compressed block when a codec is set           |

Attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd); 0x08 timestamp type
(1 = LogAppendTime); 0x10 transactional; 0x20 control; 0x40 hasDeleteHorizonMs.

Because baseOffset and partitionLeaderEpoch sit before the CRC'd range, assigning offsets or a
leader epoch patches 12 bytes without recomputing the CRC; changing anything from byte 21 on
(LogAppendTime, the delete horizon) needs a new CRC.

The records inside (after byte 61) are laid out as in records/builder.py's docstring; the
smallest record takes ``MIN_RECORD_SIZE`` bytes.
"""

from __future__ import annotations

# struct format of the 13 header fields, in order (records/batch.py's HEADER)
HEADER_FORMAT = ">qiibIhiqqqhii"

# Field positions from the start of a batch (Kafka's DefaultRecordBatch names).
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

# Sizes.
HEADER_SIZE = 61  # the whole header: a batch holding no record is this long
LOG_OVERHEAD = 12  # baseOffset + batchLength: batchLength counts the bytes after them
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
HEADER_SIZE_UP_TO_MAGIC = 17  # Kafka's FileLogInputStream: fewer bytes left than this = end of data
MIN_RECORD_SIZE = 7  # length, attributes, tsDelta, offsetDelta, key -1, value -1, 0 headers

MAGIC = 2

# Attribute bits.
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime (maxTimestamp is the append time)
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40  # set: baseTimestamp is the delete horizon

# "None" values of header fields.
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
