"""How much of a GPU's memory TensorFlow's allocator gets: what `estimate` and `doctor` compare
a training step's memory (bert_tf/tools/model_size.py) against, worked out in docs/memory.md.

TensorFlow sizes its allocator from the memory CUDA reports free once the context exists,
less a reserve it leaves for cuDNN/cuBLAS and the driver (tensorflow/core/common_runtime/gpu/
gpu_device.cc, MinSystemMemory and SingleVirtualDeviceMemoryLimit): 225 MiB when under 2 GiB
is free, else 500 MiB up to compute capability 6.x, 1,050 MiB for 7.x, 1,536 MiB for 8.x and
1,800 MiB from 9.0; TF_DEVICE_MIN_SYS_MEMORY_IN_MB replaces it (our Dockerfile sets 2,048).
"""

import dataclasses

MIB = 1024**2
# The CUDA context with TensorFlow's kernels, cuDNN and cuBLAS loaded: nvidia-smi's
# memory.total less TensorFlow's reserve less the allocator size TensorFlow logs ("Created
# device ... with N MB memory", public TF 2.x logs) was 326-683 MiB on V100-32GB and T4,
# 518-949 MiB on A100-40GB and L4, 996 MiB on H100: 1 GiB covers them (docs/memory.md).
CUDA_CONTEXT_MIB = 1024
# The Dockerfile's TF_DEVICE_MIN_SYS_MEMORY_IN_MB (tests/test_estimate.py checks they agree).
DOCKERFILE_RESERVE_MIB = 2048
RESERVE_VARIABLE = "TF_DEVICE_MIN_SYS_MEMORY_IN_MB"


def tensorflow_reserve_mib(available_mib: float, cc_major: int | None) -> int:
    """TensorFlow's default reserve (MinSystemMemory).

    Args:
      available_mib: memory free once the CUDA context exists, MiB.
      cc_major: compute capability major version; None (unknown) gets the largest reserve.

    Returns:
      The reserve in MiB.
    """
    if available_mib < 2048:
        return 225
    if cc_major is None or cc_major >= 9:
        return 1800
    return {6: 500, 7: 1050, 8: 1536}.get(max(cc_major, 6))


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
    """One GPU's memory, from what CUDA reports to what TensorFlow's allocator gets."""

    total_mib: float  # nvidia-smi memory.total
    context_mib: float
    reserve_mib: float
    reserve_source: str

    @property
    def allocator_bytes(self) -> int:
        return max(0, int((self.total_mib - self.context_mib - self.reserve_mib) * MIB))

    def describe(self) -> str:
        return (f"{self.allocator_bytes / 1024**3:.1f} GiB for TensorFlow = {self.total_mib:,.0f}"
                f" MiB - CUDA context {self.context_mib:,.0f} - reserve {self.reserve_mib:,.0f} "
                f"({self.reserve_source})")


def device_memory(total_mib: float, cc_major: int | None = None, environ=None) -> DeviceMemory:
    """The allocator's share of a GPU with `total_mib` (nvidia-smi memory.total).

    Args:
      total_mib: the GPU's memory as CUDA reports it, MiB.
      cc_major: its compute capability's major version (None: unknown).
      environ: the training run's environment (doctor: this machine's): its
        TF_DEVICE_MIN_SYS_MEMORY_IN_MB wins when set. None (estimate: the run's environment is
        unknown): the larger of TensorFlow's default and our Dockerfile's reserve.

    Returns:
      A DeviceMemory.
    """
    available = total_mib - CUDA_CONTEXT_MIB
    default = tensorflow_reserve_mib(available, cc_major)
    cc = "unknown compute capability" if cc_major is None else f"compute capability {cc_major}.x"
    if environ is None:
        reserve = max(default, DOCKERFILE_RESERVE_MIB)
        source = (f"the larger of TensorFlow's {default} MiB for {cc} and the Dockerfile's "
                  f"{RESERVE_VARIABLE}={DOCKERFILE_RESERVE_MIB}")
    elif environ.get(RESERVE_VARIABLE, "").strip().isdigit():
        reserve = int(environ[RESERVE_VARIABLE])
        source = f"{RESERVE_VARIABLE}={reserve}"
    else:
        reserve, source = default, f"TensorFlow's default for {cc}"
    return DeviceMemory(total_mib, CUDA_CONTEXT_MIB, reserve, source)
