"""The status contract (issue 22 point 5): a real sidecar's /v1/status, from the real handler on
real log directories, is what its typed contract (server/status_schema.py) says; the OpenAPI
document it serves and the CRD's status schema are generated from that contract; and the
operator's parser turns the answer into a status the LogVolume CRD (crds/, as committed) admits."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, get_type_hints

import jsonschema_rs
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from logkeeper.cleaner.backlog import Backlog
from logkeeper.cleaner.cleaner import Cleaner
from logkeeper.cleaner.offload import OffloadStatus
from logkeeper.cleaner.offload_progress import Progress, SparkStage, write_progress
from logkeeper.cleaner.round_progress import RoundProgress
from logkeeper.log.names import TopicPartition
from logkeeper.server.auth import TokenFile
from logkeeper.server.config import config_from_document
from logkeeper.server.http_api import Api, build_app
from logkeeper.server.service import Sidecar
from logkeeper.server.status_schema import STATUS_TYPES, CleanerStatus, PartitionStatus, Status
from logkeeper.typed_schema import schema_of
from logkeeper_operator.crdgen import all_crds
from logkeeper_operator.status import PodState, build_status

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": "Bearer t"}
RUNNING = PodState(True, "Running", ready=True, ip="10.0.0.1", started=True)


def json_schema(schema: Any) -> Any:
    """An OpenAPI 3.0 / Kubernetes schema as JSON Schema 2020-12: ``nullable`` as a null type,
    component refs into $defs, the x-kubernetes- keywords dropped."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: json_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if "$ref" in out:
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/$defs/")
    if schema.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def assert_valid(schema: dict[str, Any], doc: Any, defs: dict[str, Any] | None = None) -> None:
    root = json_schema(schema)
    if defs:
        root["$defs"] = {name: json_schema(s) for name, s in defs.items()}
    errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}"
              for e in jsonschema_rs.Draft202012Validator(root).iter_errors(doc)]
    assert errors == []


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}/{i}")


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """/v1/status and /openapi.json of a sidecar with a compacted topic cleaned once, a partition
    marked uncleanable and a backlog, and one of its two log directories failed."""
    tmp = tmp_path_factory.mktemp("status")
    (tmp / "token").write_text("t")
    config = config_from_document({
        "sidecar": {"token.file": str(tmp / "token")},
        "node": {"log.dirs": [str(tmp / "d0"), str(tmp / "d1")], "log.initial.task.delay.ms": 60000},
        "cleaner": {"log.cleaner.backoff.ms": 60000},
        "topics": {"kept": {"partitions": 4, "configs": {"cleanup.policy": "compact", "segment.bytes": 2000}},
                   "plain": {"partitions": 2}}}, str(tmp / "sidecar.yaml"), {})
    sidecar = Sidecar(config)
    sidecar.start()
    pool = ThreadPoolExecutor(4)
    out: dict[str, Any] = {}

    async def main() -> None:
        api = Api(sidecar, config.sidecar, TokenFile(config.sidecar.token_file), pool)
        async with TestClient(TestServer(build_app(api)), headers=AUTH) as c:
            records = [{"key": f"k{i % 10}", "value": "v" * 50} for i in range(20)]
            for p in range(4):
                for _ in range(5):
                    assert (await c.post(f"/v1/topics/kept/partitions/{p}/records", json={"records": records})).ok
            await c.post("/v1/topics/plain/partitions/0/records", json={"records": records})
            assert (await (await c.post("/v1/topics/kept/partitions/0/cleaning/clean")).json())["cleaned"]
            logs = {tp: d for tp, _lg, d in sidecar.manager.logs_with_dirs()}
            k0 = TopicPartition("kept", 0)
            sidecar.cleaner.manager.mark_partition_uncleanable(logs[k0].path, k0, "IOError: test")
            sidecar.cleaner.manager.set_backlog(k0, Backlog(k0, 0, 90, 5000, 1000, 5, 9000, 0, 0, 1))
            # the other directory fails: its partitions are offline, kept-0's stay
            failed = next(d for d in logs.values() if d is not logs[k0])
            sidecar.manager.handle_log_dir_failure(failed, "Input/output error (test)")
            # a round running on kept-0 (the cleaner's threads wait out their backoff here)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(Cleaner, "progress", lambda _self: RoundProgress(k0, "indexing", 450, 1000, 1200))
                out["status"] = await (await c.get("/v1/status")).json()
            out["openapi"] = await (await c.get("/openapi.json")).json()
            out["failed_dir"] = str(failed.path)

    try:
        asyncio.run(main())
    finally:
        sidecar.shutdown()
        pool.shutdown()
    return out


def test_the_answer_covers_every_part_of_the_contract(answers: dict[str, Any]) -> None:
    doc = answers["status"]
    parts = doc["partitions"]
    assert [d["online"] for d in doc["log_dirs"]].count(False) == 1
    assert doc["offline_partitions"] and all(p["log_dir"] == answers["failed_dir"] for p in doc["offline_partitions"])
    k0 = next(p for p in parts if (p["topic"], p["partition"]) == ("kept", 0))
    assert k0["last_round"] and k0["uncleanable"] and k0["backlog"] and k0["backlog_detail"]
    assert k0["round_progress"] == {"phase": "indexing", "done_bytes": 450, "total_bytes": 1000, "percent": 45,
                                    "elapsed_ms": 1200}
    assert all(p["round_progress"] is None for p in parts if p is not k0)
    assert any(p["dirty_ratio"] is None for p in parts) and any(p["dirty_ratio"] is not None for p in parts)


