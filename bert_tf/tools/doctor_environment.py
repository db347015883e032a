"""The doctor's look at this machine: Python, TensorFlow, tensorflow-text, the GPUs and
Horovod's build, then the environment traps (imports, GPU visibility, CUDA_LAUNCH_BLOCKING,
XLA's libdevice, oneDNN)."""

import dataclasses
import glob
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys

from bert_tf.tools.doctor_check import FAIL, OK, WARN, Check

LIBDEVICE = os.path.join("nvvm", "libdevice", "libdevice.10.bc")


@dataclasses.dataclass
class GpuInfo:
    name: str
    memory_mib: int
    cc_major: int | None = None  # None: a driver too old to report compute_cap


@dataclasses.dataclass
class Environment:
    """What the doctor found; each *_error is the import error text, if any."""

    python: str
    tf_version: str | None = None
    tf_error: str | None = None
    tf_text_version: str | None = None
    tf_text_error: str | None = None
    tf_gpus: list = dataclasses.field(default_factory=list)
    onednn: bool | None = None  # TensorFlow's oneDNN CPU kernels on
    smi_gpus: list = dataclasses.field(default_factory=list)
    horovod_version: str | None = None
    horovod_error: str | None = None
    horovod_build: dict = dataclasses.field(default_factory=dict)

    @property
    def gpu_count(self) -> int:
        return max(len(self.tf_gpus), len(self.smi_gpus))


def _import_error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def query_nvidia_smi() -> list[GpuInfo]:
    """GPUs the driver sees (empty without nvidia-smi or a working driver)."""
    if shutil.which("nvidia-smi") is None:
        return []
    for fields in ("name,memory.total,compute_cap", "name,memory.total"):
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            continue  # drivers before 510 do not know compute_cap
        return parse_nvidia_smi(out, with_compute_cap="compute_cap" in fields)
    return []


def parse_nvidia_smi(out: str, with_compute_cap: bool) -> list[GpuInfo]:
    """GpuInfo of each `name, memory.total[, compute_cap]` line (csv, no units)."""
    gpus = []
    for line in out.splitlines():
        cc = None
        if with_compute_cap:
            line, _, cap = line.rpartition(",")
            cc = int(float(cap)) if re.fullmatch(r"\s*\d+(\.\d+)?\s*", cap) else None
        name, _, memory = line.rpartition(",")
        if name and memory.strip().isdigit():
            gpus.append(GpuInfo(name.strip(), int(memory.strip()), cc))
    return gpus


def collect_environment() -> Environment:
    env = Environment(python=platform.python_version(), smi_gpus=query_nvidia_smi())
    try:
        import tensorflow as tf
        env.tf_version = tf.__version__
        env.tf_gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
        from bert_tf.train.precision import onednn_enabled

        env.onednn = onednn_enabled()
    except ImportError as e:
        env.tf_error = _import_error_text(e)
    try:
        import tensorflow_text
        env.tf_text_version = tensorflow_text.__version__
    except ImportError as e:
        env.tf_text_error = _import_error_text(e)
    try:
        env.horovod_version = importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        return env
    try:
        from bert_tf.train import distributed  # the one module that imports horovod.tensorflow

        env.horovod_build = distributed.build_info()
    except ImportError as e:
        env.horovod_error = _import_error_text(e)
        env.horovod_build = {"TensorFlow": False}
    return env


def describe(env: Environment) -> list[str]:
    """The one-line-each summary of versions and devices."""
    lines = [f"Python {env.python} ({sys.executable})"]
    lines.append(f"TensorFlow {env.tf_version}" if env.tf_version
                 else "TensorFlow: does not import")
    lines.append(f"tensorflow-text {env.tf_text_version}" if env.tf_text_version
                 else "tensorflow-text: does not import (the tokenizer uses tokenizers)")
    gpus = ", ".join(env.tf_gpus) if env.tf_gpus else "none (CPU only)"
    lines.append(f"GPUs visible to TensorFlow: {len(env.tf_gpus)}: {gpus}")
    if env.smi_gpus:
        lines.append("GPUs seen by nvidia-smi: " + ", ".join(
            f"{g.name} ({g.memory_mib / 1024:.0f} GiB)" for g in env.smi_gpus))
    if env.horovod_version is None:
        lines.append("Horovod: not installed")
    else:
        built = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in env.horovod_build.items())
        lines.append(f"Horovod {env.horovod_version}: {built}")
    return lines


# ---------------------------------------------------------------- environment traps

