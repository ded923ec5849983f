"""Compacting a big backlog with PySpark: exact keys, one pass, the in-process cleaner's rewriting.

Modules (only job.py imports pyspark; the others are what the sidecar and the workers share):

- plan.py      read a partition directory read-only; the round's offsets, groups and chunks
- extract.py   the compiled key reader of a chunk (map side)
- rewrite.py   one group's cleaned segment through the cleaner's SegmentFilter (reduce side)
- manifest.py  the staging directory's manifest.json: inputs, outputs, checkpoint
- job.py       the Spark pipeline (the only module importing pyspark)
- command.py   ``logkeeper spark-compact``: arguments, paths made absolute, failure.json
- progress.py  <staging>/progress.json, the stage and counts /v1/status shows
- resources.py the session conf derived from the round: memory, the UI
- partitioning.py  the tasks: chunks a keys task, groups a rewrite task (Spark's hash steered)

The sidecar's side of the hand-off (pause, run, validate, swap, resume) is cleaner/offload.py.
"""
