"""The `logkeeper` command line: dump-log, verify, recover, clean, resolve-duplicates, sidecar,
spark-compact, and executor (what Spark runs in an executor pod of our image). Handlers stay
thin: the rules live in the modules they import.

Exit codes (exit_codes.py, printed by --help): 0 ok; 1 problems found in the data (one line
each, naming the file and position); 2 usage or wrong input. What a log dir is, and so where a
command may write: log_dir_rule.py.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import UsageError
from .exit_codes import EXIT_DATA, EXIT_INTERRUPTED, EXIT_OK, HELP, USER_ERRORS, explain
from .log.names import offset_from_file_name
from .progress_lines import EVERY_S, ProgressLines

# Before anything imports numpy: logkeeper does no linear algebra, yet numpy's import starts
# OpenBLAS's thread pool, a thread a core, whose start-up burns CPU on every core (`import numpy`
# takes much more user CPU than with one thread; on 2 cores that is wall time taken from
# a short `logkeeper clean`; bench/results/design_figures.md: cli, OpenBLAS). An
# OPENBLAS_NUM_THREADS set by the user wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@contextmanager
def _importing() -> Iterator[None]:
    """Around a command's imports: no garbage collection meanwhile. Importing creates objects by
    the hundred thousand (numpy's and logkeeper's modules, classes, functions) and none of them is
    garbage, yet each 700 allocations start a collection that walks them, a noticeable part of the
    time `logkeeper clean` spends importing (bench/results/design_figures.md: cli, imports).
    Collection resumes for the command's work."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cmd_dump(args: argparse.Namespace) -> int:
    with _importing():
        from .tools.dump import dump_file

    paths = [Path(f) for f in args.files]
    for path in paths:  # all of them before any output: no header for a file that is not there
        if not path.is_file():
            raise UsageError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    problems = sum(dump_file(p, sys.stdout, sys.stderr, deep=args.deep_iteration, as_json=args.json) for p in paths)
    return EXIT_DATA if problems else EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    with _importing():
        from .tools.verify import verify_command

    lines = ProgressLines(sys.stderr, EVERY_S)
    started = time.monotonic()
    report = verify_command(Path(args.dir), on_segment=lambda r: lines.tick(
        lambda: (time.monotonic() - started, f"{r.progress_line()}, {time.monotonic() - started:,.0f} s")))
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in report.problems:
        print(f"logkeeper verify: {problem}", file=sys.stderr)
    print(report.summary())
    return EXIT_OK if report.ok else EXIT_DATA


def _cmd_recover(args: argparse.Namespace) -> int:
    with _importing():
        from .tools.recover import recover_path

    changed = recover_path(Path(args.log_dir), sys.stdout, _overrides(args.config))
    print(f"recovered; {changed} partitions changed")
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    with _importing():
        from .cleaner.clean_command import run_clean

    return run_clean(Path(args.log_dir), _overrides(args.config), sys.stdout, lambda: int(time.time() * 1000),
                     err=sys.stderr)


def _cmd_resolve_duplicates(args: argparse.Namespace) -> int:
    with _importing():
        from .tools.duplicates import resolve

    resolve([Path(d) for d in args.log_dirs], sys.stdout, keep=[Path(k) for k in args.keep], dry_run=args.dry_run)
    return EXIT_OK


def _overrides(items: list[str]) -> dict[str, str]:
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--config expects KEY=VALUE, got {item}")
        overrides[key.strip()] = value.strip()
    return overrides


def _cmd_sidecar(args: argparse.Namespace) -> int:
    with _importing():
        from .sidecar_main import run

    if not args.verbose:
        logging.getLogger().setLevel(logging.INFO)  # the sidecar's log is its operator's view
    return run(args.config, create_log_dirs=args.create_log_dirs)


def _cmd_spark_compact(args: argparse.Namespace) -> int:
    with _importing():
        from .spark.command import main as spark_compact

    return spark_compact(args)


def _cmd_executor(args: argparse.Namespace) -> int:
    with _importing():
        from .spark.on_k8s import run_executor

    return run_executor()


def _add_dump(sub: Any) -> None:
    d = sub.add_parser("dump-log", help="print segment (.log) and index files")
    d.add_argument("files", nargs="+", metavar="FILE")
    d.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    d.add_argument("--json", action="store_true", help="one JSON object a record")
    d.set_defaults(func=_cmd_dump)


def _add_verify(sub: Any) -> None:
    v = sub.add_parser("verify", help="check a log dir or partition dir (read-only)")
    v.add_argument("dir", metavar="DIR")
    v.set_defaults(func=_cmd_verify)


def _add_config_overrides(parser: Any, help_text: str) -> None:
    """The repeatable ``--config KEY=VALUE`` of the commands that work on a log dir (recover, clean)."""
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help=help_text)


def _add_recover(sub: Any) -> None:
    r = sub.add_parser("recover", help="recover every partition as after an unclean shutdown")
    r.add_argument("log_dir", metavar="LOG_DIR")
    _add_config_overrides(r, "a topic config the rebuilt indexes follow, e.g. index.interval.bytes=4096")
    r.set_defaults(func=_cmd_recover)


