"""launch.py --launcher=ray on a real local Ray cluster of two nodes (issue 47): a head at
127.0.0.3 and a worker node at 127.0.0.2 (both loopback addresses), each with one Ray CPU, so a
2-rank job has one rank on each node. A static job stopped by SIGTERM to launch.py and rerun
ends with the weights of an uninterrupted horovodrun job. An elastic job whose rank 1 is
killed goes on at one rank and finishes.

Only loopback traffic (Horovod's Gloo on `lo`, Ray's ports on 127.0.0.x); every wait is
bounded; both Ray nodes are stopped (their process groups killed) also when a test fails.
Slow (Ray and TensorFlow start in every rank): `make test-cluster` runs it.
"""

import json
import os
import signal
import socket
import subprocess
import time

import psutil
import pytest
import test_training
from conftest import PYTHON, REPO, run_command
from test_preemption import _assert_same_weights, _metrics_logged, _signal_mid_run, _stopped_step
from test_training import horovodrun, pretraining_command
from tiny import ONE_THREAD, VENV_BIN, checkpoint_values

data = test_training.data
LONG = 600
# Enough updates that a stop sent through Ray (a task on each rank's node) lands mid-run: CI ran
# 12 of them in 2.2 s, before the stop arrived.
STEPS = 40
# Not 127.0.0.1: Ray rewrites that address to the host's own outward address
# (ray/_private/services.py, resolve_ip_for_localhost), which is not loopback.
HEAD, WORKER = "127.0.0.3", "127.0.0.2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD, 0))
        return s.getsockname()[1]


def _ray_node(args, log) -> subprocess.Popen:
    """`ray start ... --block` in a session of its own (its daemons are its children)."""
    return subprocess.Popen([VENV_BIN / "ray", "start", "--block", "--num-cpus=1",
                             "--disable-usage-stats", *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **ONE_THREAD})


