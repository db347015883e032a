"""Step-time model of data-parallel BERT pretraining: per-GPU compute, the optimizer
update, the gradient allreduce and the input pipeline, for `python -m bert_tf estimate`.

One optimizer update on every rank takes
    accumulation x micro-step + update + allreduce (+ nothing hidden: see ALLREDUCE_OVERLAP)
with
    micro-step = b x (FLOPs / (peak x COMPUTE_EFFICIENCY) + ELEMENTWISE_PASSES x activation
                 bytes / memory bandwidth) + MICRO_STEP_OVERHEAD_S
    update     = OPTIMIZER_BYTES_PER_PARAM x P / memory bandwidth
    allreduce  = ring over all N GPUs (NCCL's, or Gloo's on CPUs): 2(N-1)/N x bytes at
                 the pace of its slowest hop, NVLink/PCIe or the node's network, at
                 LINK_EFFICIENCY, plus a latency per fusion buffer.
The constants are fitted to NVIDIA's published BERT-large pretraining throughput
(DeepLearningExamples TensorFlow and TensorFlow2 READMEs, every single-node and multi-node
row): `python bench/estimate_vs_published.py --fit` prints them and the error per row.
"""

import dataclasses
import math

from bert_tf.model.config import BertConfig
from bert_tf.tools import model_size
from bert_tf.tools.hardware import GpuSpec

# Fraction of the matmul peak BERT's FLOPs reach, by GPU generation and the unit doing
# them: tensor cores in fp16/bf16 ("half") or TF32, or plain fp32 (no tensor cores: V100,
# T4). Volta's and Ampere's are fitted to NVIDIA's published TensorFlow BERT-large
# pretraining rows; Turing's make the estimate's T4/V100 ratio NVIDIA's published T4/V100
# BERT-large inference ratio (same README and container: no T4 training figure is
# published); Ada and Hopper borrow Ampere's (an assumption until measured there).
# `python bench/estimate_vs_published.py --fit` prints them.
COMPUTE_EFFICIENCY = {"volta-half": 0.571, "volta-fp32": 0.828, "ampere-half": 0.525,
                      "ampere-tf32": 0.585, "turing-half": 0.192, "turing-fp32": 0.323}
GENERATION = {"volta": "volta", "turing": "turing", "ampere": "ampere", "ada": "ampere",
              "hopper": "ampere"}
# The presets whose efficiency comes from published figures, and which: the systems of
# NVIDIA's TensorFlow BERT-large tables (DeepLearningExamples TensorFlow and TensorFlow2
# READMEs at 729963dd) that bench/estimate_vs_published.py fits to; a test keeps the two in
# step.
FITTED_ON = {
    "v100-16gb": "NVIDIA's TensorFlow BERT-large pretraining tables on DGX-1 16GB (TF1)",
    "v100-32gb": "NVIDIA's TensorFlow BERT-large pretraining tables on DGX-1 32GB and DGX-2 "
                 "(TF1, TF2)",
    "v100-32gb-dgx2h": "NVIDIA's TensorFlow BERT-large pretraining tables on DGX-2H (TF1, TF2)",
    "a100-40gb": "NVIDIA's TensorFlow BERT-large pretraining tables on DGX A100 40GB (TF1)",
    "a100-80gb": "NVIDIA's TensorFlow BERT-large pretraining tables on DGX A100 80GB (TF2)",
    "t4": "NVIDIA's T4/V100 BERT-large inference ratio (TF1 README, same container; no T4 "
          "training figure is published): an upper bound, as batch 8 fills a T4 better than "
          "a V100",
}
# Why the others are unchecked (docs/running.md section 3; bench/README.md, `--gpus`).
BORROWED_WHY = {
    "ampere": "no published BERT training figure for this Ampere GPU outside the DGX A100",
    "ada": "no published BERT training figure for Ada GPUs",
    "hopper": "no published TensorFlow BERT figure for Hopper; MLPerf's H100/H200 BERT "
              "results time NVIDIA's PyTorch code on packed sequences, another workload",
}


@dataclasses.dataclass(frozen=True)
class Confidence:
    """How sure the estimate's per-GPU throughput is, and where it comes from."""

    level: str  # measured (the user's throughput), fitted (published figures), borrowed
    source: str

    def __str__(self):
        return f"{self.level}: {self.source}"


