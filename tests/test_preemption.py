"""A running job loses a process (issue 19): SIGTERM to one of 2 Horovod ranks or to the
launcher, SIGKILL of a rank; and a 2-rank run resumed on 1 rank. Real processes and signals;
the tiny model and data of test_training.py. Every 2-rank run here ends with the weights of
one uninterrupted 2-rank run (`reference`, made once for the module), dropout included, and
the resized resume starts from that run's checkpoint.

In a file of their own so that pytest-xdist (`--dist loadfile`) can run these multi-process
tests beside test_faults.py's in-process ones (tests/README.md, "Speed")."""

import json
import os
import shutil
import signal
import subprocess
import time
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import test_training
from conftest import PYTHON, REPO, run_command
from test_training import _config, dropout_config, horovodrun, mpirun, pretraining_command
from tiny import ONE_THREAD, VENV_BIN, checkpoint_values

from bert_tf.model import checkpoints
from bert_tf.train import loop, resume
from bert_tf.train.state import INPUT_POSITION

data = test_training.data  # the tiny records and bert_config (a session fixture)
LONG = 900  # seconds a multi-process run may take on a busy shared machine
STEPS = 16  # room for three interruptions, a few updates apart


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """One uninterrupted 2-rank run (mpirun) of STEPS updates, dropout 0.1, one input file
    for both ranks (by-record sharding): the weights every interrupted run must end with.
    Returns its flags (with the dropout config, so that a resume must also redraw the same
    dropout masks), its output directory (read-only: copy it to resume) and the values of
    its model.ckpt-STEPS."""
    root = tmp_path_factory.mktemp("reference")
    flags = dict(num_train_steps=STEPS, bert_config_file=dropout_config(root))
    proc = run_command(mpirun(pretraining_command(data, root / "out", save_checkpoints_steps=4,
                                                  log_every_n_steps=2, **flags)),
                       env=ONE_THREAD, timeout=LONG)
    assert "sharding by record" in proc.stdout
    return SimpleNamespace(flags=flags, output_dir=root / "out",
                           values=checkpoint_values(root / "out" / f"model.ckpt-{STEPS}"))


def _assert_same_weights(prefix, reference_values):
    resumed = checkpoint_values(prefix)
    assert resumed.keys() == reference_values.keys()
    for name, value in reference_values.items():
        np.testing.assert_allclose(resumed[name], value, atol=1e-5, rtol=1e-5, err_msg=name)


def _rank_processes(launcher: psutil.Process) -> dict:
    ranks = {}
    for proc in launcher.children(recursive=True):
        try:
            if "run_pretraining.py" in " ".join(proc.cmdline()):
                ranks[proc.environ().get("HOROVOD_RANK")] = proc
        except psutil.NoSuchProcess:
            continue
    return ranks


def _metrics_logged(output_dir, lines=2):
    metrics = output_dir / "metrics.jsonl"
    return lambda: metrics.exists() and metrics.read_text().count("\n") >= lines


