"""The doctor's checks of a training run: run_pretraining's flags, the bert_config_file and
the TFRecords, tensor-core shapes, sequence length, max_predictions_per_seq, memory per GPU,
--deterministic with XLA and half precision on a CPU."""

import dataclasses
import os

from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.tools import model_size
from bert_tf.tools.device_memory import DeviceMemory
from bert_tf.tools.doctor_check import FAIL, OK, WARN, Check
from bert_tf.train.config import (
    PRECISION_MODES,
    PretrainingConfig,
    PretrainingConfigError,
    xla_cpu_float32_output_matmuls,
)


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
                 gpu: DeviceMemory | None) -> Check:
    """The training step's memory estimate against what TensorFlow's allocator gets on the
    GPU (bert_tf.tools.device_memory: memory less CUDA context and TensorFlow's reserve)."""
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
                 f"{config.precision}, XLA {'on' if config.use_xla else 'off'}; the formula: "
                 "docs/memory.md)")
    if gpu is None:
        return Check(OK, name, breakdown + "; no GPU memory known (pass --gpu_memory_gb)")
    if m.total <= gpu.allocator_bytes:
        return Check(OK, name, f"{breakdown} <= {gpu.describe()}")
    fitting = model_size.largest_batch(bert_config, gpu.allocator_bytes, config.max_seq_length,
                                       config.max_predictions_per_seq, config.precision,
                                       config.use_xla, config.num_accumulation_steps > 1)
    if fitting >= 8:
        fitting -= fitting % 8  # keep tensor-core friendly shapes
    precision_hint = ("" if PRECISION_MODES[config.precision].activation_bytes < 4
                      else ", or use --precision=fp16 (halves activations)")
    fix = (f"lower --train_batch_size to about {fitting} and raise --num_accumulation_steps to "
           f"keep the global batch{precision_hint}" if fitting else
           "it does not fit even at batch 1: use a GPU with more memory, a shorter "
           f"--max_seq_length{precision_hint}")
    return Check(WARN, name, f"{breakdown} > {gpu.describe()}: likely out of memory", fix)


# ONEDNN_MAX_CPU_ISA's names in oneDNN's order (dnnl_cpu_isa_t in its dnnl_types.h; some levels
# have two names), and the lowest cap at which oneDNN still runs each native half-precision
# instruction set of /proc/cpuinfo; under a lower cap it emulates that precision.
ONEDNN_ISA_LEVELS = {name: level for level, names in enumerate((
    ("SSE41",), ("AVX",), ("AVX2",), ("AVX2_VNNI",), ("AVX2_VNNI_2",), ("AVX512_CORE",),
    ("AVX512_CORE_VNNI",), ("AVX512_CORE_BF16",), ("AVX10_1_512", "AVX512_CORE_FP16"),
    ("AVX10_1_512_AMX", "AVX512_CORE_AMX"), ("AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16")))
    for name in names}
HALF_PRECISION_ISA = {"avx512_bf16": "AVX512_CORE_BF16", "avx512_fp16": "AVX512_CORE_FP16",
                      "amx_bf16": "AVX512_CORE_AMX", "amx_fp16": "AVX512_CORE_AMX_FP16"}


def cpu_flags(cpuinfo="/proc/cpuinfo", max_isa=None) -> set:
    """The CPU's flags (/proc/cpuinfo), less the half-precision ones oneDNN may not use under
    the cap `max_isa` (default: $ONEDNN_MAX_CPU_ISA; unset, ALL or unknown: no cap)."""
    flags = set()
    try:
        with open(cpuinfo) as f:
            flags = next((set(line.partition(":")[2].split()) for line in f
                          if line.startswith("flags")), set())
    except OSError:
        pass
    cap = ONEDNN_ISA_LEVELS.get(
        (os.environ.get("ONEDNN_MAX_CPU_ISA", "") if max_isa is None else max_isa).upper())
    if cap is not None:
        flags -= {flag for flag, isa in HALF_PRECISION_ISA.items()
                  if ONEDNN_ISA_LEVELS[isa] > cap}
    return flags


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


def check_deterministic_xla(config: PretrainingConfig) -> Check:
    """--deterministic with --use_xla: XLA's GPU compiler, asked for determinism, expands
    scatters whose float adds could run in any order (ScatterExpander's
    kEliminateIndeterministicScatters, in XLA's gpu_compiler.cc) into a loop over the scattered
    rows, one after another: the gradients of the embedding lookups (a row per token) and of
    the masked-LM gather. Newer XLA first tries a sort-based expansion
    (ScatterDeterminismExpander), which early versions applied only to one-element rows."""
    name = "--deterministic with --use_xla"
    if not (config.deterministic and config.use_xla):
        return Check(OK, name, "not both set")
    rows = config.train_batch_size * config.max_seq_length
    return Check(WARN, name, f"on a GPU, XLA turns the embedding gradients' scatter-adds "
                 f"({rows:,} token rows per micro-batch at --train_batch_size="
                 f"{config.train_batch_size} x --max_seq_length={config.max_seq_length}, for "
                 "each embedding table, plus the masked-LM gather's) into sequential loops: "
                 "expect slower updates (not measured: no GPU has run it; docs/running.md)",
                 "use --deterministic for a reproducible debugging run, not for the full "
                 "training; or drop --use_xla with it (TensorFlow has deterministic GPU kernels "
                 "for these)")


def training_checks(config: PretrainingConfig, bert_config: BertConfig | None,
                    masked_lm_prob: float, gpu: DeviceMemory | None) -> list[Check]:
    return [check_sequence_length(config, bert_config),
            check_tensor_core_shapes(config, bert_config),
            check_max_predictions(config, masked_lm_prob),
            check_memory(config, bert_config, gpu),
            check_deterministic_xla(config)]
