"""Compare make image's image with the Dockerfile's built by buildah (image/dockerfile-check.sh).

    compare.py CACHE ROOTFS INSPECT_JSON

CACHE/oci is make image's OCI layout; ROOTFS the Dockerfile image's root mounted by buildah;
INSPECT_JSON ``buildah inspect`` of it. Compared: the container config, the Debian packages and
versions, the Python distributions in the venv, the user's passwd line, where JAVA_HOME points.
Prints every difference; exit status 1 when there is one.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recipe as rc


def packages(status: str) -> dict[str, str]:
    found = {}
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        if fields.get("Status") == "install ok installed":
            found[fields["Package"]] = fields["Version"]
    return found


def facts_of_layers(layout: Path, recipe: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    blobs = layout / "blobs" / "sha256"
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())
    site = recipe["VENV"].lstrip("/") + "/lib/" + recipe["PYTHON"] + "/site-packages/"
    facts: dict[str, Any] = {"dists": set()}
    for layer in manifest["layers"]:
        with tarfile.open(blobs / layer["digest"].split(":")[1], "r|gz") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name == "var/lib/dpkg/status":
                    facts["packages"] = packages(tar.extractfile(member).read().decode())  # type: ignore[union-attr]
                elif name == "etc/passwd":
                    facts["passwd"] = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
                elif name == recipe["JAVA_HOME"].lstrip("/") and member.issym():
                    facts["java_home"] = member.linkname
                elif name.startswith(site) and name.endswith(".dist-info") and member.isdir():
                    facts["dists"].add(name[len(site):])
    return config["config"], facts


def facts_of_rootfs(root: Path, recipe: dict[str, str]) -> dict[str, Any]:
    site = root / recipe["VENV"].lstrip("/") / "lib" / recipe["PYTHON"] / "site-packages"
    return {
        "packages": packages((root / "var/lib/dpkg/status").read_text()),
        "passwd": (root / "etc/passwd").read_text(),
        "java_home": os.readlink(root / recipe["JAVA_HOME"].lstrip("/")),
        "dists": {p.name for p in site.glob("*.dist-info")},
    }


def main() -> int:
    cache, rootfs, inspect = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    recipe = rc.read()
    ours, our_facts = facts_of_layers(cache / "oci", recipe)
    theirs = json.loads(inspect.read_text())["OCIv1"]["config"]
    theirs.get("Labels", {}).pop("io.buildah.version", None)
    their_facts = facts_of_rootfs(rootfs, recipe)
    differences = []
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key), theirs.get(key)
        if key == "Env":  # the order of variables is no difference
            a, b = sorted(a or []), sorted(b or [])
        if a != b:
            differences.append(f"config {key}: make image {a!r}, Dockerfile {b!r}")
    user = recipe["IMAGE_USER"] + ":"
    for name in ("passwd",):
        a = [line for line in our_facts[name].splitlines() if line.startswith(user)]
        b = [line for line in their_facts[name].splitlines() if line.startswith(user)]
        if a != b:
            differences.append(f"{name}: make image {a}, Dockerfile {b}")
    if our_facts["java_home"] != their_facts["java_home"]:
        differences.append(f"JAVA_HOME -> make image {our_facts['java_home']}, Dockerfile {their_facts['java_home']}")
    a, b = our_facts["packages"], their_facts["packages"]
    for name in sorted(set(a) | set(b)):
        if a.get(name) != b.get(name):
            differences.append(f"Debian package {name}: make image {a.get(name)}, Dockerfile {b.get(name)}")
    a, b = our_facts["dists"], their_facts["dists"]
    differences += [f"Python distribution only in make image's venv: {d}" for d in sorted(a - b)]
    differences += [f"Python distribution only in the Dockerfile's venv: {d}" for d in sorted(b - a)]
    for line in differences:
        print("  " + line)
    print(f"  compared: config, {len(our_facts['packages'])} Debian packages, "
          f"{len(our_facts['dists'])} Python distributions, user, "
          f"JAVA_HOME -> {our_facts['java_home']}: {len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
