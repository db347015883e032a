"""GPU and cloud-instance presets for `python -m bert_tf estimate`.

Peaks are the vendor's dense figures (datasheets quote tensor-core throughput with 2:4
sparsity, twice these). Link and network bandwidths are per direction, as a ring allreduce
uses them. Prices are on-demand list prices per instance-hour (Linux, us-east-1 / us-central1
/ East US) as published by the clouds in 2024; AWS cut P4d/P5 on-demand prices in June 2025
(https://www.usage.ai/blogs/aws/ai-ml-cost/llm-cost-optimization-aws/) and prices change:
pass --price_per_hour for yours.
"""

import dataclasses

# Per direction, x16: PCIe gen3 15.75 GB/s, gen4 31.5, gen5 63 (PCI-SIG base specifications).
PCIE_GB_S = {3: 15.75, 4: 31.5, 5: 63.0}


class HardwareError(ValueError):
    """An unknown GPU or instance name (the message lists the known ones), or a
    precision the GPU has no unit for."""


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """One GPU model. TFLOPS are dense peaks; None where the GPU has no such unit."""

    name: str
    architecture: str  # volta, turing, ampere, ada, hopper
    fp32_tflops: float
    tf32_tflops: float | None  # tensor-core TF32 (Ampere and later)
    fp16_tflops: float  # tensor-core fp16 with fp32 accumulation
    bf16_tflops: float | None
    memory_gb: float
    memory_gb_s: float
    nvlink_gb_s: float | None  # per GPU, per direction; None: PCIe only
    pcie_gen: int
    memory_mib: int  # what CUDA reports (nvidia-smi memory.total): below the name's "GB"
    cc_major: int  # compute capability, major version (TensorFlow's reserve depends on it)

    def peak_tflops(self, precision: str) -> float:
        """Matmul peak under a --precision: fp32 runs TF32 on Ampere+ (TensorFlow's default)."""
        if precision in ("fp16", "amp"):
            return self.fp16_tflops
        if precision == "bf16":
            if self.bf16_tflops is None:
                raise HardwareError(f"{self.name} has no bfloat16 tensor cores: use "
                                    "--precision=fp16")
            return self.bf16_tflops
        return self.tf32_tflops or self.fp32_tflops

    @property
    def link_gb_s(self) -> float:
        """GPU-to-GPU bandwidth inside a node, per direction."""
        return self.nvlink_gb_s or PCIE_GB_S[self.pcie_gen]

    @property
    def link_name(self) -> str:
        return "NVLink" if self.nvlink_gb_s else f"PCIe gen{self.pcie_gen}"


# memory_mib: nvidia-smi's memory.total as public logs show it (V100-16GB 16,160; V100-32GB
# 32,510; T4 15,360; A10G 23,028; A100-40GB 40,536; A100-80GB 81,920; H100 SXM 81,559; H200
# 143,771; L4 23,034 MiB): HBM stacks hold 16/32/40/80 GiB, less what ECC and the driver
# keep; H200's "141 GB" is 140.4 GiB visible. docs/memory.md.
GPUS = {g.name: g for g in (
    # https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
    # V100 SXM2: 15.7 FP32, 125 tensor TFLOPS, 900 GB/s HBM2, NVLink 300 GB/s (both directions).
    GpuSpec("v100-16gb", "volta", 15.7, None, 125.0, None, 16, 900, 150, 3, 16160, 7),
    GpuSpec("v100-32gb", "volta", 15.7, None, 125.0, None, 32, 900, 150, 3, 32510, 7),
    # DGX-2H's 450 W V100 SXM3: 2.1 PFLOPS tensor for 16 GPUs against DGX-2's 2.0
    # (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/dgx-2/dgx-2h-datasheet-us-nvidia-841283-r6-web.pdf),
    # 16.4 FP32 scaled the same way; NVSwitch 300 GB/s per GPU both directions.
    GpuSpec("v100-32gb-dgx2h", "volta", 16.4, None, 131.0, None, 32, 900, 150, 3, 32510, 7),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
    # 8.1 FP32, 65 FP16 mixed, 16 GB GDDR6 320 GB/s, PCIe gen3 x16.
    GpuSpec("t4", "turing", 8.1, None, 65.0, None, 16, 320, None, 3, 15360, 7),
    # AWS's A10G (g5): 31.2 FP32, 35 TF32, 70 FP16/BF16 dense, 24 GB GDDR6 600 GB/s, PCIe gen4
    # (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/, A10 vs A10G
    # table; NVIDIA publishes no A10G datasheet, and other compilations give 62.5 FP16).
    GpuSpec("a10g", "ampere", 31.2, 35.0, 70.0, 70.0, 24, 600, None, 4, 23028, 8),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    # SXM: 19.5 FP32, 156 TF32, 312 FP16/BF16; 40 GB HBM2 1,555 GB/s, 80 GB HBM2e 2,039 GB/s;
    # NVLink 600 GB/s (both directions).
    GpuSpec("a100-40gb", "ampere", 19.5, 156.0, 312.0, 312.0, 40, 1555, 300, 4, 40536, 8),
    GpuSpec("a100-80gb", "ampere", 19.5, 156.0, 312.0, 312.0, 80, 2039, 300, 4, 81920, 8),
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 SXM):
    # 67 FP32, 989 TF32 / 1,979 FP16/BF16 with sparsity (half dense), 80 GB HBM3 3.35 TB/s,
    # NVLink 900 GB/s (both directions), PCIe gen5.
    GpuSpec("h100-sxm", "hopper", 67.0, 494.5, 989.5, 989.5, 80, 3350, 450, 5, 81559, 9),
    # https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM): H100's compute, 141 GB HBM3e
    # at 4.8 TB/s, NVLink 900 GB/s.
    GpuSpec("h200-sxm", "hopper", 67.0, 494.5, 989.5, 989.5, 141, 4800, 450, 5, 143771, 9),
    # https://www.nvidia.com/en-us/data-center/l4/: 30.3 FP32, 120 TF32 / 242 FP16/BF16 with
    # sparsity, 24 GB GDDR6 300 GB/s, PCIe gen4 x16.
    GpuSpec("l4", "ada", 30.3, 60.0, 121.0, 121.0, 24, 300, None, 4, 23034, 8),
)}


