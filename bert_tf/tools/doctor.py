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
import os
import sys

from absl import flags

import bert_tf
from bert_tf.data.numeric_flags import FlagValueError, check_number
from bert_tf.tools.device_memory import DeviceMemory, device_memory
from bert_tf.tools.doctor_check import FAIL, WARN
from bert_tf.tools.doctor_environment import (
    Environment,
    collect_environment,
    describe,
    environment_checks,
)
from bert_tf.tools.doctor_hosts import run_host_checks
from bert_tf.tools.doctor_training import (
    check_cpu_half_precision,
    config_checks,
    cpu_flags,
    training_checks,
)
from bert_tf.train.config import (
    PretrainingConfig,
    define_pretraining_flags,
    pretraining_config_from_flags,
)

# TF's start-up INFO lines would bury the report; its warnings (CUDA libraries that do not
# load) stay, as they explain a GPU visibility FAIL.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


# ---------------------------------------------------------------- command line

@dataclasses.dataclass
class DoctorConfig:
    """The doctor's flags, and the training run to check (None: no run_pretraining flag)."""

    gpu_memory_gb: float | None = None
    training: PretrainingConfig | None = None
    # --hosts: the cluster to preflight over ssh (define_host_flags).
    hosts: list[str] | None = None
    remote_python: str = sys.executable
    network_interface: list[str] | None = None
    ssh_identity_file: str | None = None
    ssh_port: int | None = None


def define_host_flags():
    flags.DEFINE_list("hosts", None, "Preflight these nodes over ssh: host[:slots],... as "
                      "horovodrun -H takes them (with --output_dir: is it shared storage?).")
    flags.DEFINE_string("remote_python", sys.executable,
                        "--hosts: the Python interpreter on the nodes.")
    flags.DEFINE_list("network_interface", None,
                      "--hosts: the interface the ranks will use (launch.py --network_interface).")
    flags.DEFINE_string("ssh_identity_file", None, "--hosts: private key for ssh.")
    flags.DEFINE_integer("ssh_port", None, "--hosts: ssh port of the nodes.")


def define_flags():
    """The doctor's own flags, plus run_pretraining's (bert_tf.train.config)."""
    flags.DEFINE_float("gpu_memory_gb", None,
                       "Memory of one GPU in GiB as nvidia-smi reports it (memory.total / 1024) "
                       "for the memory check; default: the smallest GPU nvidia-smi reports.")
    define_host_flags()
    define_pretraining_flags()


def config_from_flags(flag_values) -> DoctorConfig:
    """The run_pretraining flags become the PretrainingConfig run_pretraining.py would run,
    when any is given."""
    given = any(flag_values[f.name].present for f in dataclasses.fields(PretrainingConfig))
    training = pretraining_config_from_flags(flag_values) if given else None
    config = bert_tf.config_from_flags(DoctorConfig, flag_values, training=training)
    if config.gpu_memory_gb is not None:
        check_number("gpu_memory_gb", config.gpu_memory_gb, above=0)
    return config


def gpu_memory(doctor: DoctorConfig, env: Environment, environ) -> DeviceMemory | None:
    """What TensorFlow's allocator gets on the smallest GPU: --gpu_memory_gb if given (its
    compute capability unknown), else what nvidia-smi reports; None without either."""
    if doctor.gpu_memory_gb is not None:
        return device_memory(doctor.gpu_memory_gb * 1024, None, environ)
    if not env.smi_gpus:
        return None
    smallest = min(env.smi_gpus, key=lambda g: g.memory_mib)
    return device_memory(smallest.memory_mib, smallest.cc_major, environ)


def run(doctor: DoctorConfig, environ=None) -> int:
    """Prints the report; returns the exit code (1 if anything FAILed)."""
    environ = os.environ if environ is None else environ
    env = collect_environment()
    for line in describe(env):
        print(line)
    checks = environment_checks(env, environ)
    if doctor.training is not None:
        config = doctor.training
        bert_config, flag_checks = config_checks(config)
        checks += flag_checks + training_checks(config, bert_config, config.masked_lm_prob,
                                                gpu_memory(doctor, env, environ))
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
    bert_tf.run_command(define_flags, config_from_flags, run, errors=(FlagValueError,),
                        error_status=2)
