"""Model-size arithmetic shared by `estimate` and `doctor`: parameters, training FLOPs and
the memory one GPU needs for a training step (and the largest per-GPU batch that fits)."""

import dataclasses
import math

from bert_tf.model.config import DTYPE_BYTES, BertConfig, BertConfigError, attention_probs_dtype
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


MIB = 1024**2
# Inside TensorFlow's allocator, beyond what the tensors count: cuBLAS/cuDNN workspaces and
# the BFC allocator's fragmentation.
WORKSPACE_BYTES = 1 * GIB


def activation_bytes_per_sequence(config: BertConfig, seq_length, max_predictions_per_seq,
                                  precision="fp32", use_xla=False) -> float:
    """Bytes one sequence keeps for the backward pass (the count in docs/memory.md).

    Counted from bert_tf/model/modeling.py under TensorFlow 2.21: attention probabilities
    in attention_probs_dtype (the one place the model takes it from) and a compute-dtype
    copy through dropout; dropout keeps a bool mask (modeling.stateless_dropout selects with
    where_v2, whose gradient reads only the condition); LayerNorm casts its input to float32
    and its unfused ops keep the input, x - mean and the normalised x; the GELU's gradient
    recomputes from its input, so it keeps that and its output for the next matmul. XLA fuses
    the elementwise chains: one float32 LayerNorm input is what it keeps. Plus the gradients
    of one layer's attention alive during its backward pass (float32 probabilities' gradient
    and the scores' gradient)."""
    if precision not in PRECISION_MODES:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_MODES)}, "
                         f"got {precision!r}")
    mode = PRECISION_MODES[precision]
    k = mode.activation_bytes
    p = DTYPE_BYTES[attention_probs_dtype(mode.compute_dtype)]
    h, i, s = config.hidden_size, config.intermediate_size, seq_length
    attention_elements = config.num_attention_heads * s * s
    layer_norms = 2 * 4 * h if use_xla else 2 * 3 * 4 * h
    gelu = 2 * i * k
    per_token = 6 * h * k + 2 * h + layer_norms + gelu
    layer = s * per_token + attention_elements * (p + 1 + k)
    embeddings = s * (3 * 4 * h + h)  # float32 LayerNorm + dropout mask
    mlm_head = max_predictions_per_seq * (4 * h * k + 3 * 4 * h + 8 * config.vocab_size)
    backward = attention_elements * (4 + k)
    return config.num_hidden_layers * layer + embeddings + mlm_head + backward


def estimate_memory(config: BertConfig, batch_size, seq_length, max_predictions_per_seq,
                    precision="fp32", num_accumulation_steps=1, use_xla=False) -> MemoryEstimate:
    """Bytes per device for one training step (the count in docs/memory.md)."""
    per_sequence = activation_bytes_per_sequence(config, seq_length, max_predictions_per_seq,
                                                 precision, use_xla)
    params = count_parameters(config)
    half = PRECISION_MODES[precision].activation_bytes < 4
    return MemoryEstimate(
        weights=params * (6 if half else 4),
        gradients=params * 4,
        optimizer_slots=params * 8,
        accumulation=params * 4 if num_accumulation_steps > 1 else 0,
        activations=int(batch_size * per_sequence),
        workspace=WORKSPACE_BYTES,
    )


def largest_batch(config: BertConfig, memory_bytes, seq_length, max_predictions_per_seq,
                  precision="fp32", use_xla=False, accumulate=True) -> int:
    """The largest per-GPU batch whose estimate fits in `memory_bytes` (0: none fits)."""
    fixed = estimate_memory(config, 0, seq_length, max_predictions_per_seq, precision,
                            2 if accumulate else 1, use_xla).total
    per_sequence = activation_bytes_per_sequence(config, seq_length, max_predictions_per_seq,
                                                 precision, use_xla)
    return max(0, math.floor((memory_bytes - fixed) / per_sequence))
