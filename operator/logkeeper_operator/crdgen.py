"""The CRDs under crds/, generated from the settings' single definitions (never edited by hand).

    python -m logkeeper_operator.crdgen crds/            write crds/<plural>.logkeeper.io.yaml (make crds)
    python -m logkeeper_operator.crdgen --check crds/    exit 1 when a file differs (make chart checks)

The LogVolume's spec schema, with its settings and CEL rules, is schemas.py's; its status schema
is generated from the status model's typed dicts (status.py's LogVolumeStatus, whose parser reads
the sidecar's /v1/status contract, logkeeper/server/status_schema.py). This module adds the
CleanerPolicy's and the CompactionJob's spec and status schemas, printer columns and names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from logkeeper.server.config import MAX_PARTITIONS_PER_TOPIC
from logkeeper.typed_schema import schema_of

from .compaction import PHASES
from .names import CLEANERPOLICY, COMPACTIONJOB, GROUP, LOGVOLUME, PLURALS, SHORT_NAMES, VERSION
from .schemas import LOGVOLUME_NAME, TOPIC_NAME_PATTERN, Schema, cleaner_settings, logvolume_spec, rule
from .spec import SPARK_MODES
from .status import LogVolumeStatus


def _conditions() -> Schema:
    conditions: Schema = logvolume_status()["properties"]["conditions"]  # status.py's Conditions, for every kind
    return conditions


def logvolume_status() -> Schema:
    """The LogVolume's status schema, generated from the status model's typed dicts (status.py)."""
    return schema_of(LogVolumeStatus, crd=True)


def _column(name: str, path: str, typ: str = "string", priority: int = 0, description: str = "") -> Schema:
    col: Schema = {"name": name, "type": typ, "jsonPath": path}
    if priority:
        col["priority"] = priority
    if description:
        col["description"] = description
    return col


AGE = _column("Age", ".metadata.creationTimestamp", "date")


def crd(kind: str, spec: Schema, status: Schema, columns: list[Schema], description: str,
        rules: list[Schema] | None = None) -> Schema:
    plural = PLURALS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/name": "logkeeper"}},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                      "shortNames": SHORT_NAMES[kind], "categories": ["logkeeper"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "description": description, "properties": {
                        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                        "spec": spec, "status": status}, "required": ["spec"],
                    **({"x-kubernetes-validations": rules} if rules else {})}},
            }],
        },
    }


def all_crds() -> dict[str, Schema]:
    ready = '.status.conditions[?(@.type=="Ready")]'
    lv = crd(LOGVOLUME, logvolume_spec(), logvolume_status(), [
        _column("Ready", f"{ready}.status"),
        _column("Cleaning", ".status.cleaningState", description="idle, or cleaning N/M compacted partitions"),
        _column("Partitions", ".status.summary.partitions", "integer"),
        _column("Max-Dirty", ".status.summary.maxDirtyRatio", description="largest dirty ratio of a compacted log"),
        _column("Backlogs", ".status.summary.backlogs", "integer"),
        _column("Offline", ".status.summary.offlineDirs", "integer", 1),
        _column("Uncleanable", ".status.summary.uncleanable", "integer", 1),
        _column("Reason", f"{ready}.reason", priority=1),
        _column("Seen", ".status.lastSeenTime", "date", 1, "when the sidecar last answered"),
        AGE,
    ], "A set of volumes holding Kafka logs, served by a logkeeper sidecar.", [LOGVOLUME_NAME])
    history: Schema = {
        "type": "object", "description": "How long finished CompactionJobs of the LogVolumes naming this policy "
                                         "are kept (LogVolumes without a policy: the defaults).",
        "properties": {
            "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0, "maximum": 365 * 86400, "default": 86400,
                                        "description": "Deleted this long after they end."},
            "successfulJobsHistoryLimit": {"type": "integer", "minimum": 0, "maximum": 100, "default": 3,
                                           "description": "At most this many Succeeded ones per LogVolume."},
            "failedJobsHistoryLimit": {"type": "integer", "minimum": 0, "maximum": 100, "default": 3,
                                       "description": "At most this many Failed ones per LogVolume."}}}
    cp = crd(CLEANERPOLICY, {"type": "object", "required": ["cleaner"], "properties": {
        "cleaner": cleaner_settings("shared by the LogVolumes that name this policy"), "compactionJobs": history}},
        {"type": "object", "properties": {"logVolumes": {"type": "integer"},
                                          "observedGeneration": {"type": "integer", "format": "int64"},
                                          "conditions": _conditions()}},
        [_column("LogVolumes", ".status.logVolumes", "integer"), AGE],
        "Log cleaner settings shared by many LogVolumes.")
    cj_spec: Schema = {
        "type": "object", "required": ["logVolume", "topic", "partition", "volumeId", "logDir", "handOff", "args",
                                       "staging"],
        "x-kubernetes-validations": [
            rule("self == oldSelf", "a CompactionJob's spec is immutable", reason="FieldValueForbidden"),
            rule("self.args[0] == 'spark-compact'", "must be the sidecar's `logkeeper spark-compact ...` arguments",
                 ".args")],
        "properties": {
            "logVolume": {"type": "string", "minLength": 1}, "topic": {"type": "string", "pattern": TOPIC_NAME_PATTERN},
            "partition": {"type": "integer", "minimum": 0, "maximum": MAX_PARTITIONS_PER_TOPIC - 1},
            "volumeId": {"type": "string"}, "logDir": {"type": "string"}, "claimName": {"type": "string"},
            "handOff": {"type": "string", "minLength": 1,
                        "description": "The sidecar's attempt id of the hand-off this job serves."},
            "args": {"type": "array", "minItems": 1, "items": {"type": "string"},
                     "description": "The `logkeeper` arguments the sidecar asked for (spark-compact ...)."},
            "staging": {"type": "string", "description": "Where the job writes; the sidecar reads it."},
            "mode": {"type": "string", "enum": list(SPARK_MODES), "default": "local"},
            "timeoutSeconds": {"type": "integer", "minimum": 60, "maximum": 7 * 86400, "default": 3600},
            "maxAttempts": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            "backlogBytes": {"type": "integer", "format": "int64", "minimum": 0,
                             "description": "The partition's bytes at the hand-off: sizes the Job's scratch space."},
        }}
    cj_status: Schema = {"type": "object", "properties": {
        "phase": {"type": "string", "enum": list(PHASES)},
        "attempts": {"type": "integer"},
        "submissionId": {"type": "string", "description": "The current attempt's Job: found again after an "
                                                           "operator restart."},
        "jobName": {"type": "string"},
        "attemptStartTime": {"type": "string", "format": "date-time", "description": "When the attempt was "
                                                                                    "submitted."},
        "attemptStartedAt": {"type": "number", "description": "Deprecated: Unix seconds, written by operators "
                                                              "before attemptStartTime (replaced at the next one)."},
        "startTime": {"type": "string", "format": "date-time"},
        "completionTime": {"type": "string", "format": "date-time"},
        "staging": {"type": "string"},
        "message": {"type": "string"},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "conditions": _conditions(),
        "progress": {"type": "object", "description": "The Spark job's progress while it runs, as the sidecar "
                                                      "relays it (the job's progress.json).",
                     "properties": {
                         "stage": {"type": "string", "description": "planning, starting-spark, keys, rewrite, "
                                                                     "checking, manifest or done"},
                         "tasksDone": {"type": "integer"}, "tasksTotal": {"type": "integer"},
                         "bytesDone": {"type": "integer", "format": "int64"},
                         "bytesTotal": {"type": "integer", "format": "int64"},
                         "bytesWritten": {"type": "integer", "format": "int64"},
                         "sparkUI": {"type": "string", "description": "The Spark UI's URL (the driver's pod)."},
                         "updatedTime": {"type": "string", "format": "date-time"},
                         "summary": {"type": "string"}}},
    }}
    cj = crd(COMPACTIONJOB, cj_spec, cj_status, [
        _column("Phase", ".status.phase"),
        _column("LogVolume", ".spec.logVolume"),
        _column("Topic", ".spec.topic"),
        _column("Partition", ".spec.partition", "integer"),
        _column("Attempts", ".status.attempts", "integer"),
        _column("Reason", '.status.conditions[?(@.type=="Progressing")].reason',
                description="Pending, PodPending, Unschedulable, AdmissionRejected, Running, AwaitingSwap, or "
                            "why it ended"),
        _column("Progress", ".status.progress.summary", description="The job's stage, its units done/total "
                                                                     "and the share of bytes read"),
        _column("Submission", ".status.submissionId", priority=1),
        _column("Message", ".status.message", priority=1),
        AGE,
    ], "One hand-off of a compaction backlog from a sidecar to a Spark job, tracked until the sidecar "
       "swapped the result in.")
    return {f"{PLURALS[k]}.{GROUP}.yaml": doc for k, doc in ((LOGVOLUME, lv), (CLEANERPOLICY, cp), (COMPACTIONJOB, cj))}


HEADER = "# Generated by `python -m logkeeper_operator.crdgen crds/` (make crds) from the settings; do not edit.\n"


def render(doc: Mapping[str, Any]) -> str:
    return HEADER + yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False, width=120)


def write_or_check(files: Mapping[Path, str], check: bool, make_target: str) -> int:
    """Write the generated ``files``; with ``check``, write nothing and exit 1 (naming them and
    ``make_target``) when one is missing or differs. The exit code of crdgen and chartgen."""
    stale = []
    for path, text in files.items():
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"out of date (run make {make_target}): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m logkeeper_operator.crdgen")
    p.add_argument("out", nargs="+", help="directories to write (or check) the CRD files in")
    p.add_argument("--check", action="store_true", help="exit 1 when a file is missing or differs")
    args = p.parse_args(argv)
    files = {Path(out) / name: render(doc) for out in args.out for name, doc in all_crds().items()}
    return write_or_check(files, args.check, "crds")


if __name__ == "__main__":
    raise SystemExit(main())
