"""`logkeeper recover LOG_DIR`: load every partition as after an unclean shutdown.

Every segment of every partition is recovered from its first offset (batches validated, the
invalid tail cut, indexes rebuilt), temporary files are resolved by the load rules, and the
logs are flushed and closed so that their indexes are trimmed. Prints what was cut, rebuilt or
removed. The directory's checkpoint files are honoured for log start offsets and left as they
are; the recovery point of every partition becomes its log end offset.

Only a log dir or one partition directory is opened (log_dir_rule.py): anything else is refused
before a file is touched, as Log() would create a segment in any ``<name>-<N>`` folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from ..log.checkpoint import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from ..log.log import Log
from ..log.log_config import LogConfig
from ..log.names import PartitionDirName
from ..log_dir_rule import partitions_of, require_log_or_partition_dir


def recover_path(path: Path, out: TextIO, overrides: Mapping[str, str] | None = None) -> int:
    """Recover every partition under ``path``; return the number of partitions changed.

    ``overrides`` are topic config keys (e.g. index.interval.bytes) the rebuilt indexes follow.
    """
    require_log_or_partition_dir(Path(path), "recover")
    config = LogConfig.from_props(overrides or {})
    dirs = partitions_of(Path(path))
    starts = {}
    if dirs != [Path(path)]:
        starts = OffsetCheckpointFile(Path(path) / LOG_START_OFFSET_CHECKPOINT).read()
    changed = 0
    for d in dirs:
        tp = PartitionDirName.parse(d.name).topic_partition
        log = Log(d, config, log_start_offset=starts.get(tp, 0), recovery_point=0, had_clean_shutdown=False)
        try:
            report = log.load_report
            for name, cut, reason in report.truncated:
                out.write(f"{d.name}/{name}: cut {cut} bytes ({reason})\n")
            for name in report.rebuilt_indexes:
                out.write(f"{d.name}/{name}: indexes rebuilt\n")
            for name in report.deleted_files:
                out.write(f"{d.name}/{name}: deleted\n")
            for name in report.renamed_swaps:
                out.write(f"{d.name}/{name}: completed an interrupted swap\n")
            for name in report.deleted_segments:
                out.write(f"{d.name}/{name}: deleted (after a cut segment)\n")
            for name in report.split_segments:
                out.write(f"{d.name}/{name}: split (offsets overflowed the segment)\n")
            out.write(f"{d.name}: {len(report.recovered_segments)} segments recovered, offsets "
                      f"[{log.log_start_offset}, {log.log_end_offset})\n")
            if report.changed:
                changed += 1
            log.flush()
        finally:
            log.close()
    return changed
