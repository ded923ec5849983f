"""The pod sandbox ("pause") image of make e2e, as an OCI archive for ``ctr images import``.

    python3 e2e/pause_image.py BINARY REF ARCHIVE

One layer holding BINARY as /pause (root, 0755); the config runs it as 65535:65535, as the
upstream pause image does. The archive is an OCI image layout (oci-layout, index.json,
blobs/sha256/...) in a tar; index.json names the manifest with ``io.containerd.image.name`` REF
(what containerd's import tags it as) and ``org.opencontainers.image.ref.name`` REF's tag.
Timestamps are zero and the JSON sorted, so the digest is a function of BINARY and REF only.
Writes ARCHIVE.digest (the manifest's digest) and prints it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import platform
import sys
import tarfile
from pathlib import Path
from typing import Any

GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x",
           "riscv64": "riscv64"}


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, 0, 0, 0
    tar.addfile(info, io.BytesIO(data))


def build(binary: Path, ref: str, archive: Path) -> str:
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, "pause", binary.read_bytes(), 0o755)
    layer_tar = plain.getvalue()
    layer = gzip.compress(layer_tar, compresslevel=6, mtime=0)
    arch = GO_ARCH.get(platform.machine(), platform.machine())
    config = {
        "architecture": arch, "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }
    blobs: dict[str, bytes] = {}

    def blob(media_type: str, data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob("application/vnd.oci.image.config.v1+json", _json(config)),
        "layers": [blob("application/vnd.oci.image.layer.v1.tar+gzip", layer)],
    }
    manifest_desc = blob("application/vnd.oci.image.manifest.v1+json", _json(manifest))
    index = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{**manifest_desc, "platform": {"architecture": arch, "os": "linux"},
                       "annotations": {"io.containerd.image.name": ref,
                                       "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}}],
    }
    tmp = archive.with_name(archive.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}), 0o644)
        _tar_member(tar, "index.json", _json(index), 0o644)
        for digest, data in sorted(blobs.items()):
            _tar_member(tar, "blobs/sha256/" + digest.split(":", 1)[1], data, 0o644)
    tmp.replace(archive)
    archive.with_name(archive.name + ".digest").write_text(manifest_desc["digest"])
    return str(manifest_desc["digest"])


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    print(build(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