def _stop(node: subprocess.Popen) -> None:
    """SIGTERM (ray start --block then stops its daemons), then SIGKILL to whatever is left of
    its session."""
    if node.poll() is None:
        family = psutil.Process(node.pid).children(recursive=True)
        node.terminate()
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for proc in [*family, psutil.Process(node.pid) if node.poll() is None else None]:
            if proc is not None:
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
    try:
        os.killpg(node.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_rank_1(nodes, output_dir) -> None:
    """SIGKILL to the training process that is not rank 0 (rank 0 alone holds metrics.jsonl
    open), on whichever Ray node Horovod placed it: a rank lost as to an out-of-memory kill.
    Horovod's elastic Ray driver orders the hosts of its first discovery arbitrarily, so rank 0
    may be on either node, and rank 0's host must stay (docs/running.md, elastic "Limits")."""
    metrics = str(output_dir / "metrics.jsonl")
    ranks = []
    for node in nodes:
        for proc in psutil.Process(node.pid).children(recursive=True):
            try:  # Ray titles an actor's process ray::CLASS
                if "BaseHorovodWorker" in " ".join(proc.cmdline()):
                    ranks.append((metrics in [f.path for f in proc.open_files()], proc))
            except psutil.NoSuchProcess:
                continue
    others = [proc for holds_metrics, proc in ranks if not holds_metrics]
    assert len(ranks) == 2 and len(others) == 1, ranks
    others[0].kill()


def _wait_for_nodes(address, count, deadline_s=120) -> None:
    script = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
              "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        proc = subprocess.run([PYTHON, "-c", script, address], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode == 0 and proc.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        time.sleep(1)
    pytest.fail(f"the Ray cluster at {address} did not reach {count} nodes in {deadline_s} s")


@pytest.fixture
def ray_cluster(tmp_path):
    """A head node and a worker node; yields (address, both nodes' processes)."""
    address = f"{HEAD}:{_free_port()}"
    with open(tmp_path / "ray_head.log", "w") as head_log, \
            open(tmp_path / "ray_worker.log", "w") as worker_log:
        nodes = []
        try:
            nodes.append(_ray_node(["--head", f"--node-ip-address={HEAD}",
                                    f"--port={address.split(':')[1]}",
                                    "--include-dashboard=false"], head_log))
            _wait_for_nodes(address, 1)
            nodes.append(_ray_node([f"--address={address}", f"--node-ip-address={WORKER}"],
                                   worker_log))
            _wait_for_nodes(address, 2)
            yield address, nodes
        finally:
            for node in reversed(nodes):
                _stop(node)


def _launch(address, training, *launch_flags) -> list:
    return [PYTHON, REPO / "launch" / "launch.py", "--launcher=ray", f"--ray_address={address}",
            "--num_workers=2", "--num_gpus=1", "--network_interface=lo", *launch_flags,
            *training[2:]]


def test_stopped_ray_job_resumes_to_the_weights_of_an_uninterrupted_horovodrun(
        data, ray_cluster, tmp_path):
    """SIGTERM to launch.py mid-run: both ranks (one per Ray node) save after the same update
    and the job exits 0; the rerun resumes and ends with horovodrun's weights."""
    address, _ = ray_cluster
    reference = tmp_path / "reference"
    run_command(horovodrun(pretraining_command(data, reference, num_train_steps=STEPS,
                                               save_checkpoints_steps=4, log_every_n_steps=1)),
                env=ONE_THREAD, timeout=LONG)
    victim = tmp_path / "victim"
    training = pretraining_command(data, victim, num_train_steps=STEPS, save_checkpoints_steps=4,
                                   log_every_n_steps=1)
    command = _launch(address, training)
    returncode, output = _signal_mid_run(command, _metrics_logged(victim, 2),
                                         lambda launcher: launcher.send_signal(signal.SIGTERM))
    first = _stopped_step(victim, returncode, output, steps=STEPS)
    # _stopped_step read the stop from train_summary.json, not the log (Ray's log streaming
    # can drop an actor's last lines); rank 0 may have heard of it from rank 1 first.
    summary = json.loads((victim / "train_summary.json").read_text())
    assert summary["global_step"] == first, summary

    proc = run_command(command, env=ONE_THREAD, timeout=LONG)
    assert f"resumed from {victim / f'model.ckpt-{first}'}" in proc.stdout + proc.stderr
    summary = json.loads((victim / "train_summary.json").read_text())
    assert summary["ranks"] == 2 and summary["global_step"] == STEPS
    _assert_same_weights(victim / f"model.ckpt-{STEPS}",
                         checkpoint_values(reference / f"model.ckpt-{STEPS}"))


def test_elastic_ray_job_losing_a_node_goes_on(data, ray_cluster, tmp_path):
    """--min_np=1 --max_np=2: the job trains with a rank on each node; rank 1 is killed mid-run
    and the job finishes on rank 0 alone, keeping the global batch."""
    address, nodes = ray_cluster
    out = tmp_path / "out"
    training = pretraining_command(data, out, num_train_steps=STEPS, save_checkpoints_steps=4,
                                   log_every_n_steps=1, train_batch_size=4)
    command = _launch(address, training, "--min_np=1", "--max_np=2", "--global_batch_size=8",
                      "--elastic_commit_every_n_steps=2")

    def two_ranks_logged():
        metrics = out / "metrics.jsonl"
        return metrics.exists() and any(json.loads(line)["num_ranks"] == 2
                                        for line in metrics.read_text().splitlines())

    returncode, output = _signal_mid_run(command, two_ranks_logged,
                                         lambda launcher: _kill_rank_1(nodes, out))
    assert returncode == 0, output
    ranks = [json.loads(line)["num_ranks"] for line in (out / "metrics.jsonl").read_text()
             .splitlines()]
    # Two ranks were logged before the kill (two_ranks_logged); the reset after it rolls back
    # to the last elastic commit, and metrics.jsonl with it, so those lines may be gone.
    assert "elastic: world size 2 -> 1 ranks" in output and ranks[-1] == 1, \
        (ranks, output[-6000:])
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["global_step"] == STEPS and summary["sequences_per_update"] == 8, summary
