r"""Time-to-train and cost estimate for BERT pretraining, before renting the machine.

    # a recipe on 4 AWS p4d.24xlarge nodes: modelled throughput, allreduce, memory, cost
    python -m bert_tf estimate --instance=p4d.24xlarge --num_nodes=4 \
        --recipe=launch/recipes/bert_large_phase1.flags
    python -m bert_tf estimate --gpu=v100-32gb --gpus_per_node=4 --recipe=...
    # a measured throughput (per GPU) replaces the compute model
    python -m bert_tf estimate --instance=p4d.24xlarge --recipe=... \
        --metrics_file=short_run/metrics.jsonl --metrics_num_devices=8
    # without hardware: linear scaling of a throughput you give, times an efficiency
    python -m bert_tf estimate --model=large --num_train_steps=7038 \
        --global_batch_size=65536 --num_devices=8 --sequences_per_second=200

With --instance or --gpu the step time is modelled (bert_tf/tools/performance.py:
compute, optimizer update, ring allreduce, input) and printed for the requested
node count and as a table over node counts. The presets are bert_tf/tools/hardware.py;
the model's error against NVIDIA's published tables is bench/estimate_vs_published.py.
"""

import dataclasses
import math

from absl import flags

import bert_tf
from bert_tf.model.config import BertConfigError
from bert_tf.tools import hardware, performance, plan, recipe
from bert_tf.tools.estimate_inputs import (
    NUMERIC_FLAGS,
    EstimateError,
    check_numbers,
    throughput_from_metrics,
)
from bert_tf.tools.model_size import (
    MODEL_PRESETS,
    count_parameters,
    load_model_config,
    training_flops_per_sequence,
)
from bert_tf.train.config import PRECISIONS


@dataclasses.dataclass
class TrainingEstimate:
    num_sequences: float
    sequences_per_second_per_device: float
    num_devices: int
    efficiency: float

    @property
    def sequences_per_second(self):
        return self.sequences_per_second_per_device * self.num_devices * self.efficiency

    @property
    def seconds(self):
        return self.num_sequences / self.sequences_per_second

    @property
    def hours(self):
        return self.seconds / 3600

    @property
    def device_hours(self):
        return self.hours * self.num_devices

    def cost(self, price_per_device_hour):
        return self.device_hours * price_per_device_hour


def default_efficiency(num_devices):
    return 1.0 if num_devices == 1 else 0.9


@dataclasses.dataclass
class EstimateConfig:
    """The estimator's inputs (its flags): the model, the amount of training, the throughput
    or the hardware. None: from --recipe, else run_pretraining.py's default."""

    bert_config_file: str | None = None
    model: str | None = None
    max_seq_length: int | None = None
    max_predictions_per_seq: int | None = None
    num_sequences: float | None = None
    corpus_tokens: float | None = None
    epochs: float = 1.0
    num_train_steps: int | None = None
    global_batch_size: int | None = None
    num_devices: int = 1
    sequences_per_second: float | None = None
    metrics_file: str | None = None
    metrics_num_devices: int | None = None
    efficiency: float | None = None
    price_per_device_hour: float | None = None
    peak_tflops: float | None = None
    recipe: str | None = None
    instance: str | None = None
    gpu: str | None = None
    gpus_per_node: int | None = None
    num_nodes: int = 1
    network_gbps: float | None = None
    price_per_hour: float | None = None
    train_batch_size: int | None = None
    num_accumulation_steps: int | None = None
    precision: str | None = None
    use_xla: bool | None = None
    fp16_allreduce: bool | None = None
    max_nodes: int = 64
    list_gpus: bool = False


def checked_config(config: EstimateConfig) -> EstimateConfig:
    """The config with its --recipe's values filled in, every number checked (the flags'
    first, then the recipe's): EstimateError or recipe.RecipeError naming the flag."""
    check_numbers(dataclasses.asdict(config), NUMERIC_FLAGS)
    filled = recipe.with_recipe(config)
    if config.recipe:
        check_numbers(dataclasses.asdict(filled), NUMERIC_FLAGS, where=f"--recipe={config.recipe}: ")
    if filled.max_predictions_per_seq > filled.max_seq_length:
        raise EstimateError(f"--max_predictions_per_seq={filled.max_predictions_per_seq} "
                            f"exceeds --max_seq_length={filled.max_seq_length}")
    return filled


