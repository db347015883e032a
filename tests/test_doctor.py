"""bert_tf.tools.doctor (checks in doctor_environment, doctor_training): each trap's line,
driven by the environment, the flags or the facts a check is given (an import error's text,
the GPUs found)."""

import os
import stat

import pytest
from conftest import PYTHON, run_command

from bert_tf.model.config import BertConfig
from bert_tf.tools.device_memory import device_memory
from bert_tf.tools.doctor_check import FAIL, OK, WARN
from bert_tf.tools.doctor_environment import (
    Environment,
    GpuInfo,
    check_cuda_launch_blocking,
    check_gpu_visibility,
    check_horovod_build,
    check_import,
    check_mpirun,
    check_onednn,
    check_tokenizer,
    check_xla_libdevice,
    environment_checks,
    libdevice_candidates,
)
from bert_tf.tools.doctor_training import (
    check_cpu_half_precision,
    check_deterministic_xla,
    check_max_predictions,
    check_memory,
    check_tensor_core_shapes,
    cpu_flags,
)
from bert_tf.tools.estimate import MODEL_PRESETS
from bert_tf.train.config import PretrainingConfig

LARGE = MODEL_PRESETS["large"]


def run_doctor(*flags, env=None):
    return run_command([PYTHON, "-m", "bert_tf", "doctor", *flags], env=env, check=False,
                       timeout=300)


def lines_of(proc):
    return proc.stdout.splitlines()


def test_real_environment_reports_versions_and_horovod_build():
    proc = run_doctor()
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.startswith("Python 3.")
    assert "\nTensorFlow 2." in out and "\ntensorflow-text 2." in out
    assert "GPUs visible to TensorFlow: 0: none (CPU only)" in out
    assert "Horovod 0.28.1: TensorFlow yes, Gloo yes, MPI yes, NCCL no" in out
    assert "OK   Horovod build: TensorFlow support" in out
    assert "OK   GPU visibility: no NVIDIA GPU" in out
    assert out.rstrip().endswith("doctor: 0 FAIL, 0 WARN")


