"""A FUSE file system that remembers only what was fsynced: power cuts for the crash tests.

Why FUSE: the engine writes segments with ``pwrite``, indexes through shared ``mmap`` stores,
checkpoints by rename, and deletes by rename and unlink. A recording layer inside the process
would have to catch every one of those paths (and miss the next one added); the kernel sends all
of them here, mmap stores included (as writes, when they are written back: on ``msync``, on
``munmap`` or by the kernel's own writeback).

Every node keeps two states:

- a file: its current bytes, its *durable* bytes (a copy taken at its last ``fsync``; empty for a
  file never fsynced) and the writes and truncations since then, in order;
- a directory: its current entries (name -> node), its durable entries (a copy taken at its last
  ``fsync`` of the directory; none for a directory never fsynced) and the entry changes since
  (create, unlink, rename within it; a rename between two directories is an unlink in one and a
  create in the other).

A *cut* (``PowerCutFS.cut``) freezes the file system: every later request fails with EIO, so
nothing the engine does after the cut can become durable. Then it writes the image a disk could
hold after losing power into a real directory: from the root, each directory's durable entries,
each file's durable bytes. With ``torn=True`` each file and directory may keep, besides its
durable state, a random prefix of the changes made after it (chosen by the seeded ``rng``); the
last write kept may be torn (a random prefix of it) or land as zeros (a size that reached the
disk before the data did). A rename or create never followed by an fsync of its directory may
therefore be undone, and data written after the last fsync of a file is dropped or torn.

powercut_mount.py mounts it in a forked daemon (``Daemon``).
"""

from __future__ import annotations

import errno
import os
import random
import stat
import threading
import time
from pathlib import Path
from typing import Any

import mfusepy


class FileNode:
    __slots__ = ("data", "durable", "mtime_ns", "pending")

    def __init__(self, data: bytes = b"", durable: bool = False) -> None:
        self.data = bytearray(data)
        self.durable = bytes(data) if durable else b""
        self.pending: list[tuple[str, int, bytes]] = []  # ("w", offset, bytes) / ("t", size, b"")
        self.mtime_ns = time.time_ns()


class DirNode:
    __slots__ = ("durable", "entries", "mtime_ns", "pending")

    def __init__(self) -> None:
        self.entries: dict[str, Node] = {}
        self.durable: dict[str, Node] = {}
        # ("set", name, node) / ("del", name, None) / ("mv", old, (new, node))
        self.pending: list[tuple[str, str, Any]] = []
        self.mtime_ns = time.time_ns()


Node = FileNode | DirNode


def load_tree(path: Path) -> DirNode:
    """A directory tree from real files, every byte and entry taken as durable."""
    root = DirNode()
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        node: Node
        if entry.is_dir(follow_symlinks=False):
            node = load_tree(Path(entry.path))
        else:
            node = FileNode(Path(entry.path).read_bytes(), durable=True)
        root.entries[entry.name] = node
    root.durable = dict(root.entries)
    return root


class CutStats:
    """What a cut threw away, summed over the image."""

    def __init__(self) -> None:
        self.files = 0
        self.files_with_lost_writes = 0
        self.lost_bytes = 0
        self.torn_files = 0
        self.undone_dir_changes = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("files", "files_with_lost_writes", "lost_bytes", "torn_files",
                                               "undone_dir_changes")}


def _apply_dir_op(entries: dict[str, Node], op: tuple[str, str, Any]) -> None:
    kind, name, arg = op
    if kind == "set":
        entries[name] = arg
    elif kind == "del":
        entries.pop(name, None)
    else:  # "mv": the whole rename or nothing (a journaling file system renames atomically)
        new, node = arg
        entries.pop(name, None)
        entries[new] = node


def _write_into(data: bytearray, offset: int, chunk: bytes) -> None:
    end = offset + len(chunk)
    if end > len(data):
        data.extend(bytes(end - len(data)))
    data[offset:end] = chunk


def durable_bytes(node: FileNode, rng: random.Random, torn: bool, stats: CutStats) -> bytes:
    data = bytearray(node.durable)
    stats.files += 1
    if not node.pending:
        return bytes(data)
    stats.files_with_lost_writes += 1
    keep = rng.randint(0, len(node.pending)) if torn and rng.random() < 0.5 else 0
    for i, (kind, arg, chunk) in enumerate(node.pending[:keep]):
        if kind == "t":
            del data[arg:]
            data.extend(bytes(arg - len(data)))
            continue
        if i == keep - 1:  # the last write that reached the disk: whole, torn, or only its size
            how = rng.random()
            if how < 0.3:
                chunk = chunk[:rng.randint(0, len(chunk))]
                stats.torn_files += 1
            elif how < 0.45:
                chunk = bytes(len(chunk))
                stats.torn_files += 1
        _write_into(data, arg, chunk)
    stats.lost_bytes += abs(len(node.data) - len(data)) + sum(
        len(c) for _k, _a, c in node.pending[keep:])
    return bytes(data)


