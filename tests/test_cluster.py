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
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import tiny
from cluster import INTERFACE, Cluster
from conftest import PYTHON, REPO, run_command
from tiny import ONE_THREAD, PREDICTIONS, SEQ, VENV_BIN, checkpoint_values

WORKER = REPO / "tests" / "cluster_worker.py"
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
    return {**ONE_THREAD, "PATH": f"{VENV_BIN}:{cluster.path_env()}", "PYTHONPATH": str(REPO),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            # Four ranks on a machine with few cores: MPI waits yield the CPU, not spin.
            "OMPI_MCA_mpi_yield_when_idle": "1"}


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


# ------------------------------------------------------------------ training

STEPS = 12


@pytest.fixture(scope="module")
def data(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("cluster_data")
    (root / "train.txt").write_text(tiny.emma(shared_data)[:60_000])
    tiny.make_records([root / "train.txt"], [root / "train.tfrecord"],
                      tiny.vocab_file(shared_data), 1)
    tiny.write_bert_config(root / "bert_config.json", dropout=0.1)
    return root


def training_flags(data, output_dir) -> list[str]:
    """Dropout on: the same weights after a resume also need the same dropout masks."""
    return tiny.as_flags(tiny.training_settings(
        bert_config_file=data / "bert_config.json", input_files=data / "train.tfrecord",
        output_dir=output_dir, num_train_steps=STEPS, num_warmup_steps=2, learning_rate=2e-3,
        save_checkpoints_steps=3, log_every_n_steps=3, peer_timeout_seconds=60))


def launch_args(cluster, launcher) -> list:
    """launch/launch.py across the two nodes, as docs/running.md shows it."""
    args = [PYTHON, REPO / "launch" / "launch.py", f"--launcher={launcher}",
            "--hosts=nodeA,nodeB", "--num_gpus=2", f"--network_interface={INTERFACE}",
            f"--ssh_identity_file={cluster.key}", f"--python={PYTHON}"]
    if launcher == "horovodrun":
        return args + ["--controller=gloo"]
    return args + ["--forward_env=" + ",".join(cluster_env(cluster))]


def assert_same_weights(a, b):
    import numpy as np

    assert a.keys() == b.keys()
    for name, value in a.items():
        np.testing.assert_allclose(b[name], value, atol=1e-5, rtol=1e-5, err_msg=name)


@pytest.fixture(scope="module")
def two_node_run(cluster, data):
    """launch.py --launcher=horovodrun across nodeA and nodeB; nodeB's view of the output
    directory is read-only, so the run only succeeds if no rank on nodeB writes there."""
    output_dir = cluster.shared / "horovodrun"
    proc = on_node_a(cluster, [*launch_args(cluster, "horovodrun"),
                               *training_flags(data, output_dir)], timeout=600)
    return output_dir, proc


def test_launch_runs_two_nodes_and_only_rank0_writes(two_node_run):
    output_dir, proc = two_node_run
    assert "horovodrun -np 4 -H nodeA:2,nodeB:2" in proc.stdout  # the command it ran
    assert "4 rank(s)" in proc.stdout, proc.stdout
    assert (output_dir / f"model.ckpt-{STEPS}.index").exists()
    assert (output_dir / "metrics.jsonl").exists()


def test_two_nodes_take_the_same_updates_as_one_node_with_four_ranks(cluster, data, tmp_path,
                                                                   two_node_run):
    one_node = tmp_path / "one_node"
    on_node_a(cluster, [VENV_BIN / "horovodrun", "-np", "4", "-H", "localhost:4", "--gloo",
                        PYTHON, REPO / "run_pretraining.py", *training_flags(data, one_node)],
              timeout=600)
    assert_same_weights(checkpoint_values(one_node / f"model.ckpt-{STEPS}"),
                        checkpoint_values(two_node_run[0] / f"model.ckpt-{STEPS}"))


def test_launch_with_mpirun_across_nodes(cluster, data, two_node_run):
    output_dir = cluster.shared / "mpirun"
    proc = on_node_a(cluster, [*launch_args(cluster, "mpirun"), *training_flags(data, output_dir)],
                     timeout=600)
    assert "mpirun -np 4 -H nodeA:2,nodeB:2" in proc.stdout
    assert_same_weights(checkpoint_values(two_node_run[0] / f"model.ckpt-{STEPS}"),
                        checkpoint_values(output_dir / f"model.ckpt-{STEPS}"))


def test_output_dir_that_other_nodes_do_not_see_fails_at_start(cluster, data):
    output_dir = cluster.private / "run"  # nodeB has its own tmpfs here
    proc = on_node_a(cluster, [*horovodrun_args(cluster), PYTHON, REPO / "run_pretraining.py",
                               *training_flags(data, output_dir)], timeout=300, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert f"--output_dir={output_dir} is not shared storage" in output, output
    assert "rank 2 on nodeB" in output and "rank 3 on nodeB" in output, output
    assert "rank 1 on nodeA" not in output, output
    assert not list(output_dir.glob("model.ckpt-*")), "trained although the check failed"


# ------------------------------------------------------------------ node loss


def _run_until_checkpoint(cluster, command, output_dir, timeout=400):
    """Starts `command` on nodeA; returns the process once a checkpoint exists."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **cluster_env(cluster)}
    proc = subprocess.Popen([str(a) for a in cluster.command("nodeA", command, cwd=REPO)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    while not list(output_dir.glob("model.ckpt-*.index")):
        if proc.poll() is not None:
            raise AssertionError(f"ended before its first checkpoint:\n{proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no checkpoint within {timeout} s")
        time.sleep(0.05)
    return proc


def test_losing_a_node_ends_the_job_and_the_rerun_resumes_exactly(cluster, data, two_node_run):
    output_dir = cluster.shared / "node_loss"
    command = [*launch_args(cluster, "horovodrun"), *training_flags(data, output_dir)]
    victim = _run_until_checkpoint(cluster, command, output_dir)
    try:
        assert cluster.kill_node("nodeB") > 0
        try:
            output, _ = victim.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("nodeA's ranks were still running 180 s after nodeB was lost")
    finally:
        if victim.poll() is None:
            cluster.kill_node("nodeA")
            cluster.restart_node("nodeA")
        cluster.restart_node("nodeB")
    assert victim.returncode != 0, output
    # A nodeA rank whose collective fails says in one line where it ran, what happened, the
    # checkpoint kept and how to go on (not only horovodrun's "Process 2 exit with status code
    # 255"). horovodrun SIGKILLs the others 5 s after the first failure, so a rank still waiting
    # on a live peer (rank 0, the coordinator, on rank 1) may not get to say it.
    lost = [line for line in output.splitlines() if ": lost a peer rank at step " in line]
    assert lost, output
    for line in lost:
        assert re.search(r"rank [01] on nodeA: lost a peer rank at step \d+ ", line), line
        assert re.search(r"The last checkpoint, \S+/model.ckpt-\d+, is kept: rerun the same "
                         "command to resume from it", line), line
    saved = sorted(output_dir.glob("model.ckpt-*.index"))
    assert f"model.ckpt-{STEPS}.index" not in [p.name for p in saved], "finished before the kill"

    proc = on_node_a(cluster, command, timeout=600)
    assert "resumed from" in proc.stdout, proc.stdout
    assert_same_weights(checkpoint_values(two_node_run[0] / f"model.ckpt-{STEPS}"),
                        checkpoint_values(output_dir / f"model.ckpt-{STEPS}"))


# ------------------------------------------------------------------ doctor --hosts


def doctor_args(cluster, data, output_dir, hosts=HOSTS) -> list:
    return [PYTHON, "-m", "bert_tf", "doctor", f"--hosts={hosts}",
            f"--network_interface={INTERFACE}", f"--ssh_identity_file={cluster.key}",
            f"--output_dir={output_dir}", "--do_train",
            f"--bert_config_file={data / 'bert_config.json'}",
            f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDICTIONS}"]


def test_doctor_preflights_the_cluster_and_reports_the_rank_mapping(cluster, data):
    proc = on_node_a(cluster, doctor_args(cluster, data, cluster.shared / "doctor"))
    lines = proc.stdout.splitlines()
    mapping = [line for line in lines if line.startswith("rank ")]
    assert mapping == [f"rank {r}: {p['host']} local_rank {p['local_rank']} (GPU "
                       f"{p['local_rank']}) of 2, cross_rank {p['cross_rank']}"
                       for r, p in enumerate(map(expected_placement, range(4)))]
    for expected in ("OK   ssh nodeA: reachable (hostname nodeA", "OK   ssh nodeB: reachable "
                     "(hostname nodeB", "OK   same software on every node: python ",
                     f"OK   network interface: {INTERFACE} on every node (nodeA 10.213.77.1, "
                     "nodeB 10.213.77.2)", "OK   shared --output_dir: "):
        assert any(line.startswith(expected) for line in lines), (expected, proc.stdout)


def test_doctor_names_the_unreachable_node_and_the_unshared_directory(cluster, data):
    # 10.213.77.9: an address of our own subnet where no node answers.
    proc = on_node_a(cluster, doctor_args(cluster, data, cluster.private / "doctor",
                                          hosts="nodeA:2,nodeB:2,10.213.77.9:2"), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("FAIL ssh 10.213.77.9: ") for line in lines), proc.stdout
    assert any(line.startswith("FAIL shared --output_dir: nodeB cannot see") for line in lines), \
        proc.stdout


# ------------------------------------------------------------------ elastic

ELASTIC_STEPS = 24
ELASTIC_GLOBAL_BATCH = 16  # 1 rank x 4 micro-batches x 4 sequences, or 2 ranks x 2 x 4


class DiscoveredHosts:
    """The host discovery script horovodrun polls (every second): it prints `listing`, which
    the test rewrites, and counts its calls."""

    def __init__(self, directory: Path):
        self.listing, self.calls = directory / "hosts", directory / "discovery_calls"
        self.script = directory / "discover_hosts.sh"
        self.script.write_text(f"#!/bin/sh\necho >> {self.calls}\ncat {self.listing}\n")
        self.script.chmod(0o755)

    def set(self, *hosts: str) -> None:
        tmp = self.listing.with_suffix(".tmp")
        tmp.write_text("".join(f"{h}\n" for h in hosts))
        tmp.replace(self.listing)  # the script never reads half a listing

    def calls_made(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0


def logged_metrics(output_dir: Path) -> list[dict]:
    """metrics.jsonl's complete lines (rank 0 may be writing the last one)."""
    path = output_dir / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("\n")]


def wait_until(condition, what: str, proc, timeout: float, log: Path):
    """Polls `condition` every 0.2 s until it holds, `proc` ended or `timeout` passed."""
    for _ in range(int(timeout / 0.2)):
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"training ended (status {proc.returncode}) before {what}:\n"
                        f"{log.read_text()[-5000:]}")
        time.sleep(0.2)
    pytest.fail(f"not within {timeout} s: {what}\n{log.read_text()[-5000:]}")