def confidence(gpu: GpuSpec, precision: str, measured_source: str | None = None) -> Confidence:
    """How sure the per-GPU throughput on `gpu` under `precision` is.

    Args:
      gpu: the GPU preset.
      precision: the run's --precision (picks the efficiency class).
      measured_source: where a measured throughput came from (--sequences_per_second,
        --metrics_file=...), if one replaces the model.

    Returns:
      A Confidence: measured, fitted (published figures cover this preset) or borrowed.
    """
    if measured_source:
        return Confidence("measured", measured_source)
    key = efficiency_class(gpu, precision)
    if gpu.name in FITTED_ON:
        return Confidence("fitted", f"{key} efficiency {COMPUTE_EFFICIENCY[key]:.3f} fitted to "
                          f"{FITTED_ON[gpu.name]} (bench/estimate_vs_published.py)")
    return Confidence("borrowed", f"{key} efficiency {COMPUTE_EFFICIENCY[key]:.3f} from the "
                      f"fitted {GENERATION[gpu.architecture].title()} presets; "
                      f"{BORROWED_WHY[gpu.architecture]}; measure with bench/gpu_check.sh")
# Memory traffic of the elementwise ops (softmax, LayerNorm, GELU, dropout, casts) in
# multiples of the activations a sequence keeps (model_size.activation_bytes_per_sequence).
ELEMENTWISE_PASSES = 6.58
# Per micro-step launch, host and input overhead, seconds.
MICRO_STEP_OVERHEAD_S = 0.057
# LAMB reads weights, gradients (or the accumulator) and two slots, and writes weights,
# slots and the zeroed accumulator: ~8 float32 accesses per parameter, plus half copies.
OPTIMIZER_BYTES_PER_PARAM = 36
# Achieved / line-rate bandwidth of NCCL rings (nccl-tests bus bandwidth is typically
# 70-85% of the link; TCP through the host gets less than RDMA).
LINK_EFFICIENCY = {"nvlink": 0.8, "pcie": 0.7, "rdma": 0.8, "tcp": 0.5}
RING_STEP_LATENCY_S = {"intra": 10e-6, "inter": 30e-6}
# Horovod's default HOROVOD_FUSION_THRESHOLD (128 MiB since 0.21).
FUSION_BUFFER_BYTES = 128 * 2**20
# bert_tf allreduces the accumulated gradients once per update in one grouped op
# (bert_tf/train/distributed.py allreduce_sum), after the last backward pass: nothing of
# it overlaps the backward pass. With per-tensor allreduces and no accumulation, Horovod
# could hide up to the backward pass (2/3 of the compute).
ALLREDUCE_OVERLAP = 0.0
# Sequences/s one CPU core feeds from pre-masked TFRecords (read, shuffle, batch, parse):
# 16,500-28,000 at seq 128 and 512 on a shared 2-core x86 VM, the lowest taken
# (`python bench/input_rate.py [--max_seq_length=512 --max_predictions_per_seq=80]`).
INPUT_SEQUENCES_PER_CPU_S = 16_000.0


@dataclasses.dataclass(frozen=True)
class Workload:
    """What each rank runs: the model and the run_pretraining settings that set its cost."""

    bert_config: BertConfig
    seq_length: int
    max_predictions_per_seq: int
    batch_size: int  # per GPU per micro-step
    precision: str = "fp16"
    use_xla: bool = True
    fp16_allreduce: bool = False

    @property
    def flops_per_sequence(self) -> float:
        return model_size.training_flops_per_sequence(self.bert_config, self.seq_length,
                                                      self.max_predictions_per_seq)

    @property
    def gradient_bytes(self) -> int:
        return model_size.count_parameters(self.bert_config) * (2 if self.fp16_allreduce else 4)


@dataclasses.dataclass(frozen=True)
class Cluster:
    gpu: GpuSpec
    gpus_per_node: int
    num_nodes: int = 1
    network_gbps: float = 100.0  # per node, line rate
    rdma: bool = True
    vcpus_per_node: int | None = None

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes


def efficiency_class(gpu: GpuSpec, precision: str) -> str:
    """COMPUTE_EFFICIENCY's key for this GPU and --precision."""
    if precision != "fp32":
        unit = "half"
    else:
        unit = "tf32" if gpu.tf32_tflops else "fp32"
    return f"{GENERATION[gpu.architecture]}-{unit}"


def micro_step_seconds(w: Workload, gpu: GpuSpec) -> float:
    """Forward and backward of one micro-batch on one GPU (model, no measurement)."""
    peak = gpu.peak_tflops(w.precision) * 1e12 * COMPUTE_EFFICIENCY[efficiency_class(gpu, w.precision)]
    traffic = ELEMENTWISE_PASSES * model_size.activation_bytes_per_sequence(
        w.bert_config, w.seq_length, w.max_predictions_per_seq, w.precision, w.use_xla)
    per_sequence = w.flops_per_sequence / peak + traffic / (gpu.memory_gb_s * 1e9)
    return w.batch_size * per_sequence + MICRO_STEP_OVERHEAD_S


