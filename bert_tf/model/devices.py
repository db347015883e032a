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
NVML reports, so no NVML binding is needed. Also under CUDA_VISIBLE_DEVICES, which Slurm always
sets: the GPU it names is found by UUID or device minor (`gpu_address`).

Knows nothing of Horovod: bert_tf/train/distributed.py passes the local rank.
"""

import os
import re

import tensorflow as tf
from tensorflow.python.eager import context

# One entry per NVIDIA GPU, named by PCI address; NVML numbers GPUs in PCI address order.
NVIDIA_PCI_DEVICES = "/sys/bus/pci/drivers/nvidia"
# The driver's description of each GPU (its UUID, device minor), by PCI address.
NVIDIA_PROC_GPUS = "/proc/driver/nvidia/gpus"
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
    """Restricts this process to the CPUs near its GPU `index` (those it may already use, of
    the GPU's NUMA node); returns them, or None where that is unknown (no NVIDIA driver)."""
    cpus = gpu_cpus(index, pci_devices)
    cpus = cpus & os.sched_getaffinity(0) if cpus else None
    if cpus:
        os.sched_setaffinity(0, cpus)
    return cpus or None


def gpu_cpus(index: int, pci_devices: str = NVIDIA_PCI_DEVICES,
             proc_gpus: str = NVIDIA_PROC_GPUS, environ=None) -> set[int] | None:
    """The CPUs local to this process's GPU `index` (its index among the GPUs CUDA shows it)
    by the GPU's PCI device's local_cpulist, e.g. "0-19,40-59"; None without that
    information."""
    address = gpu_address(index, pci_devices, proc_gpus, os.environ if environ is None
                          else environ)
    if address is None:
        return None
    try:
        with open(os.path.join(pci_devices, address, "local_cpulist")) as f:
            text = f.read().strip()
    except OSError:
        return None
    cpus = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def gpu_address(index: int, pci_devices: str, proc_gpus: str, environ) -> str | None:
    """The PCI address of the process's GPU `index`. Without CUDA_VISIBLE_DEVICES, the index-th
    GPU in PCI address order (NVML's order). With it (Slurm always sets it), the index-th entry
    it lists: a GPU UUID, or a number, the driver's device minor (/dev/nvidiaN), both named in
    /proc/driver/nvidia/gpus/*/information; under Slurm the step's absolute GPU numbers
    (SLURM_STEP_GPUS) are used, as CUDA_VISIBLE_DEVICES counts from 0 where Slurm confines
    devices. None when unknown (a MIG instance, no driver files)."""
    try:
        addresses = sorted(n for n in os.listdir(pci_devices) if _PCI_ADDRESS.fullmatch(n))
    except OSError:
        return None
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return addresses[index] if index < len(addresses) else None
    absolute = [v.strip() for v in environ.get("SLURM_STEP_GPUS", "").split(",") if v.strip()]
    if len(absolute) == len(visible):
        visible = absolute
    if index >= len(visible):
        return None
    wanted = visible[index]
    described = _driver_descriptions(proc_gpus)
    for address, fields in described.items():
        if wanted in (fields.get("GPU UUID"), fields.get("Device Minor")):
            return address
    if wanted.isascii() and wanted.isdigit() and not described:  # minors follow PCI order
        return addresses[int(wanted)] if int(wanted) < len(addresses) else None
    return None


def _driver_descriptions(proc_gpus: str) -> dict[str, dict[str, str]]:
    """PCI address -> the fields of the driver's `information` file ("GPU UUID", "Device
    Minor", ...), for every GPU the driver lists."""
    described = {}
    try:
        names = os.listdir(proc_gpus)
    except OSError:
        return described
    for name in names:
        try:
            with open(os.path.join(proc_gpus, name, "information")) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        described[name.lower()] = {k.strip(): v.strip() for k, v in fields.items()}
    return described
