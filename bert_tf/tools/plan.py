"""The hardware-aware estimate behind `python -m bert_tf estimate --instance=...` or
`--gpu=...`: time to train, cost, memory, scaling efficiency, the bottleneck and a table
over node counts, from the step-time model in bert_tf.tools.performance."""

import dataclasses
import math

from bert_tf.tools import model_size, performance
from bert_tf.tools.device_memory import DeviceMemory, device_memory
from bert_tf.tools.hardware import GPUS, GpuSpec, HardwareError, get_gpu, get_instance

NODE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128)
# "Communication negligible": update + allreduce under this fraction of the step.
NEGLIGIBLE = 0.05


@dataclasses.dataclass(frozen=True)
class Hardware:
    """One node (a one-node Cluster), its price and how to name it."""

    node: performance.Cluster
    price_per_node_hour: float | None
    description: str

    @property
    def gpu(self) -> GpuSpec:
        return self.node.gpu

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node

    def cluster(self, num_nodes) -> performance.Cluster:
        return dataclasses.replace(self.node, num_nodes=num_nodes)


def resolve_hardware(instance=None, gpu=None, gpus_per_node=None, network_gbps=None,
                     price_per_hour=None, price_per_device_hour=None) -> Hardware:
    """The node from --instance (a preset) or --gpu/--gpus_per_node; flags override."""
    if instance:
        spec = get_instance(instance)
        g = get_gpu(gpu or spec.gpu)
        count = spec.gpus if gpus_per_node is None else gpus_per_node
        price = spec.price_per_hour
        where = f"{spec.name}: "
        network = spec.network_gbps if network_gbps is None else network_gbps
        rdma, vcpus = spec.rdma, spec.vcpus
    else:
        g, price, where = get_gpu(gpu), None, ""
        count = 1 if gpus_per_node is None else gpus_per_node
        network = 100.0 if network_gbps is None else network_gbps
        rdma, vcpus = True, None
    if price_per_hour is not None:
        price = price_per_hour
    elif price_per_device_hour is not None:
        price = price_per_device_hour * count
    link = f"{g.link_name} {g.link_gb_s:g} GB/s per direction" if count > 1 else "one GPU"
    assumed = "" if instance or network_gbps else " (assumed: pass --network_gbps)"
    description = (f"{where}{count} x {g.name} ({g.memory_gb:g} GB, {link}), network "
                   f"{network:g} Gbps {'RDMA' if rdma else 'TCP'}{assumed}")
    return Hardware(performance.Cluster(g, count, 1, network, rdma, vcpus), price, description)


@dataclasses.dataclass
class PlanRow:
    """One node count: the step it runs and what training takes there."""

    num_nodes: int
    num_gpus: int
    batch_size: int
    accumulation: int
    step: performance.StepTime
    efficiency: float  # sequences/s over num_gpus x one GPU's micro-steps at the recipe batch
    seconds: float
    cost: float | None


