"""GPU code paths that a CPU can check (issue 24): fp16 gradient magnitudes under gradient
accumulation, --fp16_allreduce of unscaled gradients (real Horovod, 2 ranks), one GPU per process
chosen before any op in every entry point, data-creation workers without GPUs, --deterministic,
and an update's micro-batches made ahead of it. docs/running.md, "GPU checklist", lists the rest.
"""

import collections
import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tiny
from conftest import PYTHON, REPO, run_command
from tiny import ONE_THREAD, VENV_BIN

from bert_tf.data import input_pipeline, shard_jobs
from bert_tf.model.config import BertConfig
from bert_tf.train import distributed
from bert_tf.train.loop import PretrainingState

MICRO_BATCHES = 16


def accumulated_gradients(precision, batches, loss_scale):
    """The local gradient sums (as accumulated, scaled) of one update over `batches`."""
    tf.random.set_seed(7)
    config = tiny.training_config(bert_config_file="unused", input_files="unused",
                                  output_dir="unused", precision=precision, train_batch_size=2,
                                  num_accumulation_steps=len(batches))
    state = PretrainingState(BertConfig(**tiny.TINY_BERT), config)
    state.loss_scale.scale.assign(loss_scale)
    state.update(batches)
    return np.concatenate([a.numpy().ravel() for a in state.accumulators])


def test_fp16_gradients_do_not_shrink_with_accumulation():
    # Each micro-batch used to be divided by the whole update's totals, making its fp16 backward
    # pass K times smaller; at loss scale 1 (a scale that has fallen, or equally K x 2^15 more
    # micro-batches) 0.39% of the fp32-non-zero gradient elements came out zero at K=16, now
    # 0.011% (those of a mean loss, as in NVIDIA's TF2 BERT).
    distributed.init()
    rng = np.random.default_rng(0)
    batches = [tiny.random_batch(rng, 2) for _ in range(MICRO_BATCHES)]
    fp32 = accumulated_gradients("fp32", batches, 1.0)
    fp16 = accumulated_gradients("fp16", batches, 1.0)
    nonzero = fp32 != 0
    flushed = np.mean(fp16[nonzero] == 0)
    assert flushed < 1e-3, f"{flushed:.2%} of the fp16 gradient elements flushed to zero"
    # The accumulated sums are those of K mean losses: K times the update's gradient.
    assert np.abs(fp32).max() > 1.0


