"""``python -m logkeeper_operator.cancel STAGING REASON``: run in the cancel Job of a deleted
CompactionJob (builders.cancel_job), on the volume where the sidecar waits for the job's result.

It leaves ``failure.json`` with REASON in STAGING, the file a failed Spark job leaves
(logkeeper/cleaner/offload_manifest.py): the sidecar's external runner reads it, fails the hand-off, removes
the staging directory and resumes the partition's cleaning. A staging directory that is gone (the
hand-off ended meanwhile) is left gone: nothing is created. Exit 0 either way.
"""

from __future__ import annotations

import sys
from pathlib import Path

from logkeeper.cleaner.offload_manifest import write_failure


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m logkeeper_operator.cancel STAGING REASON", file=sys.stderr)
        return 2
    staging, reason = Path(args[0]), args[1]
    if not staging.is_dir():
        print(f"{staging}: gone already (the hand-off ended); nothing to do")
        return 0
    write_failure(staging, reason)
    print(f"{staging}: failure.json written ({reason})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
