r"""Time-to-train and cost estimate for BERT pretraining, plus the model-size
arithmetic (parameters, FLOPs, memory per device) that bert_tf.tools.doctor reuses.

    python -m bert_tf estimate --model=large --max_seq_length=128 \
        --num_train_steps=7038 --global_batch_size=65536 \
        --num_devices=8 --sequences_per_second=200 --price_per_device_hour=2.5

Time = sequences / (per-device throughput * devices * efficiency): it assumes
data-parallel training scales linearly with the device count, discounted by the
efficiency factor (allreduce and input overhead), which is what Horovod gets on
a fast interconnect with gradient accumulation.
"""

import dataclasses
import json
import math

from absl import flags

import bert_tf
from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.train.config import PRECISION_MODES

GIB = 1024**3

# Google's published BERT sizes (uncased vocab).
MODEL_PRESETS = {
    "tiny": BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=512),
    "base": BertConfig(vocab_size=30522),
    "large": BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                        num_attention_heads=16, intermediate_size=4096),
}


def load_model_config(bert_config_file=None, model=None):
    """bert_config.json if given, else a named preset; BertConfigError otherwise."""
    if bert_config_file:
        return BertConfig.from_json_file(bert_config_file)
    if model in MODEL_PRESETS:
        return MODEL_PRESETS[model]
    raise BertConfigError(
        f"no model given: pass --bert_config_file=path/bert_config.json or "
        f"--model={'|'.join(MODEL_PRESETS)} (got --model={model!r})")


def count_parameters(config: BertConfig) -> int:
    """Trainable parameters of BertForPreTraining (encoder, pooler, MLM and NSP heads)."""
    h, i = config.hidden_size, config.intermediate_size
    embeddings = (config.vocab_size + config.max_position_embeddings
                  + config.type_vocab_size) * h + 2 * h
    attention = 4 * (h * h + h) + 2 * h
    feed_forward = (h * i + i) + (i * h + h) + 2 * h
    encoder = config.num_hidden_layers * (attention + feed_forward)
    pooler = h * h + h
    # MLM transform (dense + LayerNorm) and output bias (the decoder is tied to the
    # word embeddings); NSP classifier.
    heads = (h * h + h + 2 * h) + config.vocab_size + (2 * h + 2)
    return embeddings + encoder + pooler + heads


def training_flops_per_sequence(config: BertConfig, seq_length, max_predictions_per_seq):
    """Floating-point operations of one training step (forward + backward = 3x forward)
    for one sequence: 2 FLOPs per multiply-add of every matmul, attention scores and
    context (4*s^2*H per layer), and the MLM head on the predicted positions only."""
    h, i, s = config.hidden_size, config.intermediate_size, seq_length
    per_layer = 2 * s * (4 * h * h + 2 * h * i) + 4 * s * s * h
    mlm_head = 2 * max_predictions_per_seq * (h * h + h * config.vocab_size)
    forward = config.num_hidden_layers * per_layer + 2 * h * h + mlm_head
    return 3 * forward


@dataclasses.dataclass
class MemoryEstimate:
    weights: int
    gradients: int
    optimizer_slots: int
    accumulation: int
    activations: int
    workspace: int

    @property
    def total(self) -> int:
        return sum(dataclasses.astuple(self))


# CUDA context, cuBLAS/cuDNN workspaces and allocator fragmentation.
WORKSPACE_BYTES = 1 * GIB

MEMORY_FORMULA = (
    "weights 4P (+2P half copies under fp16/bf16/amp) + grads 4P + LAMB/Adam slots 8P "
    "+ accumulation 4P (if accumulating) + activations L*b*s*H*(34+5*A*s/H)*k/2 "
    "(Korthikanti et al. 2022, k = bytes per activation, no recomputation, no XLA fusion) "
    "+ MLM logits b*P*V*8 + 1 GiB workspace"
)