def update_seconds(w: Workload, gpu: GpuSpec) -> float:
    """The optimizer step (memory bound), once per update. (A fixed per-update cost fitted
    to zero against the published tables once the allreduce was modelled as a ring.)"""
    params = model_size.count_parameters(w.bert_config)
    return OPTIMIZER_BYTES_PER_PARAM * params / (gpu.memory_gb_s * 1e9)


def ring_bandwidth(cluster: Cluster) -> tuple[str, float]:
    """(the ring's slowest hop, its achieved bytes/s): NCCL's rings run through every GPU,
    NVLink/PCIe inside a node and, with several nodes, each node's network (its NICs
    shared by the rings), so the slower of the two sets the pace."""
    gpu = cluster.gpu
    link = "nvlink" if gpu.nvlink_gb_s else "pcie"
    intra = gpu.link_gb_s * 1e9 * LINK_EFFICIENCY[link]
    if cluster.num_nodes == 1:
        return gpu.link_name, intra
    kind = "rdma" if cluster.rdma else "tcp"
    network = cluster.network_gbps / 8 * 1e9 * LINK_EFFICIENCY[kind]
    if network < intra:
        return f"{cluster.network_gbps:g} Gbps {kind.upper()} network", network
    return gpu.link_name, intra


def allreduce_seconds(size_bytes, cluster: Cluster) -> float:
    """Ring allreduce of `size_bytes` over all GPUs: each sends and receives 2(N-1)/N of
    the data at the ring's pace. Latency per fusion buffer: 2(g-1) steps inside a node and
    2 log2(n) across nodes (NCCL's trees between nodes keep it logarithmic)."""
    ranks = cluster.num_gpus
    if ranks <= 1:
        return 0.0
    messages = max(1, math.ceil(size_bytes / FUSION_BUFFER_BYTES))
    latency = (2 * (cluster.gpus_per_node - 1) * RING_STEP_LATENCY_S["intra"]
               + 2 * math.ceil(math.log2(cluster.num_nodes)) * RING_STEP_LATENCY_S["inter"])
    return (2 * (ranks - 1) / ranks * size_bytes / ring_bandwidth(cluster)[1]
            + messages * latency)


@dataclasses.dataclass
class StepTime:
    """Seconds of one optimizer update, by part, and the sequences it trains."""

    compute: float  # accumulation x micro-steps
    update: float
    allreduce: float  # exposed (not overlapped) part
    sequences: int  # all ranks
    input_capacity: float | None  # sequences/s the nodes' CPUs can feed, all nodes

    @property
    def seconds(self) -> float:
        return self.compute + self.update + self.allreduce

    @property
    def sequences_per_second(self) -> float:
        rate = self.sequences / self.seconds
        return min(rate, self.input_capacity) if self.input_capacity else rate

    @property
    def bottleneck(self) -> str:
        if self.input_capacity and self.input_capacity < self.sequences / self.seconds:
            return "input"
        parts = {"compute": self.compute, "allreduce": self.allreduce, "update": self.update}
        return max(parts, key=parts.get)


def step_time(w: Workload, cluster: Cluster, accumulation: int,
              measured_sequences_per_second=None) -> StepTime:
    """One update on `cluster`; a measured per-GPU sequences/s (micro-steps and update of a
    one-GPU run) replaces the compute and update model."""
    if measured_sequences_per_second:
        compute = accumulation * w.batch_size / measured_sequences_per_second
        update = 0.0
    else:
        compute = accumulation * micro_step_seconds(w, cluster.gpu)
        update = update_seconds(w, cluster.gpu)
    backward = compute * 2 / 3 if accumulation == 1 else 0.0
    allreduce = max(0.0, allreduce_seconds(w.gradient_bytes, cluster)
                    - ALLREDUCE_OVERLAP * backward)
    capacity = (cluster.vcpus_per_node * INPUT_SEQUENCES_PER_CPU_S * cluster.num_nodes
                if cluster.vcpus_per_node else None)
    return StepTime(compute, update, allreduce,
                    accumulation * w.batch_size * cluster.num_gpus, capacity)


def negligible_accumulation(w: Workload, cluster: Cluster, fraction=0.05) -> int:
    """The smallest accumulation whose update + allreduce cost under `fraction` of the step."""
    per_micro = micro_step_seconds(w, cluster.gpu)
    overhead = update_seconds(w, cluster.gpu) + allreduce_seconds(w.gradient_bytes, cluster)
    return max(1, math.ceil(overhead * (1 - fraction) / (fraction * per_micro)))
