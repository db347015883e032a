"""The job in NVIDIA's NGC TensorFlow container, the way users run it (issue 25): our Dockerfile
built on a CPU stand-in for the NGC image (install/build_ngc_standin.sh; no registry serves
NVIDIA's here), then run with podman for docker: the doctor, TFRecords made from text mounted at
/data, pretraining through launch/launch.py --launcher=docker (horovodrun -np 2 inside) into a
mounted /results, stopped by a SIGTERM to the launcher and resumed to the weights of an
uninterrupted run, and fine-tuning the result. The container runs as a non-root user, so the
files it writes to the mounts must be that user's.

`make test-container` (root, podman; not part of `make test`): the first run builds the
stand-in (minutes), later ones load it from ~/.cache/bert_tf."""

import os
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tiny
from conftest import PYTHON, REPO, run_command
from test_finetuning import command as finetuning_command
from test_finetuning import finetuning_config, write_conllu
from test_preemption import _metrics_logged, _signal_mid_run, _stopped_step
from test_training import pretraining_command
from tiny import ONE_THREAD, checkpoint_values

ENGINE = os.environ.get("BERT_TF_CONTAINER_ENGINE", "podman")
UID = GID = 1000  # a user, not root: files on the mounts must be theirs
IMAGE = "localhost/bert_tf:container-test"
BUILD_TIMEOUT = 3600  # a stand-in built from nothing: debootstrap, downloads, maybe Horovod


@pytest.fixture(scope="module")
def image():
    """Our Dockerfile built FROM the stand-in (whose script installs podman if missing),
    without the NCCL check a CPU base cannot pass."""
    standin = run_command(["bash", REPO / "install" / "build_ngc_standin.sh"],
                          timeout=BUILD_TIMEOUT).stdout.split()[-1]
    # Host networking: pip inside the build reaches PyPI the way this host does.
    run_command([ENGINE, "build", "--network=host", "--build-arg", f"BASE_IMAGE={standin}",
                 "--build-arg", "REQUIRE_NCCL=0", "-t", IMAGE, REPO], timeout=BUILD_TIMEOUT)
    return IMAGE


@pytest.fixture(scope="module")
def mounts(tmp_path_factory, shared_data):
    """/data: a slice of Emma, the vocab, the tiny bert_config and POS-tagged sentences;
    /results empty. Both the container user's, as a user's own directories would be."""
    root = tmp_path_factory.mktemp("container")
    data, results, pos = root / "data", root / "results", root / "data" / "pos"
    pos.mkdir(parents=True)
    results.mkdir()
    (data / "train.txt").write_text(tiny.emma(shared_data)[:100_000])
    shutil.copy(tiny.vocab_file(shared_data), data / "vocab.txt")
    tiny.write_bert_config(data / "bert_config.json")
    blocks = (shared_data / "ud" / "en_ewt-ud-test.conllu").read_text().strip().split("\n\n")
    write_conllu(pos / "train.conllu", blocks[:96])
    write_conllu(pos / "dev.conllu", blocks[-40:])
    for path in (data, results, pos):
        os.chown(path, UID, GID)
    return SimpleNamespace(data=data, results=results)


def container(image, mounts, *command):
    """`command` in the image as the user, /data and /results mounted, one thread per op."""
    env = [a for name, value in ONE_THREAD.items() for a in ("-e", f"{name}={value}")]
    return [ENGINE, "run", "--rm", "-u", f"{UID}:{GID}", *env,
            "-v", f"{mounts.data}:/data", "-v", f"{mounts.results}:/results", image, *command]


