"""The doctor's --hosts checks: the rank mapping horovodrun and mpirun will use, then, over
ssh, every node's software, a network interface they share and whether --output_dir is
shared storage."""

import dataclasses
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys

from bert_tf.data.files import OutputDirError
from bert_tf.data.output_dir import check_output_dir
from bert_tf.tools.doctor_check import FAIL, OK, WARN, Check

DOCTOR_MARKER = ".bert_tf-doctor-shared-check"


@dataclasses.dataclass
class HostSettings:
    """How to reach the nodes and what the run will use on them."""

    hosts: list  # (name, slots)
    python: str
    network_interface: list | None = None
    ssh_identity_file: str | None = None
    ssh_port: int | None = None
    output_dir: str | None = None


def parse_hosts(values) -> list[tuple[str, int]]:
    """`host[:slots]` (horovodrun -H syntax) -> (host, slots)."""
    parsed = []
    for value in values:
        name, _, slots = value.partition(":")
        if not name or (slots and not slots.isdigit()) or slots == "0":
            raise ValueError(f"--hosts: {value!r} is not host or host:slots (e.g. node1:8)")
        parsed.append((name, int(slots or 1)))
    return parsed


def rank_mapping(hosts) -> list[dict]:
    """Where horovodrun -H and mpirun -map-by slot put each rank: a host's slots in order."""
    ranks = []
    for cross_rank, (host, slots) in enumerate(hosts):
        for local_rank in range(slots):
            ranks.append({"host": host, "rank": len(ranks), "local_rank": local_rank,
                          "local_size": slots, "cross_rank": cross_rank})
    return ranks


def describe_mapping(hosts) -> list[str]:
    return [f"rank {r['rank']}: {r['host']} local_rank {r['local_rank']} (GPU "
            f"{r['local_rank']}) of {r['local_size']}, cross_rank {r['cross_rank']}"
            for r in rank_mapping(hosts)]


def probe(marker=None, token=None) -> dict:
    """What this node has: versions, interfaces, whether it sees the doctor's marker file."""
    import socket

    import psutil

    import bert_tf

    found = {"host": socket.gethostname(), "python": platform.python_version(),
             "executable": sys.executable, "bert_tf": bert_tf.__version__,
             "bert_tf_path": os.path.dirname(os.path.abspath(bert_tf.__file__))}
    try:
        import tensorflow as tf
        found["tensorflow"] = tf.__version__
    except ImportError:
        found["tensorflow"] = None
    try:
        found["horovod"] = importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        found["horovod"] = None
    found["interfaces"] = {name: [a.address for a in addresses if a.family == socket.AF_INET]
                           for name, addresses in psutil.net_if_addrs().items()}
    if marker:
        try:
            with open(marker) as f:
                found["sees_marker"] = f.read() == token
        except OSError:
            found["sees_marker"] = False
    return found


def ssh_probe(host: str, h: HostSettings, marker=None, token=None) -> dict:
    """probe() run on `host` over ssh (raises RuntimeError with ssh's message)."""
    code = (f"import json; from bert_tf.tools.doctor_hosts import probe; "
            f"print('PROBE ' + json.dumps(probe({marker!r}, {token!r})))")
    env = [f"PYTHONPATH={os.environ['PYTHONPATH']}"] if os.environ.get("PYTHONPATH") else []
    remote = (f"cd {shlex.quote(os.getcwd())} 2>/dev/null; "
              + shlex.join(["env", "TF_CPP_MIN_LOG_LEVEL=3", *env, h.python, "-c", code]))
    command = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    command += ["-i", h.ssh_identity_file] if h.ssh_identity_file else []
    command += ["-p", str(h.ssh_port)] if h.ssh_port else []
    try:
        proc = subprocess.run(command + [host, remote], capture_output=True, text=True,
                              timeout=180)
    except subprocess.TimeoutExpired:
        raise RuntimeError("no answer within 180 s") from None
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[len("PROBE "):])
    error = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    raise RuntimeError(error[:300])