def elastic_training_flags(data, output_dir, num_ranks=None) -> list:
    """training_flags with a checkpoint every update (each kept) and a metrics line each;
    with `num_ranks`, the same run without --elastic at that many ranks."""
    replaced = ("--num_train_steps=", "--log_every_n_steps=", "--save_checkpoints_steps=",
                "--peer_timeout_seconds=")
    flags = [f for f in training_flags(data, output_dir) if not f.startswith(replaced)]
    # No lost peer to detect here; a busy machine can take over a minute for an update.
    flags += [f"--num_train_steps={ELASTIC_STEPS}", "--log_every_n_steps=1",
              "--save_checkpoints_steps=1", f"--keep_checkpoint_max={ELASTIC_STEPS}",
              "--peer_timeout_seconds=600"]
    if num_ranks is None:
        return flags + [f"--global_batch_size={ELASTIC_GLOBAL_BATCH}",
                        "--elastic_commit_every_n_steps=2"]
    batch = tiny.TRAINING["train_batch_size"]
    return flags + [f"--num_accumulation_steps={ELASTIC_GLOBAL_BATCH // (batch * num_ranks)}"]


def elastic_launch_args(cluster, data, hosts: DiscoveredHosts, output_dir) -> list:
    """launch/launch.py in elastic mode, as docs/running.md shows it."""
    return [PYTHON, REPO / "launch" / "launch.py", "--launcher=horovodrun",
            f"--host_discovery_script={hosts.script}", "--min_np=1", "--start_np=2",
            "--max_np=2", f"--network_interface={INTERFACE}",
            f"--ssh_identity_file={cluster.key}", f"--python={PYTHON}",
            *elastic_training_flags(data, output_dir)]