def test_the_sidecar_answers_its_contract(answers: dict[str, Any]) -> None:
    doc = answers["status"]
    components = answers["openapi"]["components"]["schemas"]
    # what the sidecar serves as its OpenAPI document is generated from the contract
    for cls in STATUS_TYPES:
        assert components[cls.__name__] == schema_of(cls, refs=True)
    assert (answers["openapi"]["paths"]["/v1/status"]["get"]["responses"]["200"]["content"]["application/json"]
            ["schema"] == {"$ref": "#/components/schemas/Status"})
    assert_valid(components["Status"], doc, components)
    # the typed contract names exactly the keys the sidecar writes
    assert set(doc) == set(get_type_hints(Status))
    assert set(doc["cleaner"]) == set(get_type_hints(CleanerStatus))  # Kafka's metric names, typed too
    for p in doc["partitions"]:
        assert set(get_type_hints(PartitionStatus)) - set(p) <= {"error"}


def test_the_contract_schema_rejects_a_changed_answer(answers: dict[str, Any]) -> None:
    components = answers["openapi"]["components"]["schemas"]
    for change in ({"renamed": "log_dirs"}, {"type": ("ready", "yes")}, {"extra": "new_key"}):
        doc = copy.deepcopy(answers["status"])
        if "renamed" in change:
            doc["logDirs"] = doc.pop(change["renamed"])
        elif "type" in change:
            doc[change["type"][0]] = change["type"][1]
        else:
            doc[change["extra"]] = 1
        with pytest.raises(AssertionError):
            assert_valid(components["Status"], doc, components)


def test_a_hand_off_answers_its_contract(answers: dict[str, Any], tmp_path: Path) -> None:
    """A partition's ``offload`` (cleaner/offload.py) as /v1/status serves it: idle; running, with
    the job's progress.json as the driver writes it (cleaner/offload_progress.py; a key this version does
    not know is left out) and the previous attempt's verdict; done. Typed where it is made, its
    schema is generated like the rest (it was a hand-written component that missed ``progress``)."""
    components = answers["openapi"]["components"]["schemas"]
    write_progress(tmp_path, Progress(stage="rewrite", tasks_done=3, tasks_total=8, bytes_done=10, bytes_total=80,
                                      bytes_written=5, spark_ui="http://driver:4040", spark_stages=[SparkStage(
                                          id=4, tasks_done=1, tasks_total=2, tasks_active=1, tasks_failed=0)]))
    written = json.loads((tmp_path / "progress.json").read_text())
    (tmp_path / "progress.json").write_text(json.dumps({**written, "a_later_key": 1}))
    done = OffloadStatus(state="done", attempt="a1", staging=str(tmp_path), job_args=["spark-compact"],
                         started_ms=1, finished_ms=2, result={"keys": 10, "seconds": {"keys": 1.5}})
    running = OffloadStatus(state="running", attempt="a2", staging=str(tmp_path), started_ms=3,
                            previous=done.verdict())
    entries = [OffloadStatus().to_dict(), running.to_dict(), done.to_dict()]
    for entry in entries:
        assert_valid(components["Offload"], entry, components)
    assert entries[1]["progress"] == written and entries[1]["previous"]["attempt"] == "a1"
    assert entries[0]["progress"] == {} and entries[0]["previous"] == {}
    assert components["PartitionStatus"]["properties"]["offload"] == {
        "allOf": [{"$ref": "#/components/schemas/Offload"}], "nullable": True,
        "description": "The hand-off of the backlog to a Spark job, when it had one"}


def test_the_operator_parses_it_into_a_status_the_crd_admits(answers: dict[str, Any]) -> None:
    doc = answers["status"]
    status, _events = build_status(doc, RUNNING, None, "2030-01-01T00:00:00Z")
    committed = yaml.safe_load((ROOT / "crds" / "logvolumes.logkeeper.io.yaml").read_text())
    generated = all_crds()["logvolumes.logkeeper.io.yaml"]
    assert committed == generated  # make crds was run
    schema = committed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert_valid(schema, status)
    # what it read
    assert status["summary"]["partitions"] == len(doc["partitions"])
    assert status["summary"]["offlineDirs"] == 1 and status["offlineDirs"][0]["path"] == answers["failed_dir"]
    assert len(status["offlinePartitions"]) == len(doc["offline_partitions"])
    assert status["uncleanablePartitions"] == [{"partition": "kept-0", "reason": "IOError: test", "failures": 1}]
    assert status["backlogs"] == [{"partition": "kept-0", "logDir": doc["partitions"][0]["log_dir"],
                                   "firstDirtyOffset": 0, "estimatedKeys": 5000, "passes": 5, "dirtyBytes": 9000,
                                   "recopiedBytes": 0}]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True", "Cleaning": "False",
                                                                       "Degraded": "True"}
    assert [p["partition"] for p in status["partitions"]] == [f"{p['topic']}-{p['partition']}"
                                                               for p in doc["partitions"]]
    assert [(p["partition"], p.get("cleaningProgress")) for p in status["partitions"]
            if "cleaningProgress" in p] == [("kept-0", "indexing 45%")]
    # no nulls in the merge patch (a null deletes the key), but for an offline dir's error
    assert [path for path, v in walk(status) if v is None] == []


def test_the_crd_status_schemas_are_structural() -> None:
    """Every object of a generated status schema is typed, inline and, unless left open on
    purpose, lists its properties; none says additionalProperties: false (the API server rejects it)."""
    for name, crd in all_crds().items():
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        for path, node in walk(status):
            if not isinstance(node, dict) or path.endswith("/properties"):
                continue
            assert "$ref" not in node and "allOf" not in node and node.get("additionalProperties") is not False, \
                (name, path)
            if node.get("type") == "object":
                assert "properties" in node or node.get("x-kubernetes-preserve-unknown-fields"), (name, path)
