"""The real Kubernetes node of make e2e: containerd, kube-scheduler, kubelet and kube-proxy beside
tests/e2e/cluster.py's control plane, binaries from e2e/node_tools.sh.

- containerd 2.x: its own root, state, sockets and opt dir under the work dir; CRI with Debian's
  runc (cgroupfs), ``restrict_oom_score_adj = true`` (this host lacks CAP_SYS_RESOURCE: without it
  every sandbox fails with "can't get final child's PID from pipe: EOF"), network namespaces under
  its state dir, the locally built pause image pinned as the sandbox image, streaming on 127.0.0.1.
- CNI: a bridge ``BRIDGE`` with the pod subnet ``POD_SUBNET``, which exists only on this node; the
  pods get a route to that subnet only (no default route, no masquerading, an empty resolv.conf), so
  pod traffic stays inside the node. The bridge's address is the node's InternalIP, where kubelet
  serves (the API server reaches it there for logs).
- kubelet: cgroupfs under its own cgroup root, ``failCgroupV1: false`` (hybrid cgroups v1 here),
  root dir, pod logs and certs in the work dir, the admin kubeconfig; kube-scheduler likewise.

Every process is started here and stopped here by its PID; ``stop`` also removes the pod sandboxes,
ends any containerd shim that names this containerd's socket (by PID), unmounts what is mounted
under the work dir, deletes the bridge and the cgroups. Needs root.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cluster import ControlPlane, Proc, check_alive, free_port, log_tails, spawn

BRIDGE = "lknode0"
POD_SUBNET = "10.213.77.0/24"
NODE_IP = "10.213.77.1"
NODE_NAME = "logkeeper-node"
NETWORK = "logkeeper-e2e"
START_TIMEOUT_S = 120


def cgroup_mounts() -> list[Path]:
    """The cgroup v1 hierarchies and the v2 mount this host has."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] in ("cgroup", "cgroup2"):
            out.append(Path(parts[1]))
    return out


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=len, reverse=True)


# kubelet sets these to its liking at start (protectKernelDefaults: false; true makes it refuse to
# start when they differ, and there is no setting to leave them alone); _kubelet() puts the host's
# values back as soon as kubelet is up, stop() again
KERNEL_TUNABLES = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/conf/all/route_localnet")
# host directories the components make whatever they are configured with (containerd's shim sockets,
# kubelet's container log links, libcni's result cache); removed by stop() when they were not there
# before and are empty again
HOST_DIRS = ("/run/containerd/s", "/run/containerd", "/var/log/containers", "/var/lib/cni/results", "/var/lib/cni")


def kube_chains() -> set[tuple[str, str, str]]:
    """(command, table, chain) of each KUBE-* iptables/ip6tables chain: kubelet makes a few
    (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) and never removes them."""
    out = set()
    for cmd in ("iptables", "ip6tables"):
        try:
            dump = subprocess.run([f"{cmd}-save"], capture_output=True, text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        table = ""
        for line in dump.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":KUBE-"):
                out.add((cmd, table, line[1:].split()[0]))
    return out


def remove_kube_chains(chains: set[tuple[str, str, str]]) -> list[str]:
    """Delete ``chains`` and the rules that jump to them."""
    problems = []
    for cmd, table, chain in sorted(chains):
        dump = subprocess.run([f"{cmd}-save", "-t", table], capture_output=True, text=True, timeout=30,
                              check=False).stdout
        for line in dump.splitlines():
            if not line.startswith("-A "):
                continue
            rule = shlex.split(line)[1:]  # comments are quoted
            if "-j" in rule and rule[rule.index("-j") + 1] == chain and (cmd, table, rule[0]) not in chains:
                subprocess.run([cmd, "-t", table, "-D", *rule], capture_output=True, timeout=30, check=False)
    for cmd, table, chain in sorted(chains):
        subprocess.run([cmd, "-t", table, "-F", chain], capture_output=True, timeout=30, check=False)
    for cmd, table, chain in sorted(chains):
        out = subprocess.run([cmd, "-t", table, "-X", chain], capture_output=True, text=True, timeout=30, check=False)
        if out.returncode != 0:
            problems.append(f"{cmd} -t {table} -X {chain}: {out.stderr.strip()}")
    return problems