def _run_elastic_through_host_changes(cluster, command, hosts, output_dir, log):
    """Starts with nodeA:1 + nodeB:1, removes nodeB after 2 updates at 2 ranks, adds it back
    after an update at 1 rank; returns the finished process. The ranks look for host changes
    only after an update. nodeA is listed alone for the first discovery so that rank 0 lands
    there: Horovod orders the hosts it finds at once arbitrarily. (Starting at 1 rank is not
    possible here: horovodrun's elastic driver, given --network-interfaces and only the local
    host, looks for an interface holding 127.0.0.1 and fails.)"""
    env = {**os.environ, **cluster_env(cluster)}
    hosts.set("nodeA:1")
    with open(log, "w") as out:
        proc = subprocess.Popen([str(a) for a in cluster.command("nodeA", command, cwd=REPO)],
                                env=env, stdout=out, stderr=subprocess.STDOUT)

    def updates_at(ranks):
        return sum(r["num_ranks"] == ranks for r in logged_metrics(output_dir))

    try:
        wait_until(lambda: hosts.calls_made() > 0, "the first host discovery", proc, 120, log)
        hosts.set("nodeA:1", "nodeB:1")
        wait_until(lambda: updates_at(2) >= 2, "2 updates at 2 ranks", proc, 300, log)
        hosts.set("nodeA:1")
        wait_until(lambda: updates_at(1) >= 1, "an update at 1 rank", proc, 180, log)
        hosts.set("nodeA:1", "nodeB:1")
        proc.wait(timeout=300)
    except BaseException:
        proc.kill()
        for node in ("nodeA", "nodeB"):  # horovodrun's ranks and ssh sessions
            cluster.kill_node(node)
            cluster.restart_node(node)
        raise
    return proc