def define_flags():
    """Defines the estimator's flags (defaults from EstimateConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(EstimateConfig)}
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
    flags.DEFINE_enum("model", None, list(MODEL_PRESETS),
                      "Named BERT size when there is no --bert_config_file.")
    flags.DEFINE_integer("max_seq_length", None, "Sequence length (default: recipe's, or 128).")
    flags.DEFINE_integer("max_predictions_per_seq", None,
                         "Masked positions per sequence (default: recipe's, or 20).")
    flags.DEFINE_float("num_sequences", None, "Training sequences in total (all epochs).")
    flags.DEFINE_float("corpus_tokens", None,
                       "Corpus size in WordPiece tokens (with --epochs, instead of "
                       "--num_sequences).")
    flags.DEFINE_float("epochs", d["epochs"], "Passes over --corpus_tokens.")
    flags.DEFINE_integer("num_train_steps", None,
                         "Optimizer steps (with --global_batch_size, instead of --num_sequences).")
    flags.DEFINE_integer("global_batch_size", None, "Sequences per optimizer step, all devices.")
    flags.DEFINE_integer("num_devices", d["num_devices"],
                         "GPUs (or CPU processes) training together, without --instance/--gpu.")
    flags.DEFINE_float("sequences_per_second", None, "Measured throughput of ONE device.")
    flags.DEFINE_string("metrics_file", None,
                        "metrics.jsonl of a short run_pretraining.py run (instead of "
                        "--sequences_per_second); per-device throughput is read from it.")
    flags.DEFINE_integer("metrics_num_devices", None,
                         "Ranks of the run that wrote --metrics_file, when its records do not "
                         "say (num_ranks).")
    flags.DEFINE_float("efficiency", None,
                       "Scaling efficiency in (0, 1] without --instance/--gpu; default 1.0 for "
                       "one device, 0.9 for more.")
    flags.DEFINE_float("price_per_device_hour", None, "Price of one device-hour, for the cost.")
    flags.DEFINE_float("peak_tflops", None,
                       "Peak TFLOP/s of one device, to print model FLOPs utilisation.")
    _define_hardware_flags(d)


def _define_hardware_flags(d):
    flags.DEFINE_string("recipe", None,
                        "run_pretraining flagfile (launch/recipes/*.flags): model, lengths, "
                        "batch, accumulation, steps, precision; other flags override it.")
    flags.DEFINE_string("instance", None, "Cloud instance preset: " + ", ".join(hardware.INSTANCES))
    flags.DEFINE_string("gpu", None, "GPU preset (instead of --instance): " + ", ".join(hardware.GPUS))
    flags.DEFINE_integer("gpus_per_node", None, "GPUs per node (default: the instance's, or 1).")
    flags.DEFINE_integer("num_nodes", d["num_nodes"], "Nodes (instances) training together.")
    flags.DEFINE_float("network_gbps", None,
                       "Network bandwidth per node in Gbit/s (default: the instance's, or 100).")
    flags.DEFINE_float("price_per_hour", None,
                       "Price of one node (instance) per hour; default: the preset's on-demand "
                       "list price.")
    flags.DEFINE_integer("train_batch_size", None, "Sequences per GPU per micro-batch.")
    flags.DEFINE_integer("num_accumulation_steps", None, "Micro-batches per update.")
    flags.DEFINE_enum("precision", None, list(PRECISIONS), "As run_pretraining.py's.")
    flags.DEFINE_bool("use_xla", None, "As run_pretraining.py's.")
    flags.DEFINE_bool("fp16_allreduce", None, "As run_pretraining.py's.")
    flags.DEFINE_integer("max_nodes", d["max_nodes"], "Largest node count in the table.")
    flags.DEFINE_bool("list_gpus", d["list_gpus"],
                      "Print the GPU presets, their memory for TensorFlow and how sure each "
                      "one's modelled throughput is (measured / fitted / borrowed), then exit.")


def number_of_sequences(config: EstimateConfig):
    """(sequences, how they were counted) from whichever one way the config gives."""
    given = [name for name in ("num_sequences", "corpus_tokens", "num_train_steps")
             if getattr(config, name) is not None]
    if len(given) != 1:
        raise EstimateError(
            "give the amount of training exactly one way: --num_sequences, or "
            "--corpus_tokens with --epochs, or --num_train_steps with --global_batch_size "
            f"(got {', '.join('--' + g for g in given) or 'none'})")
    if config.num_sequences is not None:
        sequences = config.num_sequences
        how = f"--num_sequences={sequences:g}"
    elif config.corpus_tokens is not None:
        sequences = config.corpus_tokens * config.epochs / config.max_seq_length
        how = (f"{config.corpus_tokens:g} tokens x {config.epochs:g} epochs / "
               f"{config.max_seq_length} tokens per sequence")
    else:
        if config.global_batch_size is None:
            raise EstimateError("--num_train_steps needs --global_batch_size")
        sequences = float(config.num_train_steps) * config.global_batch_size
        how = f"{config.num_train_steps} steps x {config.global_batch_size} sequences"
    if not 0 < sequences < math.inf:  # also refuses nan
        raise EstimateError(f"the number of sequences must be positive and finite ({how})")
    return sequences, how


def measured_throughput(config: EstimateConfig):
    """(per-device sequences/s, where it comes from), or (None, None) without one."""
    if config.sequences_per_second is not None and config.metrics_file is not None:
        raise EstimateError("give the throughput one way: --sequences_per_second (per device) "
                            "or --metrics_file=output_dir/metrics.jsonl, not both")
    if config.metrics_file:
        per_device = throughput_from_metrics(config.metrics_file, config.metrics_num_devices)
        source = f"measured in {config.metrics_file}"
    elif config.sequences_per_second is not None:
        per_device, source = config.sequences_per_second, "--sequences_per_second"
    else:
        return None, None
    return per_device, source


def print_model_and_training(bert_config, config: EstimateConfig):
    """Prints the model and amount-of-training lines; returns the number of sequences."""
    sequences, how = number_of_sequences(config)
    print(f"model: L={bert_config.num_hidden_layers} H={bert_config.hidden_size} "
          f"A={bert_config.num_attention_heads} vocab={bert_config.vocab_size}, "
          f"{count_parameters(bert_config) / 1e6:.1f}M parameters, seq {config.max_seq_length}")
    print(f"training: {sequences:.4g} sequences ({how}), "
          f"{sequences * config.max_seq_length:.4g} tokens")
    return sequences


def print_estimate(config: EstimateConfig) -> TrainingEstimate:
    """Prints the estimate without hardware (a throughput you give, linear scaling times an
    efficiency); EstimateError or BertConfigError on bad input."""
    config = checked_config(config)
    bert_config = load_model_config(config.bert_config_file, config.model)
    number_of_sequences(config)  # its errors before the throughput's
    per_device, source = measured_throughput(config)
    if per_device is None:
        raise EstimateError("give the throughput exactly one way: --sequences_per_second "
                            "(per device) or --metrics_file=output_dir/metrics.jsonl; or "
                            "give the hardware (--instance or --gpu) to have it modelled")
    efficiency = (default_efficiency(config.num_devices) if config.efficiency is None
                  else config.efficiency)

    sequences = print_model_and_training(bert_config, config)
    estimate = TrainingEstimate(sequences, per_device, config.num_devices, efficiency)
    flops = training_flops_per_sequence(bert_config, config.max_seq_length,
                                        config.max_predictions_per_seq)
    achieved_tflops = per_device * flops / 1e12
    print(f"throughput: {per_device:.4g} sequences/s per device ({source}), "
          f"{achieved_tflops:.3g} model TFLOP/s per device "
          f"({flops / 1e9:.3g} GFLOP per sequence)")
    if config.peak_tflops:
        print(f"model FLOPs utilisation: {100 * achieved_tflops / config.peak_tflops:.1f}% "
              f"of {config.peak_tflops:g} TFLOP/s")
    print(f"assumption: linear data-parallel scaling over {config.num_devices} device(s) "
          f"x efficiency {efficiency:g} = {estimate.sequences_per_second:.4g} sequences/s")
    print(f"time to train: {plan.format_duration(estimate.seconds)}, "
          f"{estimate.device_hours:.1f} device-hours")
    if config.price_per_device_hour is not None:
        print(f"cost: {estimate.cost(config.price_per_device_hour):,.2f} at "
              f"{config.price_per_device_hour:g} per device-hour")
    return estimate


def print_hardware_estimate(config: EstimateConfig) -> plan.PlanRow:
    """Prints the modelled estimate on --instance or --gpu nodes (bert_tf.tools.plan)."""
    config = checked_config(config)
    if config.num_devices != 1 or config.efficiency is not None or config.peak_tflops:
        raise EstimateError("--num_devices, --efficiency and --peak_tflops are for the estimate "
                            "without hardware; with --instance/--gpu give --gpus_per_node and "
                            "--num_nodes (the efficiency and the peak come from the model)")
    if config.train_batch_size is None:
        raise EstimateError("--instance/--gpu need the per-GPU batch: --train_batch_size or "
                            "--recipe")
    bert_config = load_model_config(config.bert_config_file, config.model)
    per_device, source = measured_throughput(config)
    node = plan.resolve_hardware(config.instance, config.gpu, config.gpus_per_node,
                                 config.network_gbps, config.price_per_hour,
                                 config.price_per_device_hour)
    gpus = node.gpus_per_node * config.num_nodes
    global_batch = config.global_batch_size or (
        config.train_batch_size * config.num_accumulation_steps * gpus)
    if gpus > global_batch:
        raise EstimateError(
            f"--num_nodes={config.num_nodes} x {node.gpus_per_node} GPUs per node = {gpus} GPUs "
            f"exceed the global batch of {global_batch} sequences (each GPU needs one per "
            "update): use fewer nodes or a larger --global_batch_size")
    if config.num_sequences is None and config.corpus_tokens is None:
        config = dataclasses.replace(config, global_batch_size=global_batch)
    workload = performance.Workload(bert_config, config.max_seq_length,
                                    config.max_predictions_per_seq, config.train_batch_size,
                                    config.precision, config.use_xla, config.fp16_allreduce)
    node.gpu.peak_tflops(config.precision)  # ValueError: no such unit on this GPU
    sequences = print_model_and_training(bert_config, config)
    return plan.print_plan(workload, node, config.num_nodes, global_batch, sequences,
                           per_device, source, config.max_nodes)


def run(config: EstimateConfig) -> int:
    if config.list_gpus:
        plan.print_gpu_presets(config.precision or "fp16")
    elif config.instance or config.gpu:
        print_hardware_estimate(config)
    else:
        print_estimate(config)
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, EstimateConfig, run,
                        errors=(EstimateError, BertConfigError, hardware.HardwareError,
                                recipe.RecipeError), error_status=2)