def split_global_batch(global_batch, gpus, batch_limit) -> tuple[int, int]:
    """The per-GPU batch and accumulation that make the global batch on `gpus` GPUs.

    Args:
      global_batch: sequences per update, all GPUs.
      gpus: GPUs training together.
      batch_limit: the largest per-GPU batch (the recipe's, or what fits in memory).

    Returns:
      (batch, accumulation): the largest batch up to `batch_limit` whose micro-batches make
      exactly the global batch, as launch/launch.py requires; when the GPU count does not
      divide it (a node count of the table), the nearest global batch above.
    """
    if global_batch % gpus:
        batch = max(1, min(batch_limit, global_batch // gpus))
        return batch, max(1, math.ceil(global_batch / (batch * gpus)))
    per_gpu = global_batch // gpus
    batch = max(d for d in range(1, min(batch_limit, per_gpu) + 1) if per_gpu % d == 0)
    return batch, per_gpu // batch


def plan_row(workload: performance.Workload, hardware: Hardware, num_nodes, global_batch,
             num_sequences, measured=None) -> PlanRow:
    """Training on `num_nodes` at a fixed global batch: accumulation fills it; when the GPUs
    outnumber it, each GPU's batch shrinks."""
    gpus = hardware.gpus_per_node * num_nodes
    batch, accumulation = split_global_batch(global_batch, gpus, workload.batch_size)
    step = performance.step_time(dataclasses.replace(workload, batch_size=batch),
                                 hardware.cluster(num_nodes), accumulation, measured)
    one_gpu = measured or workload.batch_size / performance.micro_step_seconds(workload,
                                                                               hardware.gpu)
    rate = step.sequences_per_second
    seconds = num_sequences / rate
    cost = (seconds / 3600 * num_nodes * hardware.price_per_node_hour
            if hardware.price_per_node_hour is not None else None)
    return PlanRow(num_nodes, gpus, batch, accumulation, step, rate / (gpus * one_gpu),
                   seconds, cost)


def scaling_table(workload, hardware, global_batch, num_sequences, measured=None,
                  max_nodes=64) -> list[PlanRow]:
    return [plan_row(workload, hardware, n, global_batch, num_sequences, measured)
            for n in NODE_COUNTS if n <= max_nodes and n * hardware.gpus_per_node <= global_batch]


def print_gpu_presets(precision="fp16"):
    """Every GPU preset: peak, memory for TensorFlow, and how sure its throughput is."""
    print(f"GPU presets ({precision}): dense peak, memory CUDA reports / TensorFlow's allocator "
          "gets, confidence of the modelled throughput")
    for gpu in GPUS.values():
        peak = (f"{gpu.peak_tflops(precision):g} TFLOP/s" if precision != "bf16"
                or gpu.bf16_tflops else "no bf16")
        unit = precision if precision != "bf16" or gpu.bf16_tflops else "fp16"
        print(f"  {gpu.name:<16} {peak:>14}  {gpu.memory_mib:>7,} MiB / "
              f"{gpu_memory(gpu).allocator_bytes / model_size.GIB:5.1f} GiB  "
              f"{performance.confidence(gpu, unit)}")


def _money(value):
    return "n/a" if value is None else f"${value:,.0f}"


def format_duration(seconds):
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 86400:.2f} days ({seconds / 3600:.1f} h)"


def gpu_memory(gpu: GpuSpec) -> DeviceMemory:
    """What TensorFlow's allocator gets on this GPU in a run whose environment is unknown."""
    return device_memory(gpu.memory_mib, gpu.cc_major)


def fitting_batch(workload: performance.Workload, gpu: GpuSpec) -> int:
    """The workload's per-GPU batch if its memory estimate fits the GPU (with an
    accumulation buffer), else the largest that does, rounded down to a multiple of 8."""
    w = workload
    largest = model_size.largest_batch(w.bert_config, gpu_memory(gpu).allocator_bytes,
                                       w.seq_length, w.max_predictions_per_seq, w.precision,
                                       w.use_xla)
    if largest < 1:
        raise HardwareError(f"BERT with H={w.bert_config.hidden_size} at seq {w.seq_length} "
                            f"does not fit in {gpu.name}'s {gpu_memory(gpu).describe()} even "
                            "at batch 1")
    return min(w.batch_size, largest - largest % 8 or largest)


def print_memory(workload: performance.Workload, gpu: GpuSpec, accumulation):
    w = workload
    m = model_size.estimate_memory(w.bert_config, w.batch_size, w.seq_length,
                                   w.max_predictions_per_seq, w.precision, accumulation,
                                   w.use_xla)
    g, budget = model_size.GIB, gpu_memory(gpu)
    largest = {xla: model_size.largest_batch(w.bert_config, budget.allocator_bytes,
                                             w.seq_length, w.max_predictions_per_seq,
                                             w.precision, xla, accumulation > 1)
               for xla in (True, False)}
    print(f"memory per GPU: {m.total / g:.1f} GiB at batch {w.batch_size} (weights+grads+"
          f"optimizer+accumulation {(m.total - m.activations - m.workspace) / g:.1f}, "
          f"activations {m.activations / g:.1f}, workspace {m.workspace / g:.0f}, XLA "
          f"{'on' if w.use_xla else 'off'}) of {gpu.name}'s {budget.describe()}; largest "
          f"batch that fits: {largest[True]} with XLA, {largest[False]} without")


def print_step(row: PlanRow, workload, hardware):
    step, cluster = row.step, hardware.cluster(row.num_nodes)
    hop, bandwidth = performance.ring_bandwidth(cluster)
    print(f"one update on {row.num_nodes} node(s): compute {step.compute:.3g} s "
          f"({row.accumulation} x batch {row.batch_size}) + optimizer {step.update:.3g} s + "
          f"allreduce {step.allreduce:.3g} s = {step.seconds:.3g} s; bottleneck: "
          f"{step.bottleneck}")
    print(f"allreduce: {workload.gradient_bytes / 1e6:,.0f} MB of "
          f"{'fp16' if workload.fp16_allreduce else 'fp32'} gradients per update in a ring of "
          f"{cluster.num_gpus} GPUs, paced by the {hop} at {bandwidth / 1e9:.1f} GB/s achieved; "
          "after the last micro-batch (not overlapped)")
    needed = performance.negligible_accumulation(
        dataclasses.replace(workload, batch_size=row.batch_size), cluster, NEGLIGIBLE)
    print(f"communication and optimizer under {NEGLIGIBLE:.0%} of the step from accumulation "
          f">= {needed} at batch {row.batch_size} (this run: {row.accumulation})")


def print_table(rows: list[PlanRow]):
    print("nodes  GPUs  batch x accum   seq/s      efficiency  time to train       cost      "
          "step: compute/optimizer/allreduce")
    for r in rows:
        s = r.step
        shares = "/".join(f"{part / s.seconds:.0%}" for part in (s.compute, s.update, s.allreduce))
        print(f"{r.num_nodes:>5}  {r.num_gpus:>4}  {r.batch_size:>5} x {r.accumulation:<6} "
              f"{s.sequences_per_second:>9,.0f}  {r.efficiency:>9.1%}  "
              f"{format_duration(r.seconds):>18}  {_money(r.cost):>8}  {shares}"
              + ("  input-bound" if s.bottleneck == "input" else ""))


def print_plan(workload: performance.Workload, hardware: Hardware, num_nodes, global_batch,
               num_sequences, measured=None, measured_source=None, max_nodes=64) -> PlanRow:
    """Prints the plan for `num_nodes` and the table over node counts; returns its row."""
    gpu = hardware.gpu
    print(f"hardware: {num_nodes} node(s) x {hardware.description}")
    recipe_batch = workload.batch_size
    workload = dataclasses.replace(workload, batch_size=fitting_batch(workload, gpu))
    row = plan_row(workload, hardware, num_nodes, global_batch, num_sequences, measured)
    if workload.batch_size < recipe_batch:
        print(f"batch: {recipe_batch} per GPU does not fit in {gpu.name}'s "
              f"{gpu_memory(gpu).allocator_bytes / model_size.GIB:.1f} GiB for TensorFlow; "
              f"estimating --train_batch_size={row.batch_size} (more accumulation, same global "
              "batch)")
    per_gpu = dataclasses.replace(workload, batch_size=row.batch_size)
    one_gpu = measured or per_gpu.batch_size / performance.micro_step_seconds(per_gpu, gpu)
    peak = gpu.peak_tflops(workload.precision)
    print(f"per GPU: {one_gpu:,.1f} sequences/s at batch {row.batch_size}, "
          f"{workload.precision}, XLA {'on' if workload.use_xla else 'off'}; "
          f"{one_gpu * workload.flops_per_sequence / 1e12:.1f} TFLOP/s = "
          f"{one_gpu * workload.flops_per_sequence / 1e12 / peak:.0%} of {peak:g} peak")
    print(f"throughput confidence: "
          f"{performance.confidence(gpu, workload.precision, measured_source)}")
    print_memory(per_gpu, gpu, row.accumulation)
    print_step(row, workload, hardware)
    print(f"scaling efficiency: {row.efficiency:.1%} of {row.num_gpus} x one GPU; "
          f"{row.step.sequences_per_second:,.0f} sequences/s in all")
    price = ("no price: pass --price_per_hour" if hardware.price_per_node_hour is None else
             f"${hardware.price_per_node_hour:g} per node-hour")
    print(f"time to train: {format_duration(row.seconds)} ({row.seconds / 3600 * row.num_gpus:,.0f} "
          f"GPU-hours), cost {_money(row.cost)} ({price})")
    print(f"\nover node counts (global batch {global_batch}):")
    print_table(scaling_table(workload, hardware, global_batch, num_sequences, measured,
                              max(max_nodes, num_nodes)))
    return row