def _add_clean(sub: Any) -> None:
    c = sub.add_parser("clean", help="compact every partition until nothing is cleanable")
    c.add_argument("log_dir", metavar="LOG_DIR")
    _add_config_overrides(c, "a topic or cleaner config override (repeatable)")
    c.set_defaults(func=_cmd_clean)


def _add_resolve_duplicates(sub: Any) -> None:
    r = sub.add_parser("resolve-duplicates", help="settle partitions found in two log directories: keep the copy "
                                                   "with the higher log end offset, rename the other -stray")
    r.add_argument("log_dirs", nargs="+", metavar="LOG_DIR", help="every log directory of the sidecar")
    r.add_argument("--keep", action="append", default=[], metavar="PATH",
                   help="keep this partition directory instead (repeatable, one per partition)")
    r.add_argument("--dry-run", action="store_true", help="print what would be renamed, rename nothing")
    r.set_defaults(func=_cmd_resolve_duplicates)


def _add_sidecar(sub: Any) -> None:
    s = sub.add_parser("sidecar", help="run the LogManager, the cleaner threads and the HTTP API")
    s.add_argument("--config", required=True, metavar="FILE",
                   help="the YAML config file (LOGKEEPER_* variables override its keys)")
    s.add_argument("--create-log-dirs", action="store_true",
                   help="make every configured log dir that is not one yet into one, even when it holds other "
                        "files (missing or empty ones always are)")
    s.set_defaults(func=_cmd_sidecar)


def _add_spark_compact(sub: Any) -> None:
    from .spark.command import add_arguments as spark_compact_arguments

    k = sub.add_parser("spark-compact", help="compact one partition's dirty section with a PySpark job into a "
                                              "staging directory (cleaned segments + manifest.json)")
    spark_compact_arguments(k)
    k.set_defaults(func=_cmd_spark_compact)


def _add_executor(sub: Any) -> None:
    e = sub.add_parser("executor", help="a Spark executor: what Spark on Kubernetes runs in an executor pod of "
                                        "this image (its environment says which driver; spark/on_k8s.py)")
    e.set_defaults(func=_cmd_executor)


COMMANDS: dict[str, Callable[[Any], None]] = {
    "dump-log": _add_dump, "verify": _add_verify, "recover": _add_recover, "clean": _add_clean,
    "resolve-duplicates": _add_resolve_duplicates, "sidecar": _add_sidecar, "spark-compact": _add_spark_compact,
    "executor": _add_executor,
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with ``command`` of that one only (see ``main``)."""
    p = argparse.ArgumentParser(prog="logkeeper", description="Kafka's log layer: tools and the sidecar.",
                                epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="log what the engine does")
    sub = p.add_subparsers(dest="command", required=True)
    for name, add in COMMANDS.items():
        if command is None or name == command:
            add(sub)
    return p


def _named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is no option), if it is one."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def _check_dump_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """File kinds dump-log cannot print are usage errors (exit 2), caught before any output."""
    for f in args.files:
        name = Path(f).name
        if not name.endswith((".log", ".index", ".timeindex")):
            parser.error(f"dump-log: {f}: not a .log, .index or .timeindex file")
        try:
            offset_from_file_name(name)  # the base offset the file's offsets are relative to
        except ValueError:
            parser.error(f"dump-log: {f}: not a segment file name (a 20-digit base offset, e.g. "
                         "00000000000000000000.log)")
        if args.json and not name.endswith(".log"):
            parser.error(f"dump-log: {f}: --json applies to .log files only")


# Commands whose work is all done (files closed and synced, output written) when they return.
FINITE_COMMANDS = frozenset({"dump-log", "verify", "recover", "clean", "resolve-duplicates"})


def main(argv: Sequence[str] | None = None, *, fast_exit: bool = False) -> int:
    """Run one command; its exit code. With ``fast_exit`` (the console script), a finite command
    ends the process itself once its output is flushed, skipping the interpreter's teardown (every
    module and object freed one by one: a measurable part of a short `logkeeper clean`;
    bench/results/design_figures.md: cli, teardown)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Only the named command's parser is built: argparse looks each help text up in the locale's
    # translations (gettext searching its directories, no cache for a miss), 20-odd lookups for
    # all six commands on every start (bench/results/design_figures.md: cli, parser);
    # spark-compact's also imports its module. Help,
    # and a command that is not one, get every command.
    parser = build_parser(_named_command(argv))
    args = parser.parse_args(argv)
    if args.command == "dump-log":
        _check_dump_args(parser, args)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rc = int(args.func(args))
    except BrokenPipeError:
        rc = 0  # the reader (e.g. `head`) went away
    except KeyboardInterrupt:  # Ctrl-C is the user's choice, not a bug: no traceback
        rc = EXIT_INTERRUPTED
        print(f"logkeeper {args.command}: interrupted", file=sys.stderr)
    except USER_ERRORS as e:  # a sentence about the user's input or data; a bug keeps its traceback
        rc, text = explain(e)
        print(f"logkeeper {args.command}: {text}", file=sys.stderr)
    if fast_exit and args.command in FINITE_COMMANDS:
        _exit_now(rc)
    return rc


def _exit_now(rc: int) -> None:
    logging.shutdown()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.stderr.flush()
    os._exit(rc)


def run() -> int:
    """The `logkeeper` console script."""
    return main(fast_exit=True)


if __name__ == "__main__":
    sys.exit(run())