@dataclass
class RealNode:
    workdir: Path
    tools: dict[str, str]
    control_plane: ControlPlane
    procs: list[Proc] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    kernel_tunables: dict[str, str] = field(default_factory=dict)
    chains_before: set[tuple[str, str, str]] | None = None
    host_dirs_before: set[str] = field(default_factory=set)
    # with a kube-proxy binary: Services work from pods (iptables mode), and pods get a route to
    # service_cidr (the API server's --service-cluster-ip-range) through the node
    kube_proxy: str = ""
    service_cidr: str = ""
    network_made: bool = False

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"/logkeeper-node-{os.getpid()}"

    # processes ------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        return spawn(self.procs, self.workdir, name, argv, env)

    def _wait(self, proc: Proc, check: Any, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        # crictl and kubectl checks may time out (SubprocessError) while their server starts
        proc.wait_for(check, what, timeout_s, poll_s=0.5, tolerated=(OSError, subprocess.SubprocessError))

    def run(self, argv: list[str], timeout_s: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr}{out.stdout}")
        return out

    def crictl(self, *args: str, timeout_s: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([self.tools["CRICTL"], "--runtime-endpoint", f"unix://{self.socket}",
                         "--image-endpoint", f"unix://{self.socket}", "--timeout", "30s", *args],
                        timeout_s=timeout_s, check=check)

    def ctr(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        return self.run([self.tools["CTR"], "--address", str(self.socket), "--namespace", "k8s.io", *args],
                        timeout_s=timeout_s)

    # start ----------------------------------------------------------------------------------
    def start(self, images: list[Path]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host_dirs_before = {d for d in HOST_DIRS if Path(d).exists()}
        t0 = time.monotonic()
        if not Path(f"/sys/class/net/{BRIDGE}").exists() or not self.network_made:
            self.make_network()
        self._containerd()
        self.timings["containerd_s"] = time.monotonic() - t0
        for archive in [Path(self.tools["PAUSE_ARCHIVE"]), *images]:
            t = time.monotonic()
            self.ctr("images", "import", str(archive))
            self.timings[f"import {archive.name} s"] = time.monotonic() - t
        kubeconfig = str(self.control_plane.kubeconfig_path)
        self._spawn("kube-scheduler", [
            self.tools["KUBE_SCHEDULER"], f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--v=1"])
        self._kubelet()
        if self.kube_proxy:
            self._kube_proxy()
        self.timings["node_up_s"] = time.monotonic() - t0

    def make_network(self) -> None:
        """The pod network's bridge, made before kubelet starts so that its address can be the node's
        IP (and kube-apiserver's, ControlPlane.api_address, when pods talk to it: call this before
        the control plane starts); the CNI bridge plugin adopts it. Its config goes where
        containerd's CRI reads it."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.network_made = True
        if Path(f"/sys/class/net/{BRIDGE}").exists():  # left by a run that was killed
            print(f"realnode: deleting {BRIDGE}, left by an earlier run", flush=True)
            self.run(["ip", "link", "del", BRIDGE])
        self.run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        self.run(["ip", "addr", "add", f"{NODE_IP}/{POD_SUBNET.split('/')[1]}", "dev", BRIDGE])
        self.run(["ip", "link", "set", BRIDGE, "up"])
        conf_dir = self.workdir / "cni" / "net.d"
        conf_dir.mkdir(parents=True)
        conflist = {
            "cniVersion": "1.0.0", "name": NETWORK,
            "plugins": [{
                "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "dataDir": str(self.workdir / "cni" / "ipam"),
                         "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                         "routes": [{"dst": POD_SUBNET}, *([{"dst": self.service_cidr}] if self.service_cidr else [])]},
            }],
        }
        (conf_dir / "10-logkeeper.conflist").write_text(json.dumps(conflist, indent=1))

    def _containerd(self) -> None:
        w = self.workdir / "containerd"
        w.mkdir(parents=True, exist_ok=True)
        cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
        config = f"""version = 3
root = '{w / "root"}'
state = '{w / "state"}'
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
                    'io.containerd.snapshotter.v1.devmapper', 'io.containerd.nri.v1.nri',
                    'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = '{self.socket}'

[ttrpc]
  address = '{self.socket}.ttrpc'

[debug]
  address = '{w / "debug.sock"}'

[plugins.'io.containerd.internal.v1.opt']
  path = '{w / "opt"}'

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'

[{cri_runtime}]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[{cri_runtime}.containerd]
  default_runtime_name = 'runc'

[{cri_runtime}.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[{cri_runtime}.containerd.runtimes.runc.options]
  BinaryName = '{self.tools["RUNC"]}'
  Root = '{w / "runc"}'
  SystemdCgroup = false

[{cri_runtime}.cni]
  bin_dirs = ['{self.tools["CNI_BIN_DIR"]}']
  conf_dir = '{self.workdir / "cni" / "net.d"}'
  max_conf_num = 1

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '{self.tools["PAUSE_IMAGE"]}'
"""
        (w / "config.toml").write_text(config)
        path = f"{self.tools['CONTAINERD_BIN_DIR']}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        proc = self._spawn("containerd", [self.tools["CONTAINERD"], "--config", str(w / "config.toml"),
                                          "--log-level", "info"], env={"PATH": path})
        self._wait(proc, lambda: self.crictl("info", timeout_s=10, check=False).returncode == 0, "CRI info")

    def _kubelet(self) -> None:
        w = self.workdir / "kubelet"
        w.mkdir(parents=True, exist_ok=True)
        (w / "resolv.conf").write_text("")  # pods get no name server: no traffic leaves the node
        healthz = free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs", "failCgroupV1": False, "cgroupRoot": self.cgroup_root,
            "cgroupsPerQOS": True, "enforceNodeAllocatable": ["pods"],
            "containerRuntimeEndpoint": f"unix://{self.socket}", "imageServiceEndpoint": f"unix://{self.socket}",
            "address": NODE_IP, "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(w / "pod-logs"), "resolvConf": str(w / "resolv.conf"),
            "failSwapOn": False, "registerNode": True, "serializeImagePulls": False,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "4s", "syncFrequency": "10s",
        }
        (w / "config.json").write_text(json.dumps(config, indent=1))
        self._make_cgroup_root()
        self.kernel_tunables = {k: (Path("/proc/sys") / k).read_text() for k in KERNEL_TUNABLES}
        self.chains_before = kube_chains()
        proc = self._spawn("kubelet", [
            self.tools["KUBELET"], f"--config={w / 'config.json'}",
            f"--kubeconfig={self.control_plane.kubeconfig_path}", f"--root-dir={w / 'root'}",
            f"--cert-dir={w / 'pki'}", f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}", "--v=2"])

        def healthy() -> bool:
            import urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{healthz}/healthz", timeout=2) as r:
                return bool(r.status == 200)

        self._wait(proc, healthy, "/healthz")
        # kubelet sets its kernel tunables once, when its container manager starts (cm.Start ->
        # setupNode, once the runtime is first up: after /healthz answers and possibly after the
        # sync loop starts), just before it starts the device plugin manager; put the host's values
        # back then rather than leave them for the whole run (panic_on_oops=1 on a shared machine)
        self._wait(proc, lambda: b"Starting Device Plugin manager" in proc.log.read_bytes(),
                   "its container manager started")
        self.restore_kernel_tunables()

    def restore_kernel_tunables(self) -> list[str]:
        problems = []
        for key, value in self.kernel_tunables.items():
            try:
                (Path("/proc/sys") / key).write_text(value)
            except OSError as e:
                problems.append(f"restore {key}: {e}")
        return problems

    def kernel_tunables_changed(self) -> dict[str, str]:
        """Tunables whose value is not what the host had before kubelet started."""
        now = {k: (Path("/proc/sys") / k).read_text() for k in self.kernel_tunables}
        return {k: v.strip() for k, v in now.items() if v != self.kernel_tunables[k]}

    def _kube_proxy(self) -> None:
        """iptables mode; no conntrack sysctls (max-per-core 0), NodePorts only on the pod network
        (so no route_localnet)."""
        healthz = free_port()
        proc = self._spawn("kube-proxy", [
            self.kube_proxy, f"--kubeconfig={self.control_plane.kubeconfig_path}", f"--hostname-override={NODE_NAME}",
            "--proxy-mode=iptables", f"--cluster-cidr={POD_SUBNET}", f"--nodeport-addresses={POD_SUBNET}",
            "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0", f"--healthz-bind-address=127.0.0.1:{healthz}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}", "--v=1"])

        def healthy() -> bool:
            import urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{healthz}/healthz", timeout=2) as r:
                return bool(r.status == 200)

        self._wait(proc, healthy, "/healthz")

    def _make_cgroup_root(self) -> None:
        """kubelet wants its cgroupRoot to exist in every hierarchy; a new cpuset starts empty, so it
        gets its parent's CPUs and memory nodes."""
        for mount in cgroup_mounts():
            d = mount / self.cgroup_root.lstrip("/")
            d.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (d / name).exists() and not (d / name).read_text().strip():
                    (d / name).write_text((mount / name).read_text())

    # diagnostics ----------------------------------------------------------------------------
    def versions(self) -> dict[str, str]:
        def first(argv: list[str], env: dict[str, str] | None = None) -> str:
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False,
                                     env={**os.environ, **(env or {})})
            except (OSError, subprocess.SubprocessError) as e:
                return f"? ({e})"
            text = " ".join((out.stdout or out.stderr).split())
            return text or "?"

        t = self.tools
        return {
            "kubelet": first([t["KUBELET"], "--version"]),
            "kube-scheduler": first([t["KUBE_SCHEDULER"], "--version"]),
            "kube-proxy": first([self.kube_proxy, "--version"]) if self.kube_proxy else "not started",
            "containerd": first([t["CONTAINERD"], "--version"]),
            "runc": first([t["RUNC"], "--version"]),
            "crictl": first([t["CRICTL"], "--version"]),
            "containerd-shim-runc-v2": first([str(Path(t["CONTAINERD_BIN_DIR"]) / "containerd-shim-runc-v2"), "-v"]),
            "cni bridge": first([str(Path(t["CNI_BIN_DIR"]) / "bridge")]),
            "pause image": t["PAUSE_IMAGE"],
        }

    def log_tails(self, lines: int = 40) -> str:
        return log_tails(self.procs, lines)

    def check_alive(self) -> None:
        check_alive(self.procs)

    # stop -----------------------------------------------------------------------------------
    def stop(self, delete_network: bool = True) -> list[str]:
        """Stop everything this node started; returns what could not be cleaned (for the report).
        delete_network=False keeps the bridge (kube-apiserver on its address deletes its lease
        through it when it stops: stop the control plane, then call delete_network)."""
        problems: list[str] = []
        by_name = {p.name: p for p in self.procs}
        t = time.monotonic()
        if "kubelet" in by_name:
            by_name["kubelet"].stop()
            self.timings["stop kubelet s"] = round(time.monotonic() - t, 1)
        if "containerd" in by_name and by_name["containerd"].popen.poll() is None:
            for what in (("rmp", "--force", "--all"),):
                out = self.crictl(*what, timeout_s=90, check=False)
                if out.returncode != 0:
                    problems.append(f"crictl {' '.join(what)}: {out.stderr.strip()}")
        for name in ("kube-proxy", "kube-scheduler", "containerd"):
            if name in by_name:
                t = time.monotonic()
                by_name[name].stop()
                self.timings[f"stop {name} s"] = round(time.monotonic() - t, 1)
        self.procs.clear()
        problems += self._kill_shims()
        for point in mounts_under(self.workdir):
            out = subprocess.run(["umount", "--lazy", point], capture_output=True, text=True, check=False)
            if out.returncode != 0:
                problems.append(f"umount {point}: {out.stderr.strip()}")
        if delete_network:
            self.delete_network()
        problems += self._remove_cgroups()
        problems += self.restore_kernel_tunables()
        if self.chains_before is not None:
            problems += remove_kube_chains(kube_chains() - self.chains_before)
        problems += self._remove_container_log_links()
        for d in HOST_DIRS:
            if d not in self.host_dirs_before and Path(d).is_dir():
                try:
                    Path(d).rmdir()
                except OSError as e:
                    problems.append(f"{d} left (not empty): {e}")
        return problems

    def delete_network(self) -> None:
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)

    def _kill_shims(self) -> list[str]:
        """containerd-shim-runc-v2 processes outlive containerd by design; ours name our socket."""
        mark = str(self.socket).encode()
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if mark in (d / "cmdline").read_bytes():
                        pids.append(int(d.name))
                except OSError:
                    continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return [f"killed {len(pids)} leftover shim(s): {pids}"] if pids else []

    def _remove_cgroups(self) -> list[str]:
        left = []
        for mount in cgroup_mounts():
            root = mount / self.cgroup_root.lstrip("/")
            if not root.is_dir():
                continue
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                root.rmdir()
            except OSError as e:
                left.append(f"cgroup {root}: {e}")
        return left

    def _remove_container_log_links(self) -> list[str]:
        """kubelet links each container's log into /var/log/containers; ours point into the work dir."""
        d = Path("/var/log/containers")
        if d.is_dir():
            for link in d.iterdir():
                try:
                    if link.is_symlink() and os.readlink(link).startswith(str(self.workdir)):
                        link.unlink()
                except OSError:
                    continue
        return []

    def remove_workdir(self) -> None:
        if not mounts_under(self.workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)