def _signal_mid_run(command, ready, send) -> tuple[int, str]:
    """Starts `command`, calls send(launcher process) once ready() is true, and returns its
    exit status and output; fails if it is not ready within LONG s or runs on 120 s after."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **ONE_THREAD,
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen([str(a) for a in command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + LONG
        while not ready():
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, f"not ready within {LONG} s"
            time.sleep(0.05)
        send(psutil.Process(proc.pid))
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the job was still running 120 s after the signal")
    finally:
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
    return proc.returncode, output


def _stopped_step(output_dir, returncode, output, steps=STEPS) -> int:
    """The step of the checkpoint a run of `steps` updates saved when stopped; checks it
    stopped cleanly, early."""
    assert returncode == 0, output
    stopped_at = checkpoints.latest_checkpoint(output_dir)
    assert stopped_at is not None and not stopped_at.endswith(f"-{steps}"), output
    assert json.loads((output_dir / "train_summary.json").read_text())["stopped_by"], output
    return int(stopped_at.rsplit("-", 1)[1])


def _resumed_from(output, checkpoint):
    assert f"resumed from {checkpoint}" in output, output


def test_stopped_and_killed_runs_resume_to_the_reference_weights(data, reference, tmp_path):
    """One job interrupted three ways, each rerun of the same flags resuming where the last
    stopped, and ending with the reference's weights and optimizer state (dropout masks
    included), so every resume was exact:

    1. SIGTERM to launch.py (what a scheduler signals; horovodrun itself would kill its
       workers 5 s after a SIGTERM and exit 1): it passes it on, the run saves, all exit 0;
    2. SIGTERM to rank 1 only, between checkpoints: every rank stops after the same update,
       rank 0 saves, the job exits 0;
    3. SIGKILL of rank 1 after a checkpoint: the job ends with an error in bounded time;
    4. the rerun finishes.

    (Three tests before, each with runs of its own: one job now gives all three interruptions
    and one comparison with the reference.)"""
    flags, reference_values = reference.flags, reference.values
    victim_dir = tmp_path / "victim"
    training = pretraining_command(data, victim_dir, save_checkpoints_steps=4,
                                   log_every_n_steps=1, **flags)
    command = horovodrun(training)

    # 1. The launcher signalled.
    launcher = [PYTHON, REPO / "launch" / "launch.py", "--launcher=horovodrun", "--num_gpus=2",
                "--controller=gloo", f"--python={PYTHON}", *training[2:]]
    returncode, output = _signal_mid_run(launcher, _metrics_logged(victim_dir),
                                         lambda launcher: launcher.send_signal(signal.SIGTERM))
    first = _stopped_step(victim_dir, returncode, output)
    assert f"stopped at step {first} by SIGTERM" in output, output

    # 2. One rank signalled.
    returncode, output = _signal_mid_run(
        command, _metrics_logged(victim_dir, first + 2),
        lambda launcher: _rank_processes(launcher)["1"].send_signal(signal.SIGTERM))
    _resumed_from(output, victim_dir / f"model.ckpt-{first}")
    second = _stopped_step(victim_dir, returncode, output)
    assert second > first
    assert f"stopped at step {second} by a signal to another rank" in output, output

    # 3. One rank killed once the resumed run has saved a checkpoint of its own.
    def saved_after_second():
        latest = checkpoints.latest_checkpoint(victim_dir)
        return latest is not None and int(latest.rsplit("-", 1)[1]) > second

    returncode, output = _signal_mid_run(
        command, saved_after_second,
        lambda launcher: _rank_processes(launcher)["1"].send_signal(signal.SIGKILL))
    assert returncode != 0, output
    _resumed_from(output, victim_dir / f"model.ckpt-{second}")
    interrupted_at = checkpoints.latest_checkpoint(victim_dir)
    assert not interrupted_at.endswith(f"-{STEPS}"), "the victim finished before the kill"

    # 4. The rerun finishes where the uninterrupted run did.
    proc = run_command(command, env=ONE_THREAD, timeout=LONG)
    _resumed_from(proc.stdout, interrupted_at)
    steps = [json.loads(line)["step"]
             for line in (victim_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))  # lines logged after the last checkpoint go
    _assert_same_weights(victim_dir / f"model.ckpt-{STEPS}", reference_values)


def test_resume_keeps_the_global_batch_or_is_refused(data, reference, tmp_path, capsys):
    """The reference (2 ranks x 1 x 8, mpirun) resumed on 1 rank: x 1 x 4 is refused naming
    the original layout; x 2 x 8 continues with the input position re-derived."""
    output_dir = tmp_path / "out"
    shutil.copytree(reference.output_dir, output_dir)
    before = checkpoint_values(output_dir / f"model.ckpt-{STEPS}")
    assert list(before[resume.RUN_LAYOUT]) == [2, 8, 1]
    assert before[INPUT_POSITION] == STEPS

    flags = dict(bert_config_file=reference.flags["bert_config_file"],
                 num_train_steps=STEPS + 2)
    with pytest.raises(loop.TrainingError, match=r"2 rank\(s\) x 1 micro-batch\(es\) x 8 = 16 "
                                                 r"sequences per update; this run has 1 "):
        loop.run(_config(data, output_dir, train_batch_size=4, **flags))
    capsys.readouterr()
    loop.run(_config(data, output_dir, train_batch_size=8, num_accumulation_steps=2, **flags))
    out = capsys.readouterr().out
    assert f"input position re-derived to {2 * STEPS} micro-batches per rank" in out, out
    after = checkpoint_values(output_dir / f"model.ckpt-{STEPS + 2}")
    assert after[INPUT_POSITION] == 2 * STEPS + 2 * 2
    assert list(after[resume.RUN_LAYOUT]) == [1, 8, 2]
