"""The Dockerfile and ``make image`` build one image: both come from image/recipe.env.

``make image`` (image/build.sh) never reads the Dockerfile; these tests fail when the two could
build different images: a Dockerfile edited by hand, a recipe value the Dockerfile or the OCI
config does not carry, a package list or a build step that one of them lacks, an architecture
written into a path, a user the pods do not run as.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "image"
sys.path.insert(0, str(IMAGE))

import dockerfile  # noqa: E402  (image/ is a folder of scripts, not a package)
import oci  # noqa: E402
import recipe as rc  # noqa: E402

DOCKERFILE = (ROOT / "Dockerfile").read_text()
BUILD_SH = (IMAGE / "build.sh").read_text()


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions: (KEYWORD, arguments), continuation lines joined."""
    out: list[tuple[str, str]] = []
    logical = ""
    for line in text.splitlines():
        if not logical and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.strip().partition(" ")
        out.append((keyword.upper(), rest.strip()))
        logical = ""
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, rest))
    return found


def apt_packages(stage: list[tuple[str, str]]) -> list[str]:
    for keyword, rest in stage:
        if keyword == "RUN" and "apt-get install" in rest:
            words = rest.split("apt-get install", 1)[1].split("&&", 1)[0].split()
            return [w for w in words if not w.startswith("-")]
    raise AssertionError("no apt-get install in the stage")


def docker_config(stage: list[tuple[str, str]]) -> dict[str, Any]:
    """The final stage's ENV, USER, WORKDIR, EXPOSE, LABEL, ENTRYPOINT and CMD as an OCI config."""
    config: dict[str, Any] = {"Env": [], "ExposedPorts": {}, "Labels": {}}
    for keyword, rest in stage:
        if keyword == "ENV":
            config["Env"] += shlex.split(rest)
        elif keyword == "LABEL":
            config["Labels"].update(word.split("=", 1) for word in shlex.split(rest))
        elif keyword == "EXPOSE":
            config["ExposedPorts"].update({port: {} for port in rest.split()})
        elif keyword == "USER":
            config["User"] = rest
        elif keyword == "WORKDIR":
            config["WorkingDir"] = rest
        elif keyword in ("ENTRYPOINT", "CMD"):
            config[keyword.capitalize()] = json.loads(rest)
    return config


def test_the_dockerfile_is_written_from_the_recipe() -> None:
    assert dockerfile.render() == DOCKERFILE, (
        "the Dockerfile differs from image/recipe.env: edit the recipe (or image/dockerfile.py), "
        "then run python3 image/dockerfile.py --write")


def test_the_recipe_is_consistent_and_names_no_architecture() -> None:
    assert rc.problems(rc.read()) == []
    for path in (ROOT / "Dockerfile", IMAGE / "recipe.env", IMAGE / "rootfs.sh", IMAGE / "venv.sh"):
        found = rc.ARCH_NAMES.findall(path.read_text())
        assert not found, f"{path.name} names an architecture: {found}"


def test_sh_and_python_read_the_recipe_alike() -> None:
    recipe = rc.read()
    script = ". ./recipe.env; " + "; ".join(f'printf "%s\\0" "${key}"' for key in recipe)
    values = subprocess.run(["sh", "-c", script], cwd=IMAGE, capture_output=True, check=True).stdout
    assert dict(zip(recipe, values.decode().split("\0")[:-1], strict=True)) == recipe