def estimate_memory(config: BertConfig, batch_size, seq_length, max_predictions_per_seq,
                    precision="fp32", num_accumulation_steps=1) -> MemoryEstimate:
    """Upper-bound bytes per device for one training step (see MEMORY_FORMULA)."""
    if precision not in PRECISION_MODES:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_MODES)}, "
                         f"got {precision!r}")
    params = count_parameters(config)
    activation_bytes = PRECISION_MODES[precision].activation_bytes
    half = activation_bytes < 4
    b, s, h = batch_size, seq_length, config.hidden_size
    a = config.num_attention_heads
    # 34*s*b*h + 5*a*s^2*b bytes per layer with 2-byte activations (1-byte dropout masks).
    per_layer_half = 34 * s * b * h + 5 * a * s * s * b
    activation_scale = activation_bytes / 2
    activations = config.num_hidden_layers * per_layer_half * activation_scale
    activations += b * max_predictions_per_seq * config.vocab_size * 8  # fp32 logits + grads
    return MemoryEstimate(
        weights=params * (6 if half else 4),
        gradients=params * 4,
        optimizer_slots=params * 8,
        accumulation=params * 4 if num_accumulation_steps > 1 else 0,
        activations=int(activations),
        workspace=WORKSPACE_BYTES,
    )


class EstimateError(ValueError):
    """Bad estimator input; the message names the flag or file."""


def throughput_from_metrics(path, num_devices=None, skip_first=1):
    """Mean sequences/second per device over a metrics.jsonl from a short run.

    Its `sequences_per_second` counts all ranks together; the rank count comes from
    each record's `num_ranks` or else `num_devices`. The first `skip_first` records
    (tracing/compilation) are skipped when there are more."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except FileNotFoundError:
        raise EstimateError(f"--metrics_file={path}: file not found") from None
    except IsADirectoryError:
        raise EstimateError(f"--metrics_file={path} is a directory; pass the metrics.jsonl in "
                            "it") from None
    for line_number, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if line_number == lines[-1][0] and not line.endswith("\n"):
                continue  # the last line, cut short by a kill mid-write
            raise EstimateError(f"{path}:{line_number}: not JSON ({e})") from None
        if "sequences_per_second" in record:
            records.append(record)
    if not records:
        raise EstimateError(
            f"--metrics_file={path}: no record has 'sequences_per_second'; pass a metrics.jsonl "
            "written by run_pretraining.py, or --sequences_per_second")
    if len(records) > skip_first:
        records = records[skip_first:]
    per_device = []
    for record in records:
        ranks = record.get("num_ranks", num_devices)
        if not ranks:
            raise EstimateError(
                f"--metrics_file={path} does not say how many ranks ran: pass "
                "--metrics_num_devices (the -np of that run)")
        per_device.append(record["sequences_per_second"] / ranks)
    return sum(per_device) / len(per_device)


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


def format_duration(seconds):
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 86400:.2f} days ({seconds / 3600:.1f} h)"


@dataclasses.dataclass
class EstimateConfig:
    """The estimator's inputs (its flags): the model, the amount of training, the throughput."""

    bert_config_file: str | None = None
    model: str | None = None
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
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