def _same_update_as_a_run_at(cluster, data, output_dir, step, num_ranks, reference):
    """Resumes checkpoint step-1 of the elastic run without --elastic at `num_ranks` ranks
    (a fresh trace at that size) and checks that its update `step` has the elastic run's
    gradient norm and weights."""
    reference.mkdir()
    for path in output_dir.glob(f"model.ckpt-{step - 1}.*"):
        shutil.copy(path, reference / path.name)
    (reference / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step - 1}"\n'
                                          f'all_model_checkpoint_paths: "model.ckpt-{step - 1}"\n')
    run = [PYTHON, REPO / "run_pretraining.py",
           *elastic_training_flags(data, reference, num_ranks)]
    if num_ranks > 1:
        run = [VENV_BIN / "horovodrun", "-np", str(num_ranks), "-H", f"localhost:{num_ranks}",
               "--gloo", *run]
    on_node_a(cluster, run, timeout=600)
    norms = [{r["step"]: r["grad_norm"] for r in logged_metrics(d)} for d in (output_dir, reference)]
    assert norms[1][step] == pytest.approx(norms[0][step], rel=1e-4), (step, num_ranks)
    assert_same_weights(checkpoint_values(reference / f"model.ckpt-{step}"),
                        checkpoint_values(output_dir / f"model.ckpt-{step}"))


def test_elastic_training_goes_on_when_a_node_leaves_and_comes_back(cluster, data, tmp_path):
    """2 -> 1 -> 2 ranks; each first update at a new size is the one a run started at that size
    takes (gradient norm and weights: the loss alone hid a stale divisor and a missing
    allreduce, which LAMB's and clipping's scale invariance absorb)."""
    output_dir = cluster.shared / "elastic"
    hosts = DiscoveredHosts(tmp_path)
    log = tmp_path / "elastic.log"
    proc = _run_elastic_through_host_changes(
        cluster, elastic_launch_args(cluster, data, hosts, output_dir), hosts, output_dir, log)
    output = log.read_text()
    assert proc.returncode == 0, output[-5000:]
    assert "elastic: world size 2 -> 1 ranks" in output and "accumulation 2 -> 4" in output, \
        output[-5000:]
    assert "elastic: world size 1 -> 2 ranks" in output and "accumulation 4 -> 2" in output, \
        output[-5000:]
    records = logged_metrics(output_dir)
    assert [r["step"] for r in records] == list(range(1, ELASTIC_STEPS + 1))
    ranks = [r["num_ranks"] for r in records]
    assert [n for i, n in enumerate(ranks) if i == 0 or n != ranks[i - 1]] == [2, 1, 2], ranks
    changes = [(after["step"], after["num_ranks"])
               for before, after in zip(records[:-1], records[1:], strict=True)
               if after["num_ranks"] != before["num_ranks"]]
    for step, num_ranks in changes:
        _same_update_as_a_run_at(cluster, data, output_dir, step, num_ranks,
                                 tmp_path / f"reference_{num_ranks}")
    summary = json.loads((output_dir / "train_summary.json").read_text())
    assert summary["global_step"] == ELASTIC_STEPS
