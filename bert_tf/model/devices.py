"""Which accelerator a process uses: every entry point's first TensorFlow call.

One process uses one GPU (Horovod's layout; a single-process tool takes the first), with memory
growth on, so that it neither creates a CUDA context on every GPU of the node nor reserves
their memory up front (TensorFlow's default). Both can only be set before TensorFlow
initialises its runtime (the first op, or a list of logical devices): TensorFlow raises a
RuntimeError when they change later, so every entry point calls `use_one_gpu` first (tests/
test_gpu_paths.py checks each). The data-creation workers, which need no GPU, hide them
(bert_tf/data/pretraining_data.py).

The process's CPU threads (input pipeline, Horovod, host-side ops) are bound to the cores of its
GPU's NUMA node, as NVIDIA's TF2 BERT does (run_pretraining.py line 197, gpu_affinity.py: NVML's
CPU affinity of the local rank's GPU); here from the GPU's PCI device in sysfs, which is what
NVML reports, so no NVML binding is needed.

Knows nothing of Horovod: bert_tf/train/distributed.py passes the local rank.
"""

import os
import re

import tensorflow as tf
from tensorflow.python.eager import context

# One entry per NVIDIA GPU, named by PCI address; NVML numbers GPUs in PCI address order.
NVIDIA_PCI_DEVICES = "/sys/bus/pci/drivers/nvidia"
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")


def runtime_initialized() -> bool:
    """Whether TensorFlow's runtime has started (after which devices are fixed)."""
    return context.context()._initialized  # no public API tells


class DeviceError(RuntimeError):
    """More processes on a node than it has GPUs; the message says how many to start."""


def use_one_gpu(index: int = 0, deterministic: bool = False) -> None:
    """Makes GPU `index` this process's only GPU, with memory growth; nothing on a machine
    without GPUs. Raises DeviceError when there is no GPU `index` (more ranks on the node than
    GPUs: two ranks on one GPU would run out of memory or run at half speed).

    Args:
      index: the process's GPU, e.g. Horovod's local rank; 0 for a single-process tool.
      deterministic: also turn on TensorFlow's op determinism (--deterministic): GPU kernels
        without a deterministic implementation raise instead of running (scatter/gather
        gradients use deterministic ones), cuDNN autotuning is off. On a CPU our runs are
        bit-reproducible without it.
    """
    if deterministic:
        os.environ["TF_DETERMINISTIC_OPS"] = "1"  # what TF before 2.9 and XLA read
        tf.config.experimental.enable_op_determinism()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        gpu = gpu_of_local_rank(gpus, index)
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
        bind_to_gpu_cpus(index)


def gpu_of_local_rank(gpus: list, index: int):
    """gpus[index], or DeviceError naming the GPU count when the node has fewer GPUs."""
    if index >= len(gpus):
        raise DeviceError(
            f"this process is local rank {index} but its node has {len(gpus)} visible GPU(s): "
            f"start at most {len(gpus)} rank(s) per node (horovodrun/mpirun -np, launch.py "
            "--num_gpus, the host:slots of --hosts), one per GPU")
    return gpus[index]


def bind_to_gpu_cpus(index: int, pci_devices: str = NVIDIA_PCI_DEVICES) -> set[int] | None:
    """Restricts this process to the CPUs near GPU `index` (those it may already use, of the
    GPU's NUMA node); returns them, or None where that is unknown: no NVIDIA driver, or
    CUDA_VISIBLE_DEVICES renumbered the GPUs."""
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        return None
    cpus = gpu_cpus(index, pci_devices)
    cpus = cpus & os.sched_getaffinity(0) if cpus else None
    if cpus:
        os.sched_setaffinity(0, cpus)
    return cpus or None


def gpu_cpus(index: int, pci_devices: str = NVIDIA_PCI_DEVICES) -> set[int] | None:
    """The CPUs local to NVIDIA GPU `index` (in NVML's order) by its PCI device's
    local_cpulist, e.g. "0-19,40-59"; None without that information."""
    try:
        addresses = sorted(n for n in os.listdir(pci_devices) if _PCI_ADDRESS.fullmatch(n))
        if not addresses:
            return None
        with open(os.path.join(pci_devices, addresses[index % len(addresses)],
                               "local_cpulist")) as f:
            text = f.read().strip()
    except OSError:
        return None
    cpus = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus

