"""The CLI's one exit-code convention, and how an error becomes the sentence a user reads.

0 ok; 1 problems found in the data (each named with its file and, where known, the position);
2 usage or wrong input (a bad option, a missing file, a directory that is not a log dir).
The sidecar, a service rather than a check, adds 1 for "could not start" and 3 for a shutdown
that outlived shutdown.timeout.ms (sidecar_main.py).

Kept free of heavy imports: cli.py loads it before any command's modules.
"""

from __future__ import annotations

import errno

from .errors import InvalidConfigError, LogkeeperError, UsageError

EXIT_OK = 0
EXIT_DATA = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT, as for any command stopped with Ctrl-C

HELP = """\
exit status:
  0  ok
  1  problems found in the data (each printed with its file and position)
  2  usage or wrong input: a bad option, a missing file, a directory that is not a log dir
  130 interrupted (Ctrl-C); every command leaves its log dir as a crash would, which the next
     run or start finishes or rolls back
  (sidecar: 1 could not start, 3 shutdown took longer than shutdown.timeout.ms)

log dirs: clean, recover and resolve-duplicates write only into a log dir, i.e. a directory
holding partition directories named <topic>-<partition> with .log segments, or Kafka's
checkpoint files or meta.properties. Anything else is refused untouched (exit 2), with the
nearest log dir below it if there is one. Only `sidecar` makes new log dirs: from empty or
missing configured dirs, and from any other configured dir with --create-log-dirs.
"""

# OSErrors that mean the user named a path that is not there or not theirs to use.
_WRONG_PATH = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM}


# What a command may raise for a mistake of the user's or a problem in their data: caught by
# cli.main and printed as one sentence; anything else is a bug of ours and keeps its traceback.
USER_ERRORS = (LogkeeperError, ValueError, OSError)


def explain(exc: Exception) -> tuple[int, str]:
    """The exit code and one sentence for an error a user can cause, or (EXIT_DATA, ...) for a
    problem in the data. Never an exception class name or a repr."""
    if isinstance(exc, UsageError | InvalidConfigError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, OSError):
        what = (exc.strerror or "input/output error").lower()
        where = exc.filename if exc.filename is not None else "a file"
        if exc.errno in _WRONG_PATH:
            return EXIT_USAGE, f"{where}: {what}"
        return EXIT_DATA, f"cannot use {where}: {what}"
    return EXIT_DATA, str(exc)
