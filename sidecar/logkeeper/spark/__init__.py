"""Compacting a big backlog with PySpark: exact keys, one pass, the in-process cleaner's rewriting.

Modules (only job.py imports pyspark; the others are what the sidecar and the workers share):

- plan.py      read a partition directory read-only; the round's offsets, groups and chunks
- extract.py   the compiled key reader of a chunk (map side)
- rewrite.py   one group's cleaned segment through the cleaner's SegmentFilter (reduce side)
- job.py       the Spark pipeline (the only module importing pyspark)
- command.py   ``logkeeper spark-compact``: arguments, paths made absolute, failure.json
- faults.py    the crash and failure points the tests set through the environment
- submit.py    the file given to spark-submit: runs command.py
- resources.py the session conf derived from the round: memory, the UI
- jvm_output.py the JVM's standard error relayed, its last lines the reason when it cannot start
- partitioning.py  the tasks: chunks a keys task, groups a rewrite task (Spark's hash steered)

The sidecar's side of the hand-off (pause, run, validate, swap, resume) is cleaner/offload.py; the
files the two sides share, a floor below this package, are its manifest
(cleaner/offload_manifest.py) and the job's progress (cleaner/offload_progress.py).
"""