def check_import(package: str, error: str | None) -> Check:
    name = f"import {package}"
    if error is None:
        return Check(OK, name, "imports")
    if "GLIBCXX" in error or "CXXABI" in error:
        return Check(
            FAIL, name, f"the C++ runtime loaded is older than the one {package} was built "
            f"against ({error.splitlines()[0][:300]})",
            "the libstdc++.so.6 found first lacks that GLIBCXX version (typical in conda "
            "envs, whose lib/ shadows the system one): `conda install -c conda-forge "
            "'libstdcxx-ng>=12'`, or put the newer one first with "
            "LD_LIBRARY_PATH=$CONDA_PREFIX/lib (or LD_PRELOAD=/usr/lib/x86_64-linux-gnu/"
            "libstdc++.so.6); check with `strings libstdc++.so.6 | grep GLIBCXX`")
    return Check(FAIL, name, error.splitlines()[0][:300],
                 "install the project environment: `make venv` (or bash install/setup_env.sh)")


def check_gpu_visibility(tf_gpus: list, smi_gpus: list, environ) -> Check:
    name = "GPU visibility"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    hidden = visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles")
    if smi_gpus and not tf_gpus:
        if hidden:
            return Check(FAIL, name, f"nvidia-smi sees {len(smi_gpus)} GPU(s) but "
                         f"CUDA_VISIBLE_DEVICES={visible!r} hides them from TensorFlow",
                         "unset CUDA_VISIBLE_DEVICES (or list the GPUs, e.g. 0,1,2,3)")
        return Check(FAIL, name, f"nvidia-smi sees {len(smi_gpus)} GPU(s) but TensorFlow "
                     "sees none",
                     "this TensorFlow is a CPU build or cannot load CUDA/cuDNN: use the NGC "
                     "image (see Dockerfile) or `pip install tensorflow[and-cuda]` matching "
                     "the driver; `python -c \"import tensorflow as tf; "
                     "print(tf.sysconfig.get_build_info())\"` shows the CUDA it needs")
    if hidden:
        return Check(WARN, name, f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU",
                     "unset CUDA_VISIBLE_DEVICES unless a CPU-only run is intended")
    if tf_gpus:
        return Check(OK, name, f"TensorFlow sees {len(tf_gpus)} GPU(s)")
    return Check(OK, name, "no NVIDIA GPU on this machine (nvidia-smi absent or sees none): "
                 "CPU training")


def check_cuda_launch_blocking(environ, gpu_count: int) -> Check:
    name = "CUDA_LAUNCH_BLOCKING"
    value = environ.get("CUDA_LAUNCH_BLOCKING")
    if value in (None, "", "0"):
        return Check(OK, name, "not set")
    message = (f"CUDA_LAUNCH_BLOCKING={value} serialises every kernel launch; multi-GPU "
               "Horovod runs hang in NCCL collectives and single-GPU runs crawl")
    fix = "unset CUDA_LAUNCH_BLOCKING (it is a debugging switch)"
    return Check(FAIL if gpu_count > 1 else WARN, name, message, fix)


def check_horovod_build(version: str | None, build: dict, error: str | None,
                        gpu_count: int) -> Check:
    name = "Horovod build"
    if version is None:
        return Check(FAIL, name, "Horovod is not installed",
                     "run `make venv` (builds Horovod with TensorFlow, Gloo and MPI)")
    if error and ("GLIBCXX" in error or "CXXABI" in error):
        return check_import("horovod.tensorflow", error)
    if not build.get("TensorFlow"):
        detail = f" ({error.splitlines()[0][:200]})" if error else ""
        return Check(FAIL, name, f"Horovod {version} was built without TensorFlow support"
                     f"{detail}",
                     "rebuild it against this TensorFlow: `pip uninstall -y horovod` then "
                     "HOROVOD_WITH_TENSORFLOW=1 pip install --no-build-isolation --no-cache-dir "
                     "horovod (or `make venv`, which does this)")
    if not (build.get("Gloo") or build.get("MPI")):
        return Check(FAIL, name, "Horovod has neither Gloo nor MPI: it cannot start ranks",
                     "rebuild with HOROVOD_WITH_GLOO=1 and/or HOROVOD_WITH_MPI=1")
    if gpu_count and not build.get("NCCL"):
        return Check(WARN, name, "GPUs present but Horovod was built without NCCL: gradients "
                     "are allreduced through host memory (several times slower)",
                     "rebuild with HOROVOD_GPU_OPERATIONS=NCCL (NCCL installed), or use the "
                     "NGC image (see Dockerfile), whose Horovod has NCCL")
    return Check(OK, name, "TensorFlow support" + (", NCCL" if build.get("NCCL") else ""))