@dataclasses.dataclass(frozen=True)
class InstanceSpec:
    """One cloud instance type: its GPUs, network and on-demand price."""

    name: str
    gpu: str  # key of GPUS
    gpus: int
    vcpus: int
    network_gbps: float  # instance total, line rate
    rdma: bool  # EFA / InfiniBand with GPUDirect RDMA (else TCP through the host)
    price_per_hour: float  # USD, on-demand, see the module docstring for the date
    source: str


_AWS = "https://aws.amazon.com/ec2/instance-types/{}/ and https://aws.amazon.com/ec2/pricing/on-demand/"
_GCP = ("https://cloud.google.com/compute/docs/accelerator-optimized-machines#{}-vms and "
        "https://cloud.google.com/compute/gpus-pricing")
_AZURE = ("https://learn.microsoft.com/azure/virtual-machines/{} and "
          "https://azure.microsoft.com/pricing/details/virtual-machines/linux/")
INSTANCES = {i.name: i for i in (
    InstanceSpec("p3.2xlarge", "v100-16gb", 1, 8, 10, False, 3.06, _AWS.format("p3")),
    InstanceSpec("p3.8xlarge", "v100-16gb", 4, 32, 10, False, 12.24, _AWS.format("p3")),
    InstanceSpec("p3.16xlarge", "v100-16gb", 8, 64, 25, False, 24.48, _AWS.format("p3")),
    InstanceSpec("p3dn.24xlarge", "v100-32gb", 8, 96, 100, True, 31.212, _AWS.format("p3")),
    InstanceSpec("g4dn.xlarge", "t4", 1, 4, 25, False, 0.526, _AWS.format("g4")),
    InstanceSpec("g4dn.12xlarge", "t4", 4, 48, 50, False, 3.912, _AWS.format("g4")),
    InstanceSpec("g5.xlarge", "a10g", 1, 4, 10, False, 1.006, _AWS.format("g5")),
    InstanceSpec("g5.12xlarge", "a10g", 4, 48, 40, False, 5.672, _AWS.format("g5")),
    InstanceSpec("g5.48xlarge", "a10g", 8, 192, 100, False, 16.288, _AWS.format("g5")),
    # 400 Gbps EFA with GPUDirect RDMA, NVSwitch.
    InstanceSpec("p4d.24xlarge", "a100-40gb", 8, 96, 400, True, 32.7726, _AWS.format("p4")),
    # 3,200 Gbps EFAv2.
    InstanceSpec("p5.48xlarge", "h100-sxm", 8, 192, 3200, True, 98.32, _AWS.format("p5")),
    InstanceSpec("a2-highgpu-1g", "a100-40gb", 1, 12, 24, False, 3.67,
                 _GCP.format("a2")),
    InstanceSpec("a2-highgpu-8g", "a100-40gb", 8, 96, 100, False, 29.39,
                 _GCP.format("a2")),
    # 1,000 Gbps in all, of which GPUDirect-TCPX's 4 x 200 Gbps NICs carry GPU traffic;
    # not RDMA.
    InstanceSpec("a3-highgpu-8g", "h100-sxm", 8, 208, 800, False, 88.25,
                 _GCP.format("a3")),
    # NDv4: 8 x 200 Gb/s HDR InfiniBand; NDv5: 8 x 400 Gb/s NDR InfiniBand.
    InstanceSpec("ND96asr_v4", "a100-40gb", 8, 96, 1600, True, 27.197,
                 _AZURE.format("nda100-v4-series")),
    InstanceSpec("ND96isr_H100_v5", "h100-sxm", 8, 96, 3200, True, 98.32,
                 _AZURE.format("nd-h100-v5-series")),
)}


def get_gpu(name: str) -> GpuSpec:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise HardwareError(f"--gpu={name}: unknown GPU; known: {', '.join(GPUS)}") from None


def get_instance(name: str) -> InstanceSpec:
    for key, spec in INSTANCES.items():
        if key.lower() == name.lower():
            return spec
    raise HardwareError(f"--instance={name}: unknown instance type; known: "
                        f"{', '.join(INSTANCES)} (or pass --gpu and --gpus_per_node)")