@pytest.fixture
def fake_two_gpu_driver(tmp_path):
    """An nvidia-smi on PATH that reports two 80 GB GPUs, as on a GPU box whose
    TensorFlow cannot use them (our TensorFlow is the CPU build)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    # As a driver >= 510 answers --query-gpu=name,memory.total,compute_cap.
    smi.write_text("#!/bin/sh\ncase \"$*\" in *compute_cap*) cap=', 9.0';; esac\n"
                   "echo \"NVIDIA H100 80GB HBM3, 81559$cap\"\n"
                   "echo \"NVIDIA H100 80GB HBM3, 81559$cap\"\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_gpu_box_traps_and_memory_against_detected_gpu(fake_two_gpu_driver, tmp_path):
    env = dict(fake_two_gpu_driver, CUDA_LAUNCH_BLOCKING="1",
               XLA_FLAGS=f"--xla_gpu_cuda_data_dir={tmp_path}")
    proc = run_doctor("--flagfile=launch/recipes/bert_large_phase2.flags",
                      "--train_batch_size=128", env=env)
    lines = lines_of(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "GPUs seen by nvidia-smi: NVIDIA H100 80GB HBM3 (80 GiB), " \
           "NVIDIA H100 80GB HBM3 (80 GiB)" in lines
    assert any(line.startswith("FAIL GPU visibility: nvidia-smi sees 2 GPU(s) but TensorFlow "
                               "sees none | fix: this TensorFlow is a CPU build") for line in lines)
    assert any(line.startswith("FAIL CUDA_LAUNCH_BLOCKING: CUDA_LAUNCH_BLOCKING=1 serialises")
               and "unset CUDA_LAUNCH_BLOCKING" in line for line in lines)
    assert any(line.startswith("WARN Horovod build: GPUs present but Horovod was built without "
                               "NCCL") for line in lines)
    assert any(line.startswith(f"FAIL XLA libdevice: XLA_FLAGS names --xla_gpu_cuda_data_dir="
                               f"{tmp_path}, which has no nvvm/libdevice/libdevice.10.bc")
               for line in lines)
    memory = [line for line in lines if line.startswith("WARN memory per GPU: estimate ")]
    # TensorFlow's allocator gets 81,559 MiB less the context and its 1,800 MiB for Hopper.
    assert memory and ("> 76.9 GiB for TensorFlow = 81,559 MiB - CUDA context 1,024 - reserve "
                       "1,800 (TensorFlow's default for compute capability 9.x): likely out of "
                       "memory") in memory[0], lines
    assert "lower --train_batch_size to about 64 and raise" in memory[0]


def write_seq128_records(path):
    """One real pretraining record of sequence length 128, 20 predictions."""
    import tensorflow as tf

    from bert_tf.data.records import FEATURES, feature_lengths

    lengths = feature_lengths(128, 20)
    feature = {name: tf.train.Feature(float_list=tf.train.FloatList(value=[0.0] * lengths[name]))
               if dtype == "float32" else
               tf.train.Feature(int64_list=tf.train.Int64List(value=[0] * lengths[name]))
               for name, (dtype, _) in FEATURES.items()}
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                     .SerializeToString())


def test_recipe_with_bad_flags_checked_against_given_gpu_memory(tmp_path):
    records = tmp_path / "seq128.tfrecord"
    write_seq128_records(records)
    proc = run_doctor("--flagfile=launch/recipes/bert_large_phase1.flags", "--gpu_memory_gb=32",
                      "--max_seq_length=1024", "--max_predictions_per_seq=20",
                      "--num_warmup_steps=9000", f"--input_files={records}",
                      f"--eval_files={tmp_path}/missing-*.tfrecord")
    lines = lines_of(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert any(line.startswith(f"FAIL --input_files: {records}: feature 'input_ids' has length "
                               "128, expected 1024") for line in lines), lines
    assert any(line.startswith(f"FAIL --eval_files: no input files match '{tmp_path}/missing-*")
               and "fix: point it at existing TFRecord files" in line for line in lines), lines
    assert ("FAIL run_pretraining flags: --num_warmup_steps must be in [0, --num_train_steps=7038]"
            ", got 9000 | fix: fix that flag") in lines
    assert ("FAIL max_seq_length: --max_seq_length=1024 exceeds max_position_embeddings=512 of "
            "the model | fix: use --max_seq_length<=512 or a config with more positions") in lines
    assert any(line.startswith("WARN max_predictions_per_seq: 20 < max_seq_length*masked_lm_prob "
                               "= 1024*0.15 ~ 154") for line in lines)
    assert any(line.startswith("WARN tensor core shapes: vocab_size 30522 is not a multiple of 8 "
                               "(pad to 30528)") for line in lines)
    assert any(line.startswith("WARN memory per GPU: estimate ") and "> 29.2 GiB for TensorFlow "
               "= 32,768 MiB - CUDA context 1,024 - reserve 1,800" in line for line in lines)


# ------------------------------------------------------- checks given their facts

def test_glibcxx_import_error_explains_libstdcxx():
    error = ("ImportError: /opt/conda/lib/libstdc++.so.6: version `GLIBCXX_3.4.30' not found "
             "(required by /site-packages/tensorflow/libtensorflow_framework.so.2)")
    line = check_import("tensorflow", error).line()
    assert line.startswith("FAIL import tensorflow: the C++ runtime loaded is older than the one "
                           "tensorflow was built against (ImportError: /opt/conda/lib/libstdc++")
    assert "conda install -c conda-forge 'libstdcxx-ng>=12'" in line
    assert "LD_LIBRARY_PATH=$CONDA_PREFIX/lib" in line


def test_glibcxx_error_in_horovod_is_not_reported_as_a_missing_build():
    error = ("ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' "
             "not found (required by horovod/tensorflow/mpi_lib.cpython-311-x86_64-linux-gnu.so)")
    line = check_horovod_build("0.28.1", {"TensorFlow": False}, error, 0).line()
    assert line.startswith("FAIL import horovod.tensorflow: the C++ runtime loaded is older")


def test_other_import_error_says_how_to_install():
    line = check_import("tensorflow_text", "ModuleNotFoundError: No module named "
                        "'tensorflow_text'").line()
    assert line == ("FAIL import tensorflow_text: ModuleNotFoundError: No module named "
                    "'tensorflow_text' | fix: install the project environment: `make venv` (or "
                    "bash install/setup_env.sh)")


def test_tokenizers_stand_in_for_a_missing_tensorflow_text():
    # NGC's Python 3.12 images: no tensorflow-text, tokenizers installed (the same ids).
    check = check_tokenizer("ModuleNotFoundError: No module named 'tensorflow_text'")
    assert check.status == OK
    assert check.line().startswith("OK   tokenizer: Hugging Face tokenizers ")
    assert check_tokenizer(None).line() == "OK   tokenizer: tensorflow-text"


def test_horovod_without_tensorflow_fails():
    check = check_horovod_build(
        "0.28.1", {"TensorFlow": False},
        "ImportError: Extension horovod.tensorflow has not been built", gpu_count=0)
    assert check.status == FAIL
    assert check.line().startswith(
        "FAIL Horovod build: Horovod 0.28.1 was built without TensorFlow support (ImportError: "
        "Extension horovod.tensorflow has not been built) | fix: rebuild it against this "
        "TensorFlow")


def test_horovod_without_nccl_warns_only_with_gpus():
    build = {"TensorFlow": True, "Gloo": True, "MPI": True, "NCCL": False}
    assert check_horovod_build("0.28.1", build, None, gpu_count=8).status == WARN
    assert check_horovod_build("0.28.1", build, None, gpu_count=0).line() == \
        "OK   Horovod build: TensorFlow support"


def test_empty_cuda_visible_devices():
    gpus = [GpuInfo("A100", 40960)]
    line = check_gpu_visibility([], gpus, {"CUDA_VISIBLE_DEVICES": ""}).line()
    assert line == ("FAIL GPU visibility: nvidia-smi sees 1 GPU(s) but CUDA_VISIBLE_DEVICES='' "
                    "hides them from TensorFlow | fix: unset CUDA_VISIBLE_DEVICES (or list the "
                    "GPUs, e.g. 0,1,2,3)")
    assert check_gpu_visibility([], [], {"CUDA_VISIBLE_DEVICES": ""}).status == WARN


def test_cuda_launch_blocking_from_environment(monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    assert check_cuda_launch_blocking(os.environ, gpu_count=1).status == WARN
    assert check_cuda_launch_blocking(os.environ, gpu_count=8).status == FAIL
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING")
    assert check_cuda_launch_blocking(os.environ, 8).line() == \
        "OK   CUDA_LAUNCH_BLOCKING: not set"


def test_xla_libdevice_found_or_not(tmp_path):
    missing = check_xla_libdevice(1, {}, roots=[str(tmp_path)])
    assert missing.line().startswith("WARN XLA libdevice: libdevice.10.bc not found")
    assert "XLA_FLAGS=--xla_gpu_cuda_data_dir=" in missing.line()
    libdevice = tmp_path / "nvvm" / "libdevice" / "libdevice.10.bc"
    libdevice.parent.mkdir(parents=True)
    libdevice.write_bytes(b"BC")
    environ = {"XLA_FLAGS": f"--xla_gpu_cuda_data_dir={tmp_path}"}
    found = check_xla_libdevice(1, environ, roots=libdevice_candidates(environ))
    assert found.line() == f"OK   XLA libdevice: found {libdevice}"
    assert check_xla_libdevice(0, {}).status == OK


def run_config(**overrides):
    """The PretrainingConfig run_pretraining.py would run (BERT-large phase 1 shapes)."""
    values = dict(bert_config_file="bert_config.json", output_dir="out", train_batch_size=64,
                  max_seq_length=128, max_predictions_per_seq=20, precision="fp16",
                  num_accumulation_steps=128)
    values.update(overrides)
    return PretrainingConfig(**values)


def test_deterministic_with_xla_warns_of_sequential_scatters():
    line = check_deterministic_xla(run_config(deterministic=True, use_xla=True)).line()
    assert line.startswith("WARN --deterministic with --use_xla: on a GPU, XLA turns the "
                           "embedding gradients' scatter-adds (8,192 token rows per micro-batch"), \
        line
    assert "sequential loops" in line and "drop --use_xla with it" in line
    for flags in (dict(deterministic=True), dict(use_xla=True), {}):
        assert check_deterministic_xla(run_config(**flags)).status == OK


def test_tokens_per_batch_multiple_of_8_under_fp16():
    padded = BertConfig(vocab_size=30528)
    line = check_tensor_core_shapes(run_config(train_batch_size=3, max_seq_length=130),
                                    padded).line()
    assert line.startswith("WARN tensor core shapes: train_batch_size*max_seq_length = 3*130 = "
                           "390 is not a multiple of 8: float16 matmuls under --precision=fp16")
    assert check_tensor_core_shapes(run_config(), padded).status == OK
    assert check_tensor_core_shapes(
        run_config(train_batch_size=3, max_seq_length=130, precision="fp32"),
        LARGE).status == OK


def test_max_predictions_too_many_wastes_compute():
    line = check_max_predictions(run_config(max_predictions_per_seq=80)).line()
    assert line.startswith("WARN max_predictions_per_seq: 80 is far above "
                           "max_seq_length*masked_lm_prob ~ 19")
    assert check_max_predictions(run_config(), masked_lm_prob=0.15).line() == \
        "OK   max_predictions_per_seq: 20 for ~19 masked tokens"


def test_memory_fits_or_warns_with_formula():
    phase2 = run_config(train_batch_size=16, max_seq_length=512, max_predictions_per_seq=80,
                        num_accumulation_steps=256, use_xla=True)
    v100 = device_memory(32510, 7, environ={})  # a V100-32GB outside our Docker image
    fits = check_memory(phase2, LARGE, v100).line()
    assert fits.startswith("OK   memory per GPU: estimate 23.3 GiB = weights 1.9 + grads 1.3 + "
                           "optimizer 2.5 + accumulation 1.3 + activations 15.4 + workspace 1.0")
    # Figures only: the formula (1,500 characters on one line once) is docs/memory.md's.
    assert "XLA on; the formula: docs/memory.md)" in fits and "bytes per" not in fits
    assert len(fits) < 400, fits
    assert fits.endswith("<= 29.7 GiB for TensorFlow = 32,510 MiB - CUDA context 1,024 - reserve "
                         "1,050 (TensorFlow's default for compute capability 7.x)")
    big = run_config(train_batch_size=64, max_seq_length=512, max_predictions_per_seq=80)
    line = check_memory(big, LARGE, v100).line()
    assert line.startswith("WARN memory per GPU: estimate 81.6 GiB")
    assert "likely out of memory | fix: lower --train_batch_size to about 16" in line
    # A GPU too small for one sequence gets no "batch 0" advice.
    line = check_memory(big, LARGE, device_memory(4096, None, environ={})).line()
    assert line.endswith("fix: it does not fit even at batch 1: use a GPU with more memory, a "
                         "shorter --max_seq_length")


def test_bad_gpu_memory_and_missing_mpirun(tmp_path):
    for value in ("-1", "0", "nan", "inf"):
        proc = run_doctor(f"--gpu_memory_gb={value}",
                          "--flagfile=launch/recipes/bert_large_phase1.flags")
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout
        assert f"error: --gpu_memory_gb must be a finite number > 0, got {float(value)!r}" \
            in proc.stderr
    # Without mpirun on the PATH the doctor warns (it reported 0 FAIL 0 WARN before).
    assert check_mpirun({"PATH": str(tmp_path)}).line().startswith(
        "WARN mpirun: not found on PATH: launch.py --launcher=mpirun")
    assert check_mpirun({"PATH": os.environ["PATH"]}).status == "OK"
    env = Environment(python="3.11")
    assert "mpirun" in [c.name for c in environment_checks(env, {"PATH": str(tmp_path)})]


def test_half_precision_on_cpu_without_native_support_warns(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    flags = cpu_flags(str(cpuinfo))
    assert "avx2" in flags and "avx512_bf16" not in flags
    line = check_cpu_half_precision("bf16", 0, flags).line()
    assert line.startswith("WARN half precision on CPU: --precision=bf16 on a CPU without "
                           "amx_bf16 or avx512_bf16")
    assert "use --precision=fp32" in line
    assert check_cpu_half_precision("bf16", 0, flags | {"avx512_bf16"}).status == OK
    # oneDNN held below an instruction set (ONEDNN_MAX_CPU_ISA) emulates its precisions.
    cpuinfo.write_text("processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16\n")
    assert cpu_flags(str(cpuinfo), max_isa="ALL") >= {"avx512_bf16", "amx_bf16"}
    assert cpu_flags(str(cpuinfo), max_isa="avx512_core_bf16") == {"avx2", "avx512f",
                                                                  "avx512_bf16"}
    assert cpu_flags(str(cpuinfo), max_isa="AVX2") == {"avx2", "avx512f"}
    # XLA runs bf16's matmuls (bfloat16 -> float32 dots) in bfloat16, amp's in float32.
    xla = check_cpu_half_precision("bf16", 0, flags | {"avx512_bf16"}, use_xla=True)
    assert xla.status == OK
    xla = check_cpu_half_precision("amp", 0, flags | {"avx512_bf16"}, use_xla=True)
    assert xla.status == WARN and "drop --use_xla" in xla.line()
    assert check_cpu_half_precision("bf16", 8, flags).status == OK
    assert check_cpu_half_precision("fp32", 0, flags).status == OK


def test_onednn_off_on_a_cpu_run_is_a_warning_with_the_fix():
    check = check_onednn(False, 0)
    assert check.status == WARN and "TF_ENABLE_ONEDNN_OPTS" in check.line()
    assert check_onednn(True, 0).status == OK
    assert check_onednn(False, 8).status == OK