def durable_entries(node: DirNode, rng: random.Random, torn: bool, stats: CutStats) -> dict[str, Node]:
    entries = dict(node.durable)
    if not node.pending:
        return entries
    keep = rng.randint(0, len(node.pending)) if torn and rng.random() < 0.5 else 0
    for op in node.pending[:keep]:
        _apply_dir_op(entries, op)
    stats.undone_dir_changes += len(node.pending) - keep
    return entries


def write_image(root: DirNode, out: Path, rng: random.Random, torn: bool, stats: CutStats) -> None:
    """Write what survives a power cut of ``root`` under ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, node in sorted(durable_entries(root, rng, torn, stats).items()):
        if isinstance(node, DirNode):
            write_image(node, out / name, rng, torn, stats)
        else:
            (out / name).write_bytes(durable_bytes(node, rng, torn, stats))


class PowerCutFS(mfusepy.Operations):
    """The file system's operations, on nodes in memory; one lock serialises them with ``cut``."""

    use_ns = True

    def __init__(self, root: DirNode, on_ready: Any = None) -> None:
        self.root = root
        self._mutex = threading.Lock()
        self.frozen = False
        self.handles: dict[int, Node] = {}
        self.next_fh = 1
        self.on_ready = on_ready
        self.counts = {"fsync": 0, "fsyncdir": 0, "write": 0}

    # ---------------------------------------------------------------- helpers
    def _check(self) -> None:
        if self.frozen:
            raise mfusepy.FuseOSError(errno.EIO)

    def _lookup(self, path: str) -> Node:
        node: Node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not isinstance(node, DirNode) or part not in node.entries:
                raise mfusepy.FuseOSError(errno.ENOENT)
            node = node.entries[part]
        return node

    def _parent(self, path: str) -> tuple[DirNode, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not isinstance(parent, DirNode):
            raise mfusepy.FuseOSError(errno.ENOTDIR)
        return parent, name

    def _entry(self, path: str) -> tuple[DirNode, str, Node]:
        """The parent, name and node of an existing ``path`` (ENOENT otherwise)."""
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise mfusepy.FuseOSError(errno.ENOENT)
        return parent, name, node

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh and fh in self.handles:
            return self.handles[fh]
        if path is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return self._lookup(path)

    def _file(self, path: str | None, fh: int | None) -> FileNode:
        node = self._node(path, fh)
        if not isinstance(node, FileNode):
            raise mfusepy.FuseOSError(errno.EISDIR)
        return node

    def _new_handle(self, node: Node) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = node
        return fh

    @staticmethod
    def _set_entry(parent: DirNode, name: str, node: Node) -> None:
        parent.entries[name] = node
        parent.pending.append(("set", name, node))
        parent.mtime_ns = time.time_ns()

    @staticmethod
    def _del_entry(parent: DirNode, name: str) -> None:
        del parent.entries[name]
        parent.pending.append(("del", name, None))
        parent.mtime_ns = time.time_ns()

    @staticmethod
    def _resize(node: FileNode, size: int) -> None:
        if size < len(node.data):
            del node.data[size:]
        else:
            node.data.extend(bytes(size - len(node.data)))
        node.pending.append(("t", size, b""))
        node.mtime_ns = time.time_ns()

    # ---------------------------------------------------------------- the cut
    def cut(self, seed: int, torn: bool, out: Path) -> dict[str, Any]:
        with self._mutex:
            self.frozen = True  # from here on nothing reaches the "disk"
            stats = CutStats()
            write_image(self.root, out, random.Random(seed), torn, stats)
            return {**stats.as_dict(), **self.counts}

    # ---------------------------------------------------------------- operations
    def init(self, path: str) -> None:
        if self.on_ready is not None:
            self.on_ready()

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self._mutex:
            self._check()
            node = self._node(path, fh)
            if isinstance(node, DirNode):
                return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_size": 4096,
                        "st_mtime": node.mtime_ns, "st_ctime": node.mtime_ns, "st_atime": node.mtime_ns}
            return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": len(node.data),
                    "st_blocks": (len(node.data) + 511) // 512,
                    "st_mtime": node.mtime_ns, "st_ctime": node.mtime_ns, "st_atime": node.mtime_ns}

    def readdir(self, path: str, fh: int) -> list[str]:
        with self._mutex:
            self._check()
            node = self._node(path, fh)
            if not isinstance(node, DirNode):
                raise mfusepy.FuseOSError(errno.ENOTDIR)
            return [".", "..", *node.entries]

    def opendir(self, path: str) -> int:
        with self._mutex:
            self._check()
            node = self._lookup(path)
            if not isinstance(node, DirNode):
                raise mfusepy.FuseOSError(errno.ENOTDIR)
            return self._new_handle(node)

    def releasedir(self, path: str, fh: int) -> int:
        with self._mutex:
            self.handles.pop(fh, None)
            return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self._check()
            node = self._node(path, fh)
            if not isinstance(node, DirNode):
                raise mfusepy.FuseOSError(errno.ENOTDIR)
            node.durable = dict(node.entries)
            node.pending.clear()
            self.counts["fsyncdir"] += 1
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            self._check()
            parent, name = self._parent(path)
            if name in parent.entries:
                raise mfusepy.FuseOSError(errno.EEXIST)
            self._set_entry(parent, name, DirNode())
            return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            self._check()
            parent, name, node = self._entry(path)
            if not isinstance(node, DirNode):
                raise mfusepy.FuseOSError(errno.ENOTDIR)
            if node.entries:
                raise mfusepy.FuseOSError(errno.ENOTEMPTY)
            self._del_entry(parent, name)
            return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mutex:
            self._check()
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                node = FileNode()
                self._set_entry(parent, name, node)
            elif isinstance(node, DirNode):
                raise mfusepy.FuseOSError(errno.EISDIR)
            return self._new_handle(node)

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            self._check()
            node = self._lookup(path)
            if isinstance(node, DirNode):
                raise mfusepy.FuseOSError(errno.EISDIR)
            if flags & os.O_TRUNC and node.data:
                self._resize(node, 0)
            return self._new_handle(node)

    def release(self, path: str | None, fh: int) -> int:
        with self._mutex:  # also after a cut: the kernel closes a killed process's files
            self.handles.pop(fh, None)
            return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0  # close() promises nothing about durability

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            self._check()
            node = self._file(path, fh)
            return bytes(node.data[offset:offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            self._check()
            node = self._file(path, fh)
            chunk = bytes(data)
            _write_into(node.data, offset, chunk)
            node.pending.append(("w", offset, chunk))
            node.mtime_ns = time.time_ns()
            self.counts["write"] += 1
            return len(chunk)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._mutex:
            self._check()
            self._resize(self._file(path, fh), length)
            return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        with self._mutex:
            self._check()
            if mode != 0:
                raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
            node = self._file(path, fh)
            if offset + size > len(node.data):
                self._resize(node, offset + size)
            return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mutex:
            self._check()
            node = self._file(path, fh)
            # fdatasync too: the size is needed to read the data back, so it is kept with it
            node.durable = bytes(node.data)
            node.pending.clear()
            self.counts["fsync"] += 1
            return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            self._check()
            parent, name, node = self._entry(path)
            if isinstance(node, DirNode):
                raise mfusepy.FuseOSError(errno.EISDIR)
            self._del_entry(parent, name)
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            self._check()
            src, old_name = self._parent(old)
            dst, new_name = self._parent(new)
            node = src.entries.get(old_name)
            if node is None:
                raise mfusepy.FuseOSError(errno.ENOENT)
            target = dst.entries.get(new_name)
            if isinstance(target, DirNode) and target.entries:
                raise mfusepy.FuseOSError(errno.ENOTEMPTY)
            if src is dst:
                del src.entries[old_name]
                src.entries[new_name] = node
                src.pending.append(("mv", old_name, (new_name, node)))
                src.mtime_ns = time.time_ns()
            else:
                self._del_entry(src, old_name)
                self._set_entry(dst, new_name, node)
            return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self._mutex:
            self._check()
            node = self._lookup(path)
            node.mtime_ns = times[1] if times else time.time_ns()
            return 0

    def chmod(self, path: str, mode: int) -> int:
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 20, "f_bfree": 1 << 19,
                "f_bavail": 1 << 19, "f_files": 1 << 16, "f_ffree": 1 << 15, "f_namemax": 255}