def define_flags():
    """Defines the estimator's flags (defaults from EstimateConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(EstimateConfig)}
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
    flags.DEFINE_enum("model", None, list(MODEL_PRESETS),
                      "Named BERT size when there is no --bert_config_file.")
    flags.DEFINE_integer("max_seq_length", d["max_seq_length"], "Sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", d["max_predictions_per_seq"],
                         "Masked positions per sequence.")
    flags.DEFINE_float("num_sequences", None, "Training sequences in total (all epochs).")
    flags.DEFINE_float("corpus_tokens", None,
                       "Corpus size in WordPiece tokens (with --epochs, instead of "
                       "--num_sequences).")
    flags.DEFINE_float("epochs", d["epochs"], "Passes over --corpus_tokens.")
    flags.DEFINE_integer("num_train_steps", None,
                         "Optimizer steps (with --global_batch_size, instead of --num_sequences).")
    flags.DEFINE_integer("global_batch_size", None, "Sequences per optimizer step, all devices.")
    flags.DEFINE_integer("num_devices", d["num_devices"],
                         "GPUs (or CPU processes) training together.")
    flags.DEFINE_float("sequences_per_second", None, "Measured throughput of ONE device.")
    flags.DEFINE_string("metrics_file", None,
                        "metrics.jsonl of a short run_pretraining.py run (instead of "
                        "--sequences_per_second); per-device throughput is read from it.")
    flags.DEFINE_integer("metrics_num_devices", None,
                         "Ranks of the run that wrote --metrics_file, when its records do not "
                         "say (num_ranks).")
    flags.DEFINE_float("efficiency", None,
                       "Scaling efficiency in (0, 1]; default 1.0 for one device, 0.9 for more.")
    flags.DEFINE_float("price_per_device_hour", None, "Price of one device-hour, for the cost.")
    flags.DEFINE_float("peak_tflops", None,
                       "Peak TFLOP/s of one device, to print model FLOPs utilisation.")


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


def print_estimate(config: EstimateConfig) -> TrainingEstimate:
    """Prints the estimate; EstimateError or BertConfigError on bad input."""
    bert_config = load_model_config(config.bert_config_file, config.model)
    sequences, how = number_of_sequences(config)
    if config.num_devices < 1:
        raise EstimateError(f"--num_devices must be >= 1, got {config.num_devices}")
    if (config.sequences_per_second is None) == (config.metrics_file is None):
        raise EstimateError("give the throughput exactly one way: --sequences_per_second "
                            "(per device) or --metrics_file=output_dir/metrics.jsonl")
    if config.metrics_file:
        per_device = throughput_from_metrics(config.metrics_file, config.metrics_num_devices)
        source = f"measured in {config.metrics_file}"
    else:
        per_device = config.sequences_per_second
        source = "--sequences_per_second"
    if per_device <= 0:
        raise EstimateError(f"throughput must be positive, got {per_device}")
    efficiency = (default_efficiency(config.num_devices) if config.efficiency is None
                  else config.efficiency)
    if not 0 < efficiency <= 1:
        raise EstimateError(f"--efficiency must be in (0, 1], got {efficiency}")

    estimate = TrainingEstimate(sequences, per_device, config.num_devices, efficiency)
    flops = training_flops_per_sequence(bert_config, config.max_seq_length,
                                        config.max_predictions_per_seq)
    achieved_tflops = per_device * flops / 1e12
    print(f"model: L={bert_config.num_hidden_layers} H={bert_config.hidden_size} "
          f"A={bert_config.num_attention_heads} vocab={bert_config.vocab_size}, "
          f"{count_parameters(bert_config) / 1e6:.1f}M parameters, seq {config.max_seq_length}")
    print(f"training: {sequences:.4g} sequences ({how}), "
          f"{sequences * config.max_seq_length:.4g} tokens")
    print(f"throughput: {per_device:.4g} sequences/s per device ({source}), "
          f"{achieved_tflops:.3g} model TFLOP/s per device "
          f"({flops / 1e9:.3g} GFLOP per sequence)")
    if config.peak_tflops:
        print(f"model FLOPs utilisation: {100 * achieved_tflops / config.peak_tflops:.1f}% "
              f"of {config.peak_tflops:g} TFLOP/s")
    print(f"assumption: linear data-parallel scaling over {config.num_devices} device(s) "
          f"x efficiency {efficiency:g} = {estimate.sequences_per_second:.4g} sequences/s")
    print(f"time to train: {format_duration(estimate.seconds)}, "
          f"{estimate.device_hours:.1f} device-hours")
    if config.price_per_device_hour is not None:
        print(f"cost: {estimate.cost(config.price_per_device_hour):,.2f} at "
              f"{config.price_per_device_hour:g} per device-hour")
    return estimate


def run(config: EstimateConfig) -> int:
    print_estimate(config)
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, EstimateConfig, run,
                        errors=(EstimateError, BertConfigError), error_status=2)

