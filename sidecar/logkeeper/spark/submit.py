"""The file to give spark-submit: ``spark-submit [options] <this file> [spark-compact] --log-dir D ...``.

spark-submit runs a Python application from a file, not a module; this one runs
``logkeeper spark-compact`` (command.py) with the arguments after it (a leading ``spark-compact``
is accepted, so the sidecar's job arguments can be passed unchanged). Its path in an installed
package: ``python -c 'import logkeeper.spark.submit as m; print(m.__file__)'``. The master is
spark-submit's unless ``--master`` is among the arguments. Exit status as command.py's.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def main(argv: list[str]) -> int:
    # command.py itself, not the whole command line (cli.py): this file sits in the spark package,
    # a floor below the CLI (pyproject's import contracts), and the job needs none of the CLI
    from logkeeper.spark.command import add_arguments
    from logkeeper.spark.command import main as spark_compact

    parser = argparse.ArgumentParser(prog="logkeeper spark-compact")
    add_arguments(parser)
    args = parser.parse_args(argv[1:] if argv[:1] == ["spark-compact"] else argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return spark_compact(args)


if __name__ == "__main__":
    # run as a file, Python put this package directory first on sys.path: its modules (plan, job ...)
    # must not be importable as top-level names
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv[1:]))
