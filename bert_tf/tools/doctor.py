"""Preflight check of the machine and, optionally, of a training configuration.

    python -m bert_tf doctor
    python -m bert_tf doctor --flagfile=launch/recipes/bert_large_phase2.flags --gpu_memory_gb=40

Prints one line each for Python, TensorFlow, tensorflow-text, the GPUs
TensorFlow sees and Horovod's build, then one line per known trap:
`OK`, `WARN` or `FAIL`, with the fix. Given run_pretraining flags it also checks
batch/sequence/precision choices and estimates memory per GPU. Exits 1 when a
check FAILs (or Horovod lacks TensorFlow support), else 0.
"""

import dataclasses
import glob
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys

from absl import flags

import bert_tf
from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.tools import model_size
from bert_tf.train.config import (
    PRECISION_MODES,
    PretrainingConfig,
    PretrainingConfigError,
    define_pretraining_flags,
    pretraining_config_from_flags,
    xla_cpu_float32_output_matmuls,
)

# TF's start-up INFO lines would bury the report; its warnings (CUDA libraries that do not
# load) stay, as they explain a GPU visibility FAIL.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

OK, WARN, FAIL = "OK", "WARN", "FAIL"
LIBDEVICE = os.path.join("nvvm", "libdevice", "libdevice.10.bc")


@dataclasses.dataclass
class Check:
    status: str
    name: str
    message: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4} {self.name}: {self.message}"
        if self.fix and self.status != OK:
            text += f" | fix: {self.fix}"
        return text


@dataclasses.dataclass
class GpuInfo:
    name: str
    memory_mib: int


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
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        name, _, memory = line.rpartition(",")
        if name and memory.strip().isdigit():
            gpus.append(GpuInfo(name.strip(), int(memory.strip())))
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
    checks.append(check_onednn(env.onednn, env.gpu_count))
    return checks


# ---------------------------------------------------------------- training configuration

def check_tensor_core_shapes(config: PretrainingConfig, bert_config: BertConfig | None) -> Check:
    name = "tensor core shapes"
    if not PRECISION_MODES[config.precision].float16_on_gpu:
        return Check(OK, name, f"--precision={config.precision}: no float16 alignment needed")
    tokens = config.train_batch_size * config.max_seq_length
    problems, fixes = [], []
    if tokens % 8:
        problems.append(f"train_batch_size*max_seq_length = {config.train_batch_size}*"
                        f"{config.max_seq_length} = {tokens} is not a multiple of 8")
        fixes.append("choose a --train_batch_size that makes batch*seq a multiple of 8")
    if bert_config is not None and bert_config.vocab_size % 8:
        padded = -(-bert_config.vocab_size // 8) * 8
        problems.append(f"vocab_size {bert_config.vocab_size} is not a multiple of 8 "
                        f"(pad to {padded})")
        fixes.append(f"pad the vocabulary to {padded} entries with unused tokens when training "
                     "from scratch (keep it to load Google's checkpoints)")
    if not problems:
        return Check(OK, name, f"{tokens} tokens per batch, multiple of 8")
    return Check(WARN, name, "; ".join(problems) + f": float16 matmuls under "
                 f"--precision={config.precision} leave tensor cores idle", "; ".join(fixes))


def check_sequence_length(config: PretrainingConfig, bert_config: BertConfig | None) -> Check:
    name = "max_seq_length"
    if bert_config is None:
        return Check(WARN, name, "no --bert_config_file: cannot compare with "
                     "max_position_embeddings", "pass --bert_config_file")
    limit = bert_config.max_position_embeddings
    if config.max_seq_length > limit:
        return Check(FAIL, name, f"--max_seq_length={config.max_seq_length} exceeds "
                     f"max_position_embeddings={limit} of the model",
                     f"use --max_seq_length<={limit} or a config with more positions")
    return Check(OK, name, f"{config.max_seq_length} <= max_position_embeddings {limit}")


def check_max_predictions(config: PretrainingConfig, masked_lm_prob: float = 0.15) -> Check:
    name = "max_predictions_per_seq"
    # create_pretraining_data masks round(seq * prob) tokens, capped at max_predictions.
    wanted = max(1, round(config.max_seq_length * masked_lm_prob))
    if config.max_predictions_per_seq < wanted:
        return Check(WARN, name, f"{config.max_predictions_per_seq} < "
                     "max_seq_length*masked_lm_prob "
                     f"= {config.max_seq_length}*{masked_lm_prob:g} ~ {wanted}: fewer tokens are "
                     "masked than masked_lm_prob asks for",
                     f"use --max_predictions_per_seq={-(-wanted // 10) * 10} (Google: 20 for "
                     "seq 128, 80 for seq 512) and regenerate the data with it")
    if config.max_predictions_per_seq > config.max_seq_length:
        return Check(FAIL, name, f"{config.max_predictions_per_seq} > max_seq_length "
                     f"{config.max_seq_length}", "use about max_seq_length*masked_lm_prob")
    if config.max_predictions_per_seq > 2 * wanted + 10:
        return Check(WARN, name, f"{config.max_predictions_per_seq} is far above "
                     f"max_seq_length*masked_lm_prob ~ {wanted}: the MLM head computes on "
                     "padding", f"use --max_predictions_per_seq={-(-wanted // 10) * 10}")
    return Check(OK, name, f"{config.max_predictions_per_seq} for ~{wanted} masked tokens")


def check_memory(config: PretrainingConfig, bert_config: BertConfig | None,
                 gpu_memory_gb: float | None) -> Check:
    name = "memory per GPU"
    if bert_config is None:
        return Check(WARN, name, "no --bert_config_file: no memory estimate",
                     "pass --bert_config_file")
    m = model_size.estimate_memory(bert_config, config.train_batch_size, config.max_seq_length,
                                   config.max_predictions_per_seq, config.precision,
                                   config.num_accumulation_steps, config.use_xla)
    g = model_size.GIB
    breakdown = (f"estimate {m.total / g:.1f} GiB = weights {m.weights / g:.1f} + grads "
                 f"{m.gradients / g:.1f} + optimizer {m.optimizer_slots / g:.1f} + accumulation "
                 f"{m.accumulation / g:.1f} + activations {m.activations / g:.1f} + workspace "
                 f"{m.workspace / g:.1f} (batch {config.train_batch_size}, "
                 f"seq {config.max_seq_length}, "
                 f"{config.precision}, XLA {'on' if config.use_xla else 'off'}; formula: "
                 f"{model_size.MEMORY_FORMULA})")
    if gpu_memory_gb is None:
        return Check(OK, name, breakdown + "; no GPU memory known (pass --gpu_memory_gb)")
    if m.total > gpu_memory_gb * g:
        per_sequence = max(1, m.activations // config.train_batch_size)
        room = gpu_memory_gb * g - (m.total - m.activations)
        fitting = max(0, int(room // per_sequence))
        if fitting >= 8:
            fitting -= fitting % 8  # keep tensor-core friendly shapes
        precision_hint = ("" if PRECISION_MODES[config.precision].activation_bytes < 4
                          else ", or use --precision=fp16 (halves activations)")
        return Check(WARN, name, f"{breakdown} > {gpu_memory_gb:g} GiB: likely out of memory",
                     f"lower --train_batch_size to about {fitting} and raise "
                     "--num_accumulation_steps to keep "
                     f"the global batch{precision_hint}")
    return Check(OK, name, f"{breakdown} <= {gpu_memory_gb:g} GiB")


def cpu_flags(cpuinfo="/proc/cpuinfo") -> set:
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def check_cpu_half_precision(precision: str, gpu_count: int, flags: set,
                             use_xla: bool = False) -> Check:
    name = "half precision on CPU"
    fast = PRECISION_MODES[precision].fast_cpu_flags
    if gpu_count or not fast:
        return Check(OK, name, "not training on a CPU in half precision")
    if fast & flags and use_xla and not xla_cpu_float32_output_matmuls(precision):
        return Check(WARN, name, f"--precision={precision} with --use_xla on a CPU: XLA's CPU "
                     "backend computes these matmuls in float32 (so did bf16's before they "
                     "became bfloat16 -> float32 dots: 1.95 sequences/s at BERT-base against "
                     "3.21 without XLA, bench/README.md)",
                     "drop --use_xla on this machine (keep it on GPUs), or use --precision=bf16")
    if fast & flags:
        return Check(OK, name, f"--precision={precision}: this CPU has native half-precision "
                     f"matmuls ({', '.join(sorted(fast & flags))})")
    return Check(WARN, name, f"--precision={precision} on a CPU without "
                 f"{' or '.join(sorted(fast))}: half-precision matmuls "
                 "run no faster than float32 here (a BERT-base update in bf16 measured 0.74x the "
                 "speed of fp32 on an AVX2-only CPU, bench/compare_train.py)",
                 "use --precision=fp32 on this machine; half precision pays off on GPUs and on "
                 "CPUs with AVX512_BF16/AMX")


def training_checks(config: PretrainingConfig, bert_config: BertConfig | None,
                    masked_lm_prob: float, gpu_memory_gb: float | None) -> list[Check]:
    return [check_sequence_length(config, bert_config),
            check_tensor_core_shapes(config, bert_config),
            check_max_predictions(config, masked_lm_prob),
            check_memory(config, bert_config, gpu_memory_gb)]


# ---------------------------------------------------------------- a cluster (--hosts)

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
    code = (f"import json; from bert_tf.tools.doctor import probe; "
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
    marker = token = None
    if h.output_dir:
        os.makedirs(h.output_dir, exist_ok=True)
        marker, token = os.path.join(h.output_dir, DOCTOR_MARKER), os.urandom(8).hex()
        with open(marker, "w") as f:
            f.write(token)
    checks, probes = [], {}
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
        if h.output_dir:
            checks.append(check_shared_dir(probes, h.output_dir))
    return checks


def define_host_flags():
    flags.DEFINE_list("hosts", None, "Preflight these nodes over ssh: host[:slots],... as "
                      "horovodrun -H takes them (with --output_dir: is it shared storage?).")
    flags.DEFINE_string("remote_python", sys.executable,
                        "--hosts: the Python interpreter on the nodes.")
    flags.DEFINE_list("network_interface", None,
                      "--hosts: the interface the ranks will use (launch.py --network_interface).")
    flags.DEFINE_string("ssh_identity_file", None, "--hosts: private key for ssh.")
    flags.DEFINE_integer("ssh_port", None, "--hosts: ssh port of the nodes.")


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


# ---------------------------------------------------------------- command line

@dataclasses.dataclass
class DoctorConfig:
    """The doctor's flags, and the training run to check (None: no run_pretraining flag)."""

    gpu_memory_gb: float | None = None
    masked_lm_prob: float = 0.15
    training: PretrainingConfig | None = None
    # --hosts: the cluster to preflight over ssh (define_host_flags).
    hosts: list[str] | None = None
    remote_python: str = sys.executable
    network_interface: list[str] | None = None
    ssh_identity_file: str | None = None
    ssh_port: int | None = None


def define_flags():
    """The doctor's own flags, plus run_pretraining's (bert_tf.train.config)."""
    flags.DEFINE_float("gpu_memory_gb", None,
                       "Memory of one GPU in GiB for the memory check; default: the smallest "
                       "GPU nvidia-smi reports.")
    define_host_flags()
    flags.DEFINE_float("masked_lm_prob", DoctorConfig.masked_lm_prob,
                       "Masked LM probability the data was created with (create_pretraining_data"
                       ".py --masked_lm_prob), for the max_predictions_per_seq check.")
    define_pretraining_flags()


def config_from_flags(flag_values) -> DoctorConfig:
    """The run_pretraining flags become the PretrainingConfig run_pretraining.py would run,
    when any is given."""
    given = any(flag_values[f.name].present for f in dataclasses.fields(PretrainingConfig))
    training = pretraining_config_from_flags(flag_values) if given else None
    return bert_tf.config_from_flags(DoctorConfig, flag_values, training=training)


def config_checks(config: PretrainingConfig) -> tuple[BertConfig | None, list[Check]]:
    """The model's BertConfig (None if unreadable) and checks of the run configuration itself:
    the validation run_pretraining.py does (paths left unset are fine here, the launcher adds
    them), the bert_config_file and the TFRecords."""
    placeholders = {name: getattr(config, name) or "<unset>"
                    for name in ("output_dir", "input_files", "eval_files")}
    checks = []
    try:
        dataclasses.replace(config, **placeholders).validate()
        checks.append(Check(OK, "run_pretraining flags", "valid"))
    except PretrainingConfigError as e:
        checks.append(Check(FAIL, "run_pretraining flags", str(e), "fix that flag"))
    bert_config = None
    if config.bert_config_file:
        try:
            bert_config = BertConfig.from_json_file(config.bert_config_file)
        except BertConfigError as e:
            checks.append(Check(FAIL, "bert_config_file", str(e),
                                "pass a valid --bert_config_file"))
    for flag in ("input_files", "eval_files"):
        if getattr(config, flag):
            checks.append(check_input_files(flag, getattr(config, flag), config.max_seq_length,
                                            config.max_predictions_per_seq))
    return bert_config, checks


def check_input_files(flag, patterns, max_seq_length, max_predictions_per_seq) -> Check:
    """The TFRecords exist and were made with these lengths (first record of each file)."""
    from bert_tf.data.files import InputDataError, expand_patterns
    from bert_tf.data.records import validate_records

    try:
        files = validate_records(expand_patterns(patterns), max_seq_length,
                                 max_predictions_per_seq, flag=flag)
    except InputDataError as e:
        fix = ("regenerate the data with create_pretraining_data.py at these lengths, or pass "
               "the lengths it was made with") if "expected" in str(e) else \
            "point it at existing TFRecord files (comma-separated globs)"
        return Check(FAIL, f"--{flag}", str(e).removeprefix(f"--{flag}: "), fix)
    return Check(OK, f"--{flag}", f"{len(files)} file(s) of seq {max_seq_length}, "
                 f"{max_predictions_per_seq} predictions")


def detected_gpu_memory_gb(env: Environment) -> float | None:
    if not env.smi_gpus:
        return None
    return min(g.memory_mib for g in env.smi_gpus) / 1024


def run(doctor: DoctorConfig, environ=None) -> int:
    """Prints the report; returns the exit code (1 if anything FAILed)."""
    environ = os.environ if environ is None else environ
    env = collect_environment()
    for line in describe(env):
        print(line)
    checks = environment_checks(env, environ)
    if doctor.training is not None:
        config = doctor.training
        memory = doctor.gpu_memory_gb
        if memory is None:
            memory = detected_gpu_memory_gb(env)
        bert_config, flag_checks = config_checks(config)
        checks += flag_checks + training_checks(config, bert_config, doctor.masked_lm_prob,
                                                memory)
        checks.append(check_cpu_half_precision(config.precision, env.gpu_count, cpu_flags(),
                                                     config.use_xla))
    if doctor.hosts:
        checks += run_host_checks(doctor)
    for check in checks:
        print(check.line())
    failed = sum(c.status == FAIL for c in checks)
    print(f"doctor: {failed} FAIL, {sum(c.status == WARN for c in checks)} WARN")
    return 1 if failed else 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, config_from_flags, run)
