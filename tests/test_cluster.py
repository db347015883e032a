"""Two nodes x two ranks on a simulated cluster (tests/cluster.py: network namespaces, a
bridge, sshd per node): horovodrun and mpirun place the ranks, a 2x2 run takes the same
updates as 1x4, only rank 0 writes, --output_dir that is not shared fails clearly, a lost
node ends the job in bounded time and the rerun resumes exactly, launch.py runs it and
`doctor --hosts` preflights it.

nodeA launches (as you would log in to the first node); nodeB mounts `readonly/` read-only
(its ranks must never write to --output_dir) and has a private tmpfs at `private/` (storage
the other node does not see). Needs root; `make test-cluster` runs it.
"""

import json
import os
import sys
from pathlib import Path

import pytest
from cluster import INTERFACE, Cluster
from conftest import PYTHON, REPO, run_command

VENV_BIN = Path(sys.executable).parent
WORKER = REPO / "tests" / "cluster_worker.py"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
              "TF_NUM_INTEROP_THREADS": "1"}
HOSTS = "nodeA:2,nodeB:2"

# Missing sshd/ip fail (the set-up step installs them); only a non-root user skips.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="simulated cluster needs root")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    nodes = {"nodeA": {}, "nodeB": {"private_dirs": (str(root / "private"),),
                                    "readonly_dirs": (str(root / "readonly"),)}}
    with Cluster(root / "nodes", nodes) as c:
        c.shared = root / "readonly"      # nodeA writes, nodeB only reads
        c.private = root / "private"      # each node sees its own
        yield c


def cluster_env(cluster) -> dict:
    """What a rank needs, also on the other node (horovodrun forwards the whole
    environment; mpirun only the -x names of mpirun_args)."""
    return {**ONE_THREAD, "PATH": cluster.path_env(), "PYTHONPATH": str(REPO),
            "TF_CPP_MIN_LOG_LEVEL": "2"}


def horovodrun_args(cluster, hosts=HOSTS) -> list:
    world = sum(int(h.split(":")[1]) for h in hosts.split(","))
    return [VENV_BIN / "horovodrun", "-np", str(world), "-H", hosts, "--gloo",
            "--network-interfaces", INTERFACE, "--ssh-identity-file", cluster.key]


def mpirun_args(cluster, hostfile: Path) -> list:
    hostfile.write_text("nodeA slots=2\nnodeB slots=2\n")
    exports = [a for name in cluster_env(cluster) for a in ("-x", name)]
    return ["mpirun", "--allow-run-as-root", "-np", "4", "--hostfile", hostfile,
            "-bind-to", "none", "-map-by", "slot",
            "-mca", "plm_rsh_args", f"-i {cluster.key}",
            "-mca", "btl_tcp_if_include", INTERFACE, "-mca", "oob_tcp_if_include", INTERFACE,
            "-mca", "pml", "ob1", "-mca", "btl", "^openib", *exports]


def on_node_a(cluster, args, timeout=300, check=True):
    return run_command(cluster.command("nodeA", args, cwd=REPO), env=cluster_env(cluster),
                       timeout=timeout, check=check)


def expected_placement(rank):
    node = rank // 2
    return {"host": ["nodeA", "nodeB"][node], "rank": rank, "size": 4, "local_rank": rank % 2,
            "local_size": 2, "cross_rank": node, "cross_size": 2}


# ------------------------------------------------------------------ placement


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun"])
def test_two_ranks_per_node_with_local_and_cross_ranks(cluster, launcher, tmp_path):
    out = tmp_path / "placement"
    out.mkdir()
    launch = (horovodrun_args(cluster) if launcher == "horovodrun"
              else mpirun_args(cluster, tmp_path / "hostfile"))
    on_node_a(cluster, [*launch, PYTHON, WORKER, out])
    placements = [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]
    assert placements == [expected_placement(r) for r in range(4)]
