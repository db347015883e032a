"""A simulated cluster on one machine, for tests: "nodes" that are Linux network
namespaces joined by veth pairs to a bridge, each with its own hostname (UTS namespace),
/etc/hosts and an sshd listening on its own address with a host key and a client key made
for the test. The nodes share the filesystem (repo and venv are visible on all of them).

    bridge namespace  <name>-br:  br0 --- vnodeA, vnodeB
    node namespace    <name>-a:   cl0 10.213.77.1/24, hostname nodeA, sshd on 10.213.77.1:22
    node namespace    <name>-b:   cl0 10.213.77.2/24, hostname nodeB, sshd on 10.213.77.2:22

Nothing touches the machine's own network namespace: every address lives inside namespaces
this module creates, so two clusters (two test runs) do not collide. Each node can give some
directories a private view: `private_dirs` get a tmpfs only that node sees (storage that is
not shared), `readonly_dirs` are mounted read-only there (a node that must never write).

Commands run "on" a node with `Cluster.command(node, args)` (nsenter into its network, UTS
and mount namespaces). Remote logins use `<root>/bin/ssh`, the real ssh with the options a
cluster's ~/.ssh/config would hold (no host key prompts, no known_hosts entries); put
`Cluster.path_env()` first in PATH. `close()` kills every process in the nodes' namespaces and
deletes the namespaces, also when start-up failed half-way.
"""

import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

SUBNET = "10.213.77"  # private; only addresses assigned here, inside our own namespaces
INTERFACE = "cl0"
SSHD = "/usr/sbin/sshd"
SSH_OPTIONS = ("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
               "-o BatchMode=yes -o ConnectTimeout=10")


class ClusterError(RuntimeError):
    """The simulated cluster could not be built; the message says what is missing."""


@dataclasses.dataclass
class Node:
    name: str
    address: str
    netns: str
    private_dirs: tuple = ()
    readonly_dirs: tuple = ()
    sshd: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.sshd.pid


def missing_prerequisites() -> str | None:
    """Why a cluster cannot be built here (tools the set-up step installs), or None."""
    for tool in ("ip", "nsenter", "unshare", "ssh", "ssh-keygen", SSHD):
        if shutil.which(tool) is None:
            return (f"{tool} not found: install Debian's openssh-server and iproute2 "
                    "(bash install/setup_env.sh does)")
    return None