def test_fp16_allreduce_compresses_unscaled_gradients():
    # A loss scale of 2^24 times gradients of order 1e-2 is far past float16's 65504: compressed
    # before unscaling, every such update was skipped.
    proc = run_command([VENV_BIN / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo",
                        PYTHON, REPO / "tests" / "gpu_paths_worker.py"],
                       env={**ONE_THREAD, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}"}, timeout=300)
    assert proc.stdout.count("finite=True") == 2, proc.stdout


ENTRY_POINTS = {
    "predict": ["-m", "bert_tf.tools.predict", "--bert_config_file=/missing/c.json",
                "--init_checkpoint=/missing/ckpt", "--vocab_file=/missing/vocab.txt",
                "--text=a [MASK]"],
    "analyze_attention": ["-m", "bert_tf.analysis.analyze_attention",
                          "--bert_config_file=/missing/c.json", "--init_checkpoint=/missing/ckpt",
                          "--vocab_file=/missing/vocab.txt", "--output_dir={out}"],
    "convert": ["-m", "bert_tf.tools.convert", "tf_to_hf", "--checkpoint=/missing/ckpt",
                "--output_dir={out}"],
    "run_pretraining": [str(REPO / "run_pretraining.py"), "--bert_config_file=/missing/c.json",
                        "--input_files=/missing/*.tfrecord", "--output_dir={out}", "--do_train",
                        "--deterministic"],
    "run_finetuning": [str(REPO / "run_finetuning.py"), "--task_name=pos",
                       "--data_dir=/missing", "--bert_config_file=/missing/c.json",
                       "--vocab_file=/missing/vocab.txt", "--output_dir={out}", "--do_train"],
    "probe_syntax": ["-m", "bert_tf.analysis.probe_syntax", "--bert_config_file=/missing/c.json",
                     "--init_checkpoint=/missing/ckpt", "--vocab_file=/missing/vocab.txt",
                     "--train_conllu=/missing/train.conllu", "--output_dir={out}"],
    # Data creation computes on the CPU: the process that makes records itself (one worker,
    # or one input file) hides the GPUs, as its workers do.
    "create_pretraining_data": [str(REPO / "create_pretraining_data.py"),
                                "--input_file=/missing/*.txt", "--output_file={out}/x.tfrecord",
                                "--vocab_file=/missing/vocab.txt", "--num_workers=1"],
    "prepare_dataset": ["-m", "bert_tf.data.dataset", "--input_files=/missing/*.xml",
                        "--output_dir={out}", "--vocab_file=/missing/vocab.txt",
                        "--num_workers=1"],
}
HIDES_GPUS = {"create_pretraining_data", "prepare_dataset"}

# Runs an entry point (a module or a script) with bert_tf.model.devices.use_one_gpu (and
# bert_tf.data.workers.hide_gpus) wrapped to record, per call, whether TensorFlow's runtime had
# started, whether op determinism was on after it (whether CUDA and TensorFlow see no GPU).
SPY = textwrap.dedent("""
    import runpy, sys
    import bert_tf
    bert_tf.use_onednn_by_default()
    from tensorflow.python.framework import config
    from bert_tf.model import devices
    real = devices.use_one_gpu
    def recorded(*args, **kwargs):
        started = devices.runtime_initialized()
        real(*args, **kwargs)
        print("use_one_gpu after_first_op=%s deterministic=%s" % (
            started, config.is_op_determinism_enabled()), flush=True)
    devices.use_one_gpu = recorded
    from bert_tf.data import workers
    real_hide = workers.hide_gpus
    def recorded_hide():
        started = devices.runtime_initialized()
        real_hide()
        import os, tensorflow as tf
        print("hide_gpus after_first_op=%s hidden=%s" % (started, os.environ[
            "CUDA_VISIBLE_DEVICES"] == "" and not tf.config.get_visible_devices("GPU")),
            flush=True)
    workers.hide_gpus = recorded_hide
    sys.argv = sys.argv[1:]
    try:
        if sys.argv[0] == "-m":
            sys.argv = sys.argv[1:]
            runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit:
        pass
""")


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_entry_point_chooses_its_gpu_before_any_op(name, tmp_path):
    # Bad input (missing files): each still sets its devices first, then fails as it should.
    args = [a.format(out=tmp_path / "out") for a in ENTRY_POINTS[name]]
    proc = run_command([PYTHON, "-c", SPY, *args], env=ONE_THREAD, check=False, timeout=300)
    calls = [line for line in proc.stdout.splitlines()
             if line.startswith(("use_one_gpu", "hide_gpus"))]
    deterministic = "--deterministic" in args
    expected = ("hide_gpus after_first_op=False hidden=True" if name in HIDES_GPUS else
                f"use_one_gpu after_first_op=False deterministic={deterministic}")
    assert calls == [expected], proc.stdout + proc.stderr[-3000:]


def _gpu_visibility_of_worker(job):
    """A data job run in a worker: whether CUDA and TensorFlow see no GPU there."""
    hidden = (os.environ.get("CUDA_VISIBLE_DEVICES") == ""
              and not tf.config.get_visible_devices("GPU"))
    return collections.Counter(input_bytes=os.path.getsize(job[1]), gpus_hidden=int(hidden))


def test_data_creation_workers_hide_the_gpus(tmp_path):
    shard = tmp_path / "shard.txt"
    shard.write_text("text\n")
    jobs = [(i, str(shard)) for i in range(2)]
    stats = shard_jobs.run_jobs(jobs, num_workers=2, progress=False, num_inputs=2,
                                run=_gpu_visibility_of_worker)
    assert stats["gpus_hidden"] == 2, stats
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != ""  # this process is left as it was


def _final_prefetch(dataset):
    """The buffer size of the dataset's last transformation, a prefetch."""
    assert type(dataset).__name__.endswith("PrefetchDataset"), type(dataset)
    return int(dataset._buffer_size)


def test_an_updates_micro_batches_are_made_ahead_of_it(tmp_path):
    # While update n computes, the pipeline makes all of update n+1's micro-batches, so that
    # taking them (before its first forward pass, for the totals) does not wait.
    path = str(tmp_path / "none.tfrecord")
    with tf.io.TFRecordWriter(path):
        pass
    ahead = input_pipeline.pretraining_dataset(path, 4, 64, 10, batches_per_update=16)
    assert _final_prefetch(ahead) == 16
    assert _final_prefetch(input_pipeline.pretraining_dataset(path, 4, 64, 10)) == -1  # AUTOTUNE


def test_more_ranks_on_a_node_than_gpus_are_refused():
    # A fifth rank on a 4-GPU node used to share GPU 0 with the first (gpus[index % 4]).
    from bert_tf.model import devices

    gpus = ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert devices.gpu_of_local_rank(gpus, 3) == "gpu3"
    with pytest.raises(devices.DeviceError, match="local rank 4 but its node has 4 visible "
                       r"GPU\(s\): start at most 4 rank\(s\) per node"):
        devices.gpu_of_local_rank(gpus, 4)


def test_gpu_cpus_are_read_from_the_gpus_pci_device(tmp_path):
    # NVML's order is PCI address order; sysfs names each GPU's local CPUs, the driver's
    # /proc files each GPU's UUID and device minor.
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    for address, cpus, minor in (("0000:b1:00.0", "20-39,60-79", 1),
                                 ("0000:3b:00.0", "0-19,40-59", 0)):
        (sysfs / address).mkdir(parents=True)
        (sysfs / address / "local_cpulist").write_text(cpus + "\n")
        (proc / address).mkdir(parents=True)
        (proc / address / "information").write_text(
            f"Model: \t\t NVIDIA A100-SXM4-40GB\nGPU UUID: \t GPU-{minor}aaa\n"
            f"Device Minor: \t {minor}\n")
    (sysfs / "module").mkdir()  # other entries of the driver's directory
    from bert_tf.model import devices

    near = {0: set(range(0, 20)) | set(range(40, 60)), 1: set(range(20, 40)) | set(range(60, 80))}

    def cpus(index, **environ):
        return devices.gpu_cpus(index, str(sysfs), str(proc), environ)

    assert cpus(0) == near[0] and cpus(1) == near[1]
    assert devices.gpu_cpus(0, str(tmp_path / "absent"), str(proc), {}) is None
    # CUDA_VISIBLE_DEVICES (Slurm always sets it) used to skip the binding altogether.
    assert cpus(0, CUDA_VISIBLE_DEVICES="1") == near[1]
    assert cpus(1, CUDA_VISIBLE_DEVICES="1,0") == near[0]
    assert cpus(0, CUDA_VISIBLE_DEVICES="GPU-1aaa") == near[1]
    # Slurm confining devices numbers them from 0; its step's GPUs are the absolute ones.
    assert cpus(0, CUDA_VISIBLE_DEVICES="0", SLURM_STEP_GPUS="1") == near[1]
    assert cpus(0, CUDA_VISIBLE_DEVICES="MIG-3f2a") is None
    assert cpus(1, CUDA_VISIBLE_DEVICES="0") is None
