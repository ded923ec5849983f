"""image/recipe.env read in Python, and the container config both builds give the image.

``image/dockerfile.py`` writes the Dockerfile's instructions from :func:`container_config`;
``image/oci.py`` writes the same dict into the OCI image config of ``make image``;
``tests/unit/test_image_recipe.py`` parses the Dockerfile back and compares.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECIPE = HERE / "recipe.env"

# Architecture names that must not appear in the recipe or the Dockerfile (the image builds for the
# machine it is built on, whatever that is).
ARCH_NAMES = re.compile(r"amd64|x86[_-]64|arm64|aarch64|armhf|ppc64|s390x|i386", re.IGNORECASE)


def read(path: Path = RECIPE) -> dict[str, str]:
    """KEY=VALUE lines, quoted as sh quotes them; comments and blank lines skipped. Values with
    ``$`` or backquotes are refused: sh would expand them and Python would not."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = shlex.split(line, comments=True)
        if len(tokens) != 1 or "=" not in tokens[0]:
            raise ValueError(f"{path}:{number}: expected one KEY=VALUE, got {line!r}")
        key, value = tokens[0].split("=", 1)
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key) or re.search(r"[$`\\]", line):
            raise ValueError(f"{path}:{number}: a KEY=VALUE without $, ` or \\ expected, got {line!r}")
        values[key] = value
    return values


def version(root: Path = ROOT) -> str:
    with open(root / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def env(recipe: dict[str, str]) -> list[str]:
    return recipe["IMAGE_ENV"].split("|")


def container_config(recipe: dict[str, str], image_version: str) -> dict[str, Any]:
    """The ``config`` of the OCI image config (the Dockerfile's ENV, USER, WORKDIR, EXPOSE,
    LABEL, ENTRYPOINT and CMD say the same)."""
    return {
        "User": f"{recipe['IMAGE_UID']}:{recipe['IMAGE_GID']}",
        "Env": env(recipe),
        "Entrypoint": json.loads(recipe["ENTRYPOINT"]),
        "Cmd": json.loads(recipe["CMD"]),
        "WorkingDir": recipe["WORKDIR"],
        "ExposedPorts": {port: {} for port in recipe["EXPOSE"].split()},
        "Labels": {
            "org.opencontainers.image.title": recipe["IMAGE_NAME"],
            "org.opencontainers.image.version": image_version,
        },
    }


def problems(recipe: dict[str, str]) -> list[str]:
    """Facts the recipe states twice that disagree, and architecture names."""
    found = []
    variables = dict(entry.split("=", 1) for entry in env(recipe))
    if variables.get("JAVA_HOME") != recipe["JAVA_HOME"]:
        found.append(f"IMAGE_ENV's JAVA_HOME {variables.get('JAVA_HOME')!r} is not JAVA_HOME {recipe['JAVA_HOME']!r}")
    if not variables.get("PATH", "").startswith(recipe["VENV"] + "/bin:"):
        found.append(f"IMAGE_ENV's PATH does not start with the venv's bin ({recipe['VENV']}/bin)")
    if variables.get("PYSPARK_PYTHON") != recipe["VENV"] + "/bin/python":
        found.append("IMAGE_ENV's PYSPARK_PYTHON is not the venv's python")
    if recipe["PYTHON"] not in recipe["RUNTIME_PACKAGES"].split() or recipe["PYTHON"] not in recipe[
            "BUILD_PACKAGES"].split():
        found.append(f"{recipe['PYTHON']} is not in both RUNTIME_PACKAGES and BUILD_PACKAGES")
    for key, value in recipe.items():
        if ARCH_NAMES.search(value):
            found.append(f"{key} names an architecture: {value!r}")
    return found