def _run(args, timeout=30):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise ClusterError(f"{shlex.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def _pids_in_netns(netns: str) -> list[int]:
    target = os.stat(f"/run/netns/{netns}").st_ino
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def remove_stale_clusters():
    """Namespaces a killed test run left behind (btc<pid>-*, that pid gone): their
    processes are killed and the namespaces deleted."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                             timeout=30).stdout
    for line in listing.splitlines():
        match = re.match(r"(btc(\d+)-\S+)", line)
        if not match or os.path.exists(f"/proc/{match.group(2)}"):
            continue
        for pid in _pids_in_netns(match.group(1)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", match.group(1)], capture_output=True, timeout=30)


class Cluster:
    def __init__(self, root: Path, nodes: dict, tag: str | None = None):
        """`nodes`: name -> dict(private_dirs=..., readonly_dirs=...)."""
        self.root = Path(root)
        self.tag = tag or f"btc{os.getpid()}"
        self.bridge_ns = f"{self.tag}-br"
        self.nodes = {}
        for i, (name, options) in enumerate(nodes.items(), start=1):
            self.nodes[name] = Node(name, f"{SUBNET}.{i}", f"{self.tag}-{i}", **options)
        self.key = self.root / "id_ed25519"
        self._made_netns = []

    # ------------------------------------------------------------ set-up

    def start(self):
        problem = "needs root (network namespaces, mounts)" if os.geteuid() else \
            missing_prerequisites()
        if problem:
            raise ClusterError(problem)
        self.root.mkdir(parents=True, exist_ok=True)
        remove_stale_clusters()
        self._make_keys_and_files()
        self._add_netns(self.bridge_ns)
        _run(["ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.bridge_ns, "link", "set", "br0", "up"])
        for node in self.nodes.values():
            self._add_node(node)
        for node in self.nodes.values():
            self._start_sshd(node)
        self._wait_for_ssh()
        return self

    def _make_keys_and_files(self):
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.root / "host_key")])
        shutil.copy(f"{self.key}.pub", self.root / "authorized_keys")
        hosts = ["127.0.0.1 localhost"] + [f"{n.address} {n.name}" for n in self.nodes.values()]
        (self.root / "hosts").write_text("\n".join(hosts) + "\n")
        bin_dir = self.root / "bin"
        bin_dir.mkdir(exist_ok=True)
        wrapper = bin_dir / "ssh"
        wrapper.write_text(f"#!/bin/sh\nexec /usr/bin/ssh {SSH_OPTIONS} \"$@\"\n")
        wrapper.chmod(0o755)
        os.makedirs("/run/sshd", exist_ok=True)  # Debian's sshd privilege separation dir

    def _add_netns(self, name):
        _run(["ip", "netns", "add", name])
        self._made_netns.append(name)

    def _add_node(self, node: Node):
        self._add_netns(node.netns)
        peer = f"v{node.name}"[:15]
        _run(["ip", "link", "add", INTERFACE, "netns", node.netns, "type", "veth",
              "peer", "name", peer, "netns", self.bridge_ns])
        _run(["ip", "-n", self.bridge_ns, "link", "set", peer, "master", "br0", "up"])
        _run(["ip", "-n", node.netns, "addr", "add", f"{node.address}/24", "dev", INTERFACE])
        _run(["ip", "-n", node.netns, "link", "set", INTERFACE, "up"])
        _run(["ip", "-n", node.netns, "link", "set", "lo", "up"])

    def _sshd_config(self, node: Node) -> Path:
        path = self.root / f"sshd_config_{node.name}"
        path.write_text("\n".join([
            f"ListenAddress {node.address}", "Port 22",
            f"HostKey {self.root / 'host_key'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "PermitRootLogin yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "PrintMotd no",
            "PidFile none", "MaxStartups 200", "MaxSessions 200", ""]))
        return path

    def _start_sshd(self, node: Node):
        """sshd in the node's namespaces: its hostname, its /etc/hosts, its private mounts."""
        steps = [f"hostname {node.name}",
                 f"mount --bind {shlex.quote(str(self.root / 'hosts'))} /etc/hosts"]
        for directory in node.private_dirs:
            os.makedirs(directory, exist_ok=True)
            steps.append(f"mount -t tmpfs -o size=16m tmpfs {shlex.quote(str(directory))}")
        for directory in node.readonly_dirs:
            os.makedirs(directory, exist_ok=True)
            q = shlex.quote(str(directory))
            steps.append(f"mount --bind {q} {q} && mount -o remount,bind,ro {q}")
        steps.append(f"exec {SSHD} -D -e -f {shlex.quote(str(self._sshd_config(node)))}")
        log = open(self.root / f"sshd_{node.name}.log", "a")
        node.sshd = subprocess.Popen(
            ["ip", "netns", "exec", node.netns, "unshare", "--uts", "--mount",
             "--propagation", "private", "sh", "-ec", " && ".join(steps)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def _wait_for_ssh(self, attempts=50):
        first = next(iter(self.nodes.values()))
        for node in self.nodes.values():
            for _ in range(attempts):
                if node.sshd.poll() is not None:
                    raise ClusterError(f"sshd of {node.name} exited: "
                                       f"{(self.root / f'sshd_{node.name}.log').read_text()}")
                proc = subprocess.run(self.command(first, self.ssh(node.name, "hostname")),
                                      capture_output=True, text=True, timeout=30)
                if proc.returncode == 0 and proc.stdout.strip() == node.name:
                    break
                time.sleep(0.2)
            else:
                raise ClusterError(f"no ssh to {node.name} after {attempts} attempts: "
                                   f"{proc.stderr.strip()}")

    # ------------------------------------------------------------ use

    def ssh(self, host, command) -> list[str]:
        return [str(self.root / "bin" / "ssh"), "-i", str(self.key), host, command]

    def path_env(self) -> str:
        """PATH with the test's ssh first."""
        return f"{self.root / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    def command(self, node: Node | str, args, cwd=None) -> list[str]:
        """`args` run on `node`: in its network, UTS and mount namespaces."""
        node = self.nodes[node] if isinstance(node, str) else node
        return ["nsenter", "-t", str(node.pid), "-n", "-u", "-m",
                f"--wd={cwd or os.getcwd()}", "--", *map(str, args)]

    def pids_on(self, node: Node | str) -> list[int]:
        """Every process in the node's network namespace (sshd, sessions, ranks, ...)."""
        node = self.nodes[node] if isinstance(node, str) else node
        return _pids_in_netns(node.netns)

    def kill_node(self, node: Node | str, timeout=30.0) -> int:
        """SIGKILLs every process on the node (a node lost); returns how many."""
        node = self.nodes[node] if isinstance(node, str) else node
        killed = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = self.pids_on(node) if os.path.exists(f"/run/netns/{node.netns}") else []
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        if node.sshd is not None:
            node.sshd.wait(timeout=10)
        return killed

    def shape_egress(self, rate_mbit: float | None):
        """Every node's egress on INTERFACE paced at `rate_mbit` (None: unshaped again), so
        traffic between nodes crosses a link of that rate."""
        for node in self.nodes.values():
            prefix = ["ip", "netns", "exec", node.netns, "tc", "qdisc", "replace", "dev",
                      INTERFACE, "root"]
            if rate_mbit is None:
                _run([*prefix, "pfifo_fast"])
            else:
                # A token bucket (netem is not in every kernel): long transfers run at the rate.
                _run([*prefix, "tbf", "rate", f"{rate_mbit:g}mbit", "burst", "64kb",
                      "latency", "200ms"])

    def restart_node(self, node: Node | str):
        """Brings a killed node back: sshd again (same namespaces and address)."""
        node = self.nodes[node] if isinstance(node, str) else node
        self._start_sshd(node)
        self._wait_for_ssh()

    # ------------------------------------------------------------ tear-down

    def close(self):
        for node in self.nodes.values():
            if node.netns in self._made_netns:
                self.kill_node(node)
        for name in reversed(self._made_netns):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self._made_netns = []

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info):
        self.close()