def check_versions(probes: dict) -> Check:
    name = "same software on every node"
    keys = ("python", "tensorflow", "horovod", "bert_tf")
    first_host, first = next(iter(probes.items()))
    differ = [f"{host}: {k} {p[k]} (vs {first[k]} on {first_host})"
              for host, p in probes.items() for k in keys if p[k] != first[k]]
    summary = ", ".join(f"{k} {first[k]}" for k in keys)
    if differ:
        return Check(FAIL, name, "; ".join(differ),
                     "install the same environment on every node (one shared venv or the same "
                     "container image)")
    return Check(OK, name, f"{summary} on {', '.join(probes)}")


def check_interface(probes: dict, wanted) -> Check:
    name = "network interface"
    def usable(p):
        return {i for i, addrs in p["interfaces"].items() if addrs and i != "lo"}
    if wanted:
        missing = [f"{host} has no {i} with an IPv4 address" for host, p in probes.items()
                   for i in wanted if i not in usable(p)]
        if missing:
            return Check(FAIL, name, "; ".join(missing),
                         "name an interface every node has (ip -4 addr on each node)")
        addresses = ", ".join(f"{host} {p['interfaces'][wanted[0]][0]}"
                              for host, p in probes.items())
        return Check(OK, name, f"{','.join(wanted)} on every node ({addresses})")
    common = set.intersection(*(usable(p) for p in probes.values()))
    if not common:
        return Check(FAIL, name, "no interface name with an IPv4 address is common to all "
                     "nodes", "pass --network_interface (launch.py) with the one to use")
    if len(common) > 1:
        return Check(WARN, name, f"several common interfaces: {', '.join(sorted(common))}; "
                     "the launchers may pick a slow or unroutable one",
                     f"pass --network_interface={sorted(common)[0]} (or the fast one)")
    return Check(OK, name, f"{common.pop()} is the one interface all nodes share: "
                 "pass it as --network_interface")


def check_shared_dir(probes: dict, output_dir) -> Check:
    name = "shared --output_dir"
    blind = [host for host, p in probes.items() if not p.get("sees_marker")]
    if blind:
        return Check(FAIL, name, f"{', '.join(blind)} cannot see {output_dir} as written here "
                     "(not shared storage); rank 0 alone writes checkpoints and a resume on "
                     "another node would not find them",
                     "use a directory every node mounts at the same path (NFS, Lustre, ...)")
    return Check(OK, name, f"{output_dir} is seen by every node")


def host_checks(h: HostSettings) -> list[Check]:
    """ssh to every node, then compare what they have."""
    checks, probes = [], {}
    marker = token = None
    if h.output_dir:
        try:
            check_output_dir(h.output_dir, "output_dir", create=True)
            marker, token = os.path.join(h.output_dir, DOCTOR_MARKER), os.urandom(8).hex()
            with open(marker, "w") as f:
                f.write(token)
        except OutputDirError as e:
            checks.append(Check(FAIL, "shared --output_dir", str(e),
                                "use a directory every node mounts at the same path (NFS, "
                                "Lustre, ...) and can write"))
    try:
        for host, _ in h.hosts:
            try:
                probes[host] = ssh_probe(host, h, marker, token)
                checks.append(Check(OK, f"ssh {host}", f"reachable (hostname "
                                    f"{probes[host]['host']}, {probes[host]['executable']})"))
            except RuntimeError as e:
                checks.append(Check(FAIL, f"ssh {host}", f"{h.python} did not run there: {e}",
                                    "set up key-based ssh without prompts (ssh-copy-id; "
                                    "--ssh_identity_file/--ssh_port), and the same --python "
                                    "path on every node"))
    finally:
        if marker:
            os.remove(marker)
    if probes:
        checks += [check_versions(probes), check_interface(probes, h.network_interface)]
        if marker:
            checks.append(check_shared_dir(probes, h.output_dir))
    return checks


def run_host_checks(doctor) -> list[Check]:
    """The rank mapping lines are printed; the checks returned."""
    try:
        hosts = parse_hosts(doctor.hosts)
    except ValueError as e:
        return [Check(FAIL, "--hosts", str(e), "list the nodes as host:slots,host:slots")]
    for line in describe_mapping(hosts):
        print(line)
    output_dir = doctor.training.output_dir if doctor.training is not None else None
    return host_checks(HostSettings(
        hosts=hosts, python=doctor.remote_python, network_interface=doctor.network_interface,
        ssh_identity_file=doctor.ssh_identity_file, ssh_port=doctor.ssh_port,
        output_dir=output_dir))
