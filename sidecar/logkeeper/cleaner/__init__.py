"""logkeeper.cleaner: Kafka's log compaction (LogCleaner, LogCleanerManager, Cleaner), exact, compiled.

Modules, one job each:

- config.py        CleanerConfig: the ``log.cleaner.*`` keys, Kafka's defaults
- siphash.py       the keyed 128-bit key hash (SipHash-1-3-128) used instead of MD5
- offset_map.py    OffsetMap (the interface) and SipHashOffsetMap (24-byte slots, numba probes)
- segment_view.py  a segment mapped whole, its batch headers, windows and record areas
- map_kernel.py    compiled loops filling the map (hash, put) | map_builder.py  a round's map
- filter_kernels.py compiled record decisions and batch output | filter.py  groups' copies
- ahead.py         a stream of windows' first step done ahead by pool helpers (both of the above)
- appender.py      a cleaned segment's windows appended on a helper thread
- txn.py           transaction state while walking a log (aborted data, markers)
- producers.py     the producers still active, whose last batch must stay
- grouping.py      grouping segments into the segments that replace them
- cleaner.py       one round on one log, and the crash-safe swap of each group
- selection.py     cleanable ranges, LogToClean, dirty ratio, compaction delay
- states.py        cleaning states; manager.py: states, checkpoints, choice, uncleanable retries
- throttler.py     I/O throttling; worker.py: a cleaner's loop and thread
- log_cleaner.py   LogCleaner: threads, LogManager hooks, metrics (metrics.py)
- backlog.py       marking logs too big for one map, with a HyperLogLog key count
- stats.py         round statistics and Kafka's stats line
- exact.py         which records survive, decided by exact key when the map cannot tell
- clean_command.py ``logkeeper clean LOG_DIR``; clean_report.py: its closing line per log
                   (the tests' log helpers: tests/cleaner_logs.py)
- offload.py       handing a backlog to the Spark job and taking its output back; offload_job.py:
                   the job's arguments and process; staging.py: where it stages, and the sweep;
                   install.py: a staged file moved into a partition directory
"""