def pretraining_launch(image, mounts, output_dir):
    """launch.py --launcher=docker of a 12-step tiny run on 2 ranks (test_preemption's settings)."""
    flags = pretraining_command(
        SimpleNamespace(config="/data/bert_config.json", train="/data/train.tfrecord"),
        f"/results/{output_dir}", num_train_steps=12, save_checkpoints_steps=100,
        log_every_n_steps=1)[2:]
    return [PYTHON, REPO / "launch" / "launch.py", "--launcher=docker",
            f"--container_engine={ENGINE}", "--nocontainer_gpus", f"--container_user={UID}:{GID}",
            f"--image={image}", "--num_gpus=2", "--controller=gloo",
            # No --ulimit (NGC raises pinned memory and stack): this host forbids raising
            # limits; the engine applies install/podman-containers.conf instead.
            "--container_ulimits=",
            "--forward_env=" + ",".join(ONE_THREAD), f"--data_dir={mounts.data}",
            f"--results_dir={mounts.results}", *flags]


def assert_owned_by_the_user(directory: Path):
    foreign = [p for p in [directory, *directory.rglob("*")]
               if (p.stat().st_uid, p.stat().st_gid) != (UID, GID)]
    assert not foreign, f"not owned by {UID}:{GID}: {foreign[:5]}"


def test_doctor_is_the_image_command(image):
    proc = run_command([ENGINE, "run", "--rm", "-u", f"{UID}:{GID}", image], check=False)
    output = proc.stdout + proc.stderr
    assert "tokenizer: Hugging Face tokenizers" in output, output
    assert "Horovod 0.28.1: TensorFlow yes, Gloo yes, MPI yes" in output, output
    assert "doctor: 0 FAIL" in output and proc.returncode == 0, output


@pytest.fixture(scope="module")
def records(image, mounts):
    run_command(container(image, mounts, "python", "create_pretraining_data.py",
                          "--input_file=/data/train.txt", "--output_file=/data/train.tfrecord",
                          "--vocab_file=/data/vocab.txt", f"--max_seq_length={tiny.SEQ}",
                          f"--max_predictions_per_seq={tiny.PREDICTIONS}", "--dupe_factor=2",
                          "--noprogress"))
    return mounts.data / "train.tfrecord"


@pytest.fixture(scope="module")
def reference(image, mounts, records):
    """An uninterrupted run's checkpoint (prefix inside the container) and weights."""
    run_command(pretraining_launch(image, mounts, "reference"), timeout=900)
    weights = checkpoint_values(mounts.results / "reference" / "model.ckpt-12")
    return SimpleNamespace(checkpoint="/results/reference/model.ckpt-12", weights=weights)


def test_stopped_and_resumed_pretraining_ends_as_an_uninterrupted_one(image, mounts, records,
                                                                      reference):
    stopped = mounts.results / "stopped"
    command = pretraining_launch(image, mounts, "stopped")
    returncode, output = _signal_mid_run(command, _metrics_logged(stopped),
                                         lambda launcher: launcher.send_signal(signal.SIGTERM))
    step = _stopped_step(stopped, returncode, output)
    assert f"stopped at step {step} by SIGTERM" in output, output
    proc = run_command(command, timeout=900)
    assert f"resumed from /results/stopped/model.ckpt-{step}" in proc.stdout + proc.stderr
    resumed = checkpoint_values(stopped / "model.ckpt-12")
    for name, value in reference.weights.items():
        np.testing.assert_allclose(resumed[name], value, atol=1e-5, rtol=1e-5, err_msg=name)
    assert_owned_by_the_user(mounts.results)
    assert_owned_by_the_user(records)


def test_finetuning_the_pretrained_model(image, mounts, reference):
    config = finetuning_config("/data/pos", "/results/pos", "/data/bert_config.json",
                               "/data/vocab.txt", init_checkpoint=reference.checkpoint,
                               do_train=True, do_eval=True, num_train_epochs=1.0)
    proc = run_command(container(image, mounts, "python", "run_finetuning.py",
                                 *finetuning_command(config)[2:]), timeout=900)
    results = mounts.results / "pos"
    assert (results / "eval_results.json").exists(), proc.stdout + proc.stderr
    assert_owned_by_the_user(results)