def libdevice_candidates(environ) -> list[str]:
    """CUDA roots where XLA looks for nvvm/libdevice (first the one XLA_FLAGS names)."""
    roots = []
    match = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environ.get("XLA_FLAGS", ""))
    if match:
        roots.append(match.group(1))
    roots += [environ[v] for v in ("CUDA_DIR", "CUDA_HOME", "CUDA_PATH") if environ.get(v)]
    roots.append("/usr/local/cuda")
    # tensorflow[and-cuda] installs nvcc's libdevice as a pip package.
    roots += glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia",
                                    "cuda_nvcc"))
    return roots


def check_xla_libdevice(gpu_count: int, environ, roots=None) -> Check:
    name = "XLA libdevice"
    if not gpu_count:
        return Check(OK, name, "no GPU: XLA's GPU backend is not used")
    roots = libdevice_candidates(environ) if roots is None else roots
    match = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environ.get("XLA_FLAGS", ""))
    if match and not os.path.isfile(os.path.join(match.group(1), LIBDEVICE)):
        return Check(FAIL, name, f"XLA_FLAGS names --xla_gpu_cuda_data_dir={match.group(1)}, "
                     f"which has no {LIBDEVICE}",
                     "point it at the CUDA root that has nvvm/libdevice (e.g. /usr/local/cuda)")
    for root in roots:
        if os.path.isfile(os.path.join(root, LIBDEVICE)):
            return Check(OK, name, f"found {os.path.join(root, LIBDEVICE)}")
    return Check(WARN, name, "libdevice.10.bc not found: XLA-compiled steps on GPU fail with "
                 "'libdevice not found'",
                 "export XLA_FLAGS=--xla_gpu_cuda_data_dir=/path/to/cuda (the directory "
                 "holding nvvm/libdevice), or pip install nvidia-cuda-nvcc-cu12")


def check_mpirun(environ) -> Check:
    """mpirun on the PATH the ranks' launcher will see: launch.py --launcher=mpirun and
    `mpirun create_pretraining_data.py` need it (horovodrun with Gloo does not)."""
    path = shutil.which("mpirun", path=environ.get("PATH", os.defpath))
    if path:
        return Check(OK, "mpirun", f"found {path}")
    return Check(WARN, "mpirun", "not found on PATH: launch.py --launcher=mpirun and multi-process "
                 "data creation (mpirun -np N create_pretraining_data.py) cannot start ranks",
                 "install Open MPI (apt-get install openmpi-bin; the NGC image has it) or "
                 "launch with --launcher=horovodrun (Gloo)")


def check_tokenizer(tf_text_error: str | None) -> Check:
    """tensorflow-text, or Hugging Face tokenizers where it does not import (NGC's Python 3.12
    has no tensorflow-text 2.17 wheel): the same ids (bert_tf/data/tokenization.py)."""
    if tf_text_error is None:
        return Check(OK, "tokenizer", "tensorflow-text")
    try:
        version = importlib.metadata.version("tokenizers")
    except importlib.metadata.PackageNotFoundError:
        return check_import("tensorflow_text", tf_text_error)
    return Check(OK, "tokenizer", f"Hugging Face tokenizers {version} (tensorflow-text does "
                 "not import; the same ids)")


def check_onednn(enabled: bool | None, gpu_count: int) -> Check:
    name = "oneDNN CPU kernels"
    if gpu_count or enabled is None:
        return Check(OK, name, "not relevant (GPU run or TensorFlow missing)")
    if enabled:
        return Check(OK, name, "on (bert_tf's default)")
    return Check(WARN, name, "off: fp32 matmuls run on TF's default kernels (BERT-base "
                 "forward/backward measured 1.2x slower on an AVX2 CPU, "
                 "bench/compare_train.py) and --precision=amp "
                 "cannot rewrite to bfloat16",
                 "unset TF_ENABLE_ONEDNN_OPTS or set it to 1; in your own scripts call "
                 "bert_tf.use_onednn_by_default() before importing tensorflow (TensorFlow "
                 "reads the setting when it loads)")


def environment_checks(env: Environment, environ) -> list[Check]:
    checks = [check_import("tensorflow", env.tf_error), check_tokenizer(env.tf_text_error)]
    checks.append(check_gpu_visibility(env.tf_gpus, env.smi_gpus, environ))
    checks.append(check_cuda_launch_blocking(environ, env.gpu_count))
    if env.tf_error:
        checks.append(Check(FAIL, "Horovod build", "not checked: TensorFlow does not import",
                            "fix the TensorFlow import first"))
    else:
        checks.append(check_horovod_build(env.horovod_version, env.horovod_build,
                                          env.horovod_error, env.gpu_count))
    checks.append(check_xla_libdevice(env.gpu_count, environ))
    checks.append(check_mpirun(environ))
    checks.append(check_onednn(env.onednn, env.gpu_count))
    return checks
