"""Fuzzing the real sidecar (a subprocess on 127.0.0.1) with schemathesis, from the OpenAPI document
it serves: no 5xx, no crash, every answer as the document says (status codes, content types,
bodies and headers), and the data written before the fuzzing intact afterwards.

Two runs, each bounded by a count of generated requests (FUZZ_EXAMPLES, default 300; the
LOGKEEPER_FUZZ_EXAMPLES variable overrides) and by hypothesis' own time limits:

- positive: requests that follow the document, with the bearer token (so topics are created,
  changed and deleted, records produced and fetched, cleaning paused, resumed and run);
- negative: requests that break it (wrong types, missing or extra fields, bad paths and
  queries), with the token too, so that they pass authentication and reach the handlers.

The document is fuzzed as served except for one bound: a created or grown topic gets at most 8
partitions here (the API takes up to 1024; thousands of partitions would only make the run slow).
The sentinel topic's records are read back and compared after both runs, and after a SIGTERM
every log directory verifies.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from logkeeper.server.process import SidecarProcess
from logkeeper.tools.verify import verify_path

FUZZ_EXAMPLES = int(os.environ.get("LOGKEEPER_FUZZ_EXAMPLES", "300"))
MAX_FUZZ_PARTITIONS = 8
SENTINEL = [{"key": f"sentinel-{i}", "value": f"value-{i}", "headers": [{"key": "n", "value": str(i)}]}
            for i in range(200)]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]


@schemathesis.serializer("application/vnd.kafka.batch")
def _batch_bytes(_ctx: Any, value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    cfg = {"node": {"log.dirs": [str(root / "d0"), str(root / "d1")], "log.initial.task.delay.ms": 500,
                    "log.retention.check.interval.ms": 1000},
           "cleaner": {"log.cleaner.backoff.ms": 200},
           "sidecar": {"max.request.bytes": 256 * 1024},
           "topics": {"sentinel": {"partitions": 1, "configs": {"cleanup.policy": "compact"}},
                      "fuzzed": {"partitions": 2}}}
    proc = SidecarProcess(root, cfg).start()
    proc.client.produce("sentinel", 0, SENTINEL, flush=True)
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, proc.output()[-3000:]
        for d in proc.log_dirs:
            report = verify_path(d)
            assert report.ok, report.problems


def bounded_spec(spec: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    schemas = out["components"]["schemas"]
    schemas["TopicCreate"]["properties"]["partitions"]["maximum"] = MAX_FUZZ_PARTITIONS
    schemas["PartitionsGrow"]["properties"]["count"]["maximum"] = MAX_FUZZ_PARTITIONS
    return out


def fuzz(sidecar: SidecarProcess, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_dict(bounded_spec(sidecar.client.json("GET", "/openapi.json")))
    headers = {"Authorization": f"Bearer {sidecar.token}"}
    # random paths (mostly unknown topics), and paths of the existing topic "fuzzed" and its partitions
    strategy = st.one_of(schema.as_strategy(generation_mode=mode),
                         *(schema.as_strategy(generation_mode=mode, path_parameters=fixed) for fixed in (
                             {"topic": "fuzzed"}, {"topic": "fuzzed", "partition": 0},
                             {"topic": "fuzzed", "partition": 1})))

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        topic = (case.path_parameters or {}).get("topic")
        if topic == "sentinel" or (topic == "fuzzed" and case.method.upper() == "DELETE"):
            return  # the data that must stay intact, and the topic the fixed paths aim at
        case.headers = {**(case.headers or {}), **headers}  # negative cases too pass authentication
        response = case.call(base_url=sidecar.base_url, headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS, headers=headers)

    run()
    assert sidecar.proc is not None and sidecar.proc.poll() is None, "the sidecar died"


def check_sentinel(sidecar: SidecarProcess) -> None:
    records = sidecar.client.fetch_all("sentinel", 0)
    assert [(r["key"], r["value"], r["headers"]) for r in records] == [
        (r["key"], r["value"], r["headers"]) for r in SENTINEL]


def test_fuzz_positive(sidecar: SidecarProcess) -> None:
    fuzz(sidecar, GenerationMode.POSITIVE)
    check_sentinel(sidecar)


def test_fuzz_negative(sidecar: SidecarProcess) -> None:
    fuzz(sidecar, GenerationMode.NEGATIVE)
    check_sentinel(sidecar)
    assert sidecar.client.json("GET", "/readyz") == {"ready": True}


def test_fuzz_log_has_no_internal_error(sidecar: SidecarProcess) -> None:
    assert "internal error answering" not in sidecar.output()
    assert Path(sidecar.out_path).exists()
