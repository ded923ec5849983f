"""The OCI image of ``make image``, written without a daemon (image/build.sh drives it).

    oci.py layer OUT < layer.tar
        gzip a layer tar from stdin into OUT; OUT.json gets its digest, diff_id and sizes
    oci.py image --layer OUT... --created T --arch ARCH --layout DIR --archive FILE
        an OCI image layout in DIR (its blobs hard links to the layers) and the same as an archive
        FILE (what ``ctr -n k8s.io images import`` and ``umoci`` read); the config is
        image/recipe.py's container_config, the reference ``docker.io/library/NAME:VERSION``.
        Prints one JSON line: digest (the manifest's), config (the image id), sizes.
    oci.py runtime-config BUNDLE [ARG...]
        the runc config.json that ``umoci unpack`` wrote, tightened: read-only root, /tmp a tmpfs,
        no capabilities, no new privileges, BUNDLE/hosts as /etc/hosts, the host's network; process
        args ARG... (none: the image's entrypoint and command; user and env stay the image's)

Everything written is a function of its inputs (sorted JSON, no timestamps but ``--created``), so
a rebuild from the same layers has the same digest.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any, BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recipe as rc

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
# Debian's architecture names -> OCI's (Go's)
ARCHITECTURES = {"amd64": "amd64", "arm64": "arm64", "armhf": "arm", "i386": "386", "ppc64el": "ppc64le",
                 "s390x": "s390x", "riscv64": "riscv64", "mips64el": "mips64le"}
CHUNK = 1 << 20


class _Hashing(io.RawIOBase):
    """A writer that hashes and counts what passes to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.out.write(data)


def pack_layer(source: BinaryIO, out: Path) -> dict[str, Any]:
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        compressed = _Hashing(f)
        plain = hashlib.sha256()
        unpacked = 0
        with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=6, mtime=0, filename="") as z:
            while chunk := source.read(CHUNK):
                plain.update(chunk)
                unpacked += len(chunk)
                z.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    info = {"digest": "sha256:" + compressed.sha.hexdigest(), "size": compressed.size,
            "diff_id": "sha256:" + plain.hexdigest(), "unpacked": unpacked}
    out.with_name(out.name + ".json").write_text(json.dumps(info, sort_keys=True) + "\n")
    os.replace(tmp, out)
    return info


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.write_bytes(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


def write_image(layers: list[Path], created: str, arch: str, layout: Path, archive: Path,
                history: list[str]) -> dict[str, Any]:
    recipe = rc.read()
    version = rc.version()
    name = f"docker.io/library/{recipe['IMAGE_NAME']}:{version}"
    infos = [json.loads(p.with_name(p.name + ".json").read_text()) for p in layers]
    if layout.exists():
        shutil.rmtree(layout)
    (layout / "blobs" / "sha256").mkdir(parents=True)
    for path, info in zip(layers, infos, strict=True):
        blob = layout / "blobs" / "sha256" / info["digest"].split(":", 1)[1]
        try:
            os.link(path, blob)
        except OSError:
            shutil.copyfile(path, blob)
    config = {
        "created": created,
        "architecture": ARCHITECTURES.get(arch, arch),
        "os": "linux",
        "config": rc.container_config(recipe, version),
        "rootfs": {"type": "layers", "diff_ids": [i["diff_id"] for i in infos]},
        "history": [{"created": created, "created_by": h} for h in history],
    }
    config_desc = {"mediaType": CONFIG, **_blob(layout, _json(config))}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config_desc,
        "layers": [{"mediaType": LAYER, "digest": i["digest"], "size": i["size"]} for i in infos],
        "annotations": {"org.opencontainers.image.version": version,
                        "org.opencontainers.image.title": recipe["IMAGE_NAME"],
                        "org.opencontainers.image.created": created},
    }
    manifest_desc = {"mediaType": MANIFEST, **_blob(layout, _json(manifest))}
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{**manifest_desc, "platform": {"architecture": config["architecture"], "os": "linux"},
                       "annotations": {
            # umoci and skopeo find the image by this tag; containerd's import names it by the other
            "org.opencontainers.image.ref.name": version,
            "io.containerd.image.name": name,
        }}],
    }
    (layout / "index.json").write_bytes(_json(index))
    (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    summary = {"name": name, "digest": manifest_desc["digest"], "config": config_desc["digest"],
               "size": manifest_desc["size"] + config_desc["size"] + sum(i["size"] for i in infos),
               "unpacked": sum(i["unpacked"] for i in infos), "layers": len(infos), "archive": str(archive)}
    stamp = archive.with_name(archive.name + ".digest")
    if archive.exists() and stamp.exists() and stamp.read_text() == summary["digest"]:
        return summary  # the archive of this very image is there (a rerun)
    stamp.unlink(missing_ok=True)
    tmp = archive.with_name(archive.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(layout.rglob("*")):
            info = tar.gettarinfo(path, str(path.relative_to(layout)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_file():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    os.replace(tmp, archive)
    stamp.write_text(summary["digest"])
    return summary


def runtime_config(bundle: Path, args: list[str]) -> None:
    path, image = bundle / "config.json", bundle / "config.json.image"
    if not image.exists():
        shutil.copyfile(path, image)
    spec = json.loads(image.read_text())
    spec["root"]["readonly"] = True
    spec["hostname"] = "logkeeper"
    process = spec["process"]
    if args:
        process["args"] = args
    process["terminal"] = False
    process["noNewPrivileges"] = True
    process["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
    process.pop("rlimits", None)
    spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/tmp"] + [
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "mode=1777", "size=1g"]}]
    if (bundle / "hosts").exists():  # what a pod gets from the kubelet
        spec["mounts"].append({"destination": "/etc/hosts", "type": "bind", "source": str(bundle / "hosts"),
                               "options": ["rbind", "ro"]})
    # the host's network (a new namespace's loopback would be down): Spark's driver binds 127.0.0.1
    namespaces = spec["linux"]["namespaces"]
    spec["linux"]["namespaces"] = [n for n in namespaces if n["type"] != "network"]
    path.write_text(json.dumps(spec, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    layer = sub.add_parser("layer")
    layer.add_argument("out", type=Path)
    image = sub.add_parser("image")
    image.add_argument("--layer", type=Path, action="append", required=True)
    image.add_argument("--history", action="append", default=[])
    image.add_argument("--created", required=True)
    image.add_argument("--arch", required=True)
    image.add_argument("--layout", type=Path, required=True)
    image.add_argument("--archive", type=Path, required=True)
    sub.add_parser("runtime-config", help="BUNDLE [ARG...]: taken as they are (argparse drops --)")
    if sys.argv[1:2] == ["runtime-config"] and len(sys.argv) > 2:
        runtime_config(Path(sys.argv[2]), sys.argv[3:])
        return 0
    a = parser.parse_args()
    if a.command == "layer":
        print(json.dumps(pack_layer(sys.stdin.buffer, a.out), sort_keys=True))
    elif a.command == "image":
        print(json.dumps(write_image(a.layer, a.created, a.arch, a.layout, a.archive, a.history), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
