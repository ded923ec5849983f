"""The file to give spark-submit: ``spark-submit [options] <this file> [spark-compact] --log-dir D ...``.

spark-submit runs a Python application from a file, not a module; this one runs
``logkeeper spark-compact`` (command.py) with the arguments after it (a leading ``spark-compact``
is accepted, so the sidecar's job arguments can be passed unchanged). Its path in an installed
package: ``python -c 'import logkeeper.spark.submit as m; print(m.__file__)'``. The master is
spark-submit's unless ``--master`` is among the arguments. Exit status as command.py's.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    from logkeeper.cli import main as cli_main

    args = argv[1:] if argv[:1] == ["spark-compact"] else argv
    return cli_main(["spark-compact", *args])


if __name__ == "__main__":
    # run as a file, Python put this package directory first on sys.path: its modules (plan, job ...)
    # must not be importable as top-level names
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv[1:]))