def test_the_final_stage_is_the_oci_config_of_make_image(tmp_path: Path) -> None:
    """What the Dockerfile's final stage declares is what image/oci.py writes into the image
    config of make image (read back from an image it writes of one small layer)."""
    final = stages(DOCKERFILE)[-1]
    layer = tmp_path / "layer.tar.gz"
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("etc/hello")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    info_layer = oci.pack_layer(io.BytesIO(data.getvalue()), layer)
    assert info_layer["diff_id"] == "sha256:" + hashlib.sha256(data.getvalue()).hexdigest()
    assert gzip.decompress(layer.read_bytes()) == data.getvalue()

    written = oci.write_image([layer], "2026-01-01T00:00:00Z", "amd64", tmp_path / "oci",
                              tmp_path / "image.oci.tar", ["a layer"])
    blobs = tmp_path / "oci" / "blobs" / "sha256"
    for blob in blobs.iterdir():  # every blob is named by its content
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    index = json.loads((tmp_path / "oci" / "index.json").read_text())
    (entry,) = index["manifests"]
    assert entry["digest"] == written["digest"]
    assert entry["annotations"]["io.containerd.image.name"] == f"docker.io/library/logkeeper:{rc.version()}"
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())
    assert config["rootfs"]["diff_ids"] == [info_layer["diff_id"]]
    assert [x["digest"] for x in manifest["layers"]] == [info_layer["digest"]]

    assert config["config"] == docker_config(final)
    assert config["config"]["User"] == "10001:10001"
    assert config["config"]["Entrypoint"][:2] == ["/usr/bin/tini", "--"]
    with tarfile.open(tmp_path / "image.oci.tar") as tar:
        assert {"index.json", "oci-layout", f"blobs/sha256/{layer_digest(info_layer)}"} <= set(tar.getnames())
    # the same inputs, the same digest
    again = oci.write_image([layer], "2026-01-01T00:00:00Z", "amd64", tmp_path / "oci2",
                            tmp_path / "image2.oci.tar", ["a layer"])
    assert again["digest"] == written["digest"]


def layer_digest(info: dict[str, Any]) -> str:
    return str(info["digest"]).split(":")[1]


def test_both_builds_install_the_recipes_packages() -> None:
    recipe = rc.read()
    build, final = stages(DOCKERFILE)
    assert apt_packages(final) == recipe["RUNTIME_PACKAGES"].split()
    assert apt_packages(build) == recipe["BUILD_PACKAGES"].split()
    assert build[0] == ("FROM", "${BASE} AS build") and final[0] == ("FROM", "${BASE}")
    assert f"ARG BASE={recipe['DOCKER_BASE']}" in DOCKERFILE
    assert recipe["DEBIAN_SUITE"] in recipe["DOCKER_BASE"]
    # make image bootstraps the same suite with the same lists
    assert re.search(r'bootstrap "\$base\.tmp/rootfs" "[^"]+" \$RUNTIME_PACKAGES\n', BUILD_SH)
    assert re.search(r'bootstrap "\$buildroot\.tmp/rootfs" "[^"]+" \$BUILD_PACKAGES\n', BUILD_SH)
    assert '"$DEBIAN_SUITE" "$dir" "${sources[@]}"' in BUILD_SH


def test_both_builds_run_the_same_steps() -> None:
    build, final = stages(DOCKERFILE)
    runs = lambda stage: " && ".join(rest for keyword, rest in stage if keyword == "RUN")  # noqa: E731
    for step in ("wheels", "deps", "app"):
        assert f"sh image/venv.sh {step} " in runs(build)
        assert re.search(rf"venv\.sh {step} ", BUILD_SH), step
    assert "sh /tmp/image/rootfs.sh" in runs(final)
    assert "/bin/sh /tmp/image/rootfs.sh" in BUILD_SH
    assert ("COPY", f"--from=build {rc.read()['VENV']} {rc.read()['VENV']}") in final


def test_the_docker_context_admits_what_the_dockerfile_copies() -> None:
    admitted = {line[1:] for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for stage in stages(DOCKERFILE):
        for keyword, rest in stage:
            if keyword == "COPY" and not rest.startswith("--from"):
                for source in rest.split()[:-1]:
                    assert source in admitted, f"{source} is COPYed but .dockerignore leaves it out"


def test_the_image_user_is_the_pods_user() -> None:
    uid = rc.read()["IMAGE_UID"]
    assert re.search(rf"^RUN_AS = {uid}$", (ROOT / "operator/logkeeper_operator/builders.py").read_text(), re.M)
    deployment = (ROOT / "charts/logkeeper/templates/deployment.yaml").read_text()
    assert set(re.findall(r"runAs(?:User|Group): (\d+)", deployment)) == {uid}


@pytest.mark.parametrize("line", ["A=$HOME", "B=`id`", "lower=1", "C=1 D=2", "E"])
def test_the_recipe_refuses_what_sh_and_python_would_read_differently(tmp_path: Path, line: str) -> None:
    path = tmp_path / "recipe.env"
    path.write_text(f"# comment\n{line}\n")
    with pytest.raises(ValueError):
        rc.read(path)
