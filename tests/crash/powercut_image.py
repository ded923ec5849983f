"""The power-cut test's check of a whole recovered image: every partition by its own check, then
``logkeeper verify``, no temporary file left, and the idempotent producers' retries."""

from __future__ import annotations

from pathlib import Path

from logkeeper.log.scheduler import Scheduler
from logkeeper.tools.verify import verify_path
from tests.crash.powercut_checks import (
    COMPACTED,
    COMPACTED_TXN,
    NO_RETENTION,
    PARTITIONS,
    TRANSACTIONAL,
    Expected,
    Figures,
    check_compacted,
    check_contiguous,
    check_no_deleted_records,
    check_retries,
    open_manager,
)
from tests.crash.powercut_txn_checks import check_compacted_transactions, check_transactions

TEMP_SUFFIXES = (".tmp", ".cleaned", ".swap", ".deleted")


def _pending_removal(path: Path, log_dir: Path) -> bool:
    """Inside a ``-delete`` directory: the whole directory goes, temporary files and all."""
    return path.relative_to(log_dir).parts[0].endswith("-delete")


def check_image(dirs: list[Path], expected: Expected, figures: Figures, where: str) -> None:
    """Recover ``dirs`` with a fresh LogManager and check every promise (see the module doc)."""
    m = open_manager(dirs, Scheduler())  # no thread: no task runs while the image is checked
    problems: list[str] = []
    try:
        for i, tp in enumerate(PARTITIONS):
            want = expected.promised.get(i, 0)
            lg = m.get_log(tp)
            if lg is None:
                if want:
                    problems.append(f"{tp} promised up to {want} is missing")
                    figures.records_lost += want
                continue
            if lg.log_end_offset < want:
                problems.append(f"{tp} ends at {lg.log_end_offset}, promised up to {want}")
            if i in NO_RETENTION and lg.log_start_offset != 0:
                problems.append(f"{tp} starts at {lg.log_start_offset} without retention")
            check = {COMPACTED: check_compacted, TRANSACTIONAL: check_transactions,
                     COMPACTED_TXN: check_compacted_transactions}.get(i, check_contiguous)
            check(m, i, want, expected, figures, problems)
            check_no_deleted_records(m, i, expected, figures, problems)
        for d in dirs:
            report = verify_path(d)
            if not report.ok:
                problems.append(f"verify {d}: " + "; ".join(map(str, report.problems[:5])))
            left = [str(p) for p in d.rglob("*") if p.name.endswith(TEMP_SUFFIXES) and not _pending_removal(p, d)]
            if left:
                problems.append(f"temporary files left in {d}: {left}")
        check_retries(m, expected, figures, problems)
    finally:
        m.shutdown()
    assert not problems, f"{where}: " + "; ".join(problems[:8])
