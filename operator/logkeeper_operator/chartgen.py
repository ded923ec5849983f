"""The generated parts of the chart (charts/logkeeper): crds/ (a copy of the repo's crds/, which
crdgen.py writes) and values.schema.json (its operator.settings section from config.py's
OPERATOR_SETTINGS).

    python -m logkeeper_operator.chartgen charts/logkeeper            write them
    python -m logkeeper_operator.chartgen --check charts/logkeeper    exit 1 when one differs
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .config import OPERATOR_SETTINGS
from .crdgen import all_crds, render, write_or_check
from .schemas import setting_schema

Schema = dict[str, Any]
NAMESPACE_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _obj(props: Schema, required: list[str] | None = None, *, closed: bool = True) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if closed:
        out["additionalProperties"] = False
    if required:
        out["required"] = required
    return out


def values_schema() -> Schema:
    settings = {s.key: setting_schema(s) for s in OPERATOR_SETTINGS.settings}
    for s in settings.values():
        s.pop("format", None)
    free: Schema = {"type": "object"}
    return {
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "logkeeper chart values",
        **_obj({
            "image": _obj({"repository": {"type": "string", "minLength": 1}, "tag": {"type": "string"},
                           "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]}},
                          ["repository"]),
            "imagePullSecrets": {"type": "array", "items": _obj({"name": {"type": "string"}}, ["name"])},
            "operator": _obj({
                "replicas": {"type": "integer", "minimum": 0, "maximum": 5,
                             "description": "Replicas: one leads (a Lease), the others stand by; 0 for an operator "
                                            "run elsewhere."},
                "watchNamespaces": {"type": "array", "items": {"type": "string", "pattern": NAMESPACE_PATTERN}},
                "clusterWide": {"type": "boolean"},
                "settings": _obj(settings),
                "livenessPort": {"type": "integer", "minimum": 1024, "maximum": 65535,
                                 "description": "Port of /healthz, /readyz and /metrics."},
                "serviceMonitor": _obj({"enabled": {"type": "boolean"}, "interval": {"type": "string"},
                                        "labels": free}),
                "logLevel": {"type": "string", "enum": ["info", "debug"]},
                "resources": free, "nodeSelector": free, "tolerations": {"type": "array"}, "affinity": free,
                "podAnnotations": free,
            }),
            "serviceAccount": _obj({"create": {"type": "boolean"}, "name": {"type": "string"},
                                    "annotations": free}),
            "rbac": _obj({"create": {"type": "boolean"}}),
        }),
    }


def generated(chart: Path) -> dict[Path, str]:
    out = {chart / "crds" / name: render(doc) for name, doc in all_crds().items()}
    out[chart / "values.schema.json"] = json.dumps(values_schema(), indent=2) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m logkeeper_operator.chartgen")
    p.add_argument("chart", help="the chart's directory (charts/logkeeper)")
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    return write_or_check(generated(Path(args.chart)), args.check, "chart")


if __name__ == "__main__":
    raise SystemExit(main())
