"""BERT (Devlin et al., 2018) as plain tf.Modules, with Google's checkpoint names.

Keras-free on purpose: Horovod cannot handle Keras 3 variables. Variables are
float32; with compute_dtype float16/bfloat16 the matmuls run in that dtype while
LayerNorm, the pretraining logits and the losses stay float32, and the attention
softmax normalises in float32 but keeps its probabilities in the compute dtype
(`attention_probabilities`).
Activations are kept as [batch * seq, hidden] matrices between layers (as in
Google's modeling.py) so every dense layer is one 2-D matmul.
"""

import math
import re
from typing import NamedTuple

import tensorflow as tf

from bert_tf.model.config import BertConfig, attention_probs_dtype

LAYER_NORM_EPSILON = 1e-12
# Added to attention scores of padding positions; exp() of it underflows to 0.
MASK_ADDER = -10000.0

# XLA's CPU backend computes a bfloat16 x bfloat16 -> bfloat16 dot in float32 (its
# float-normalization-bf16 pass upcasts the operands) but runs bfloat16 x bfloat16 -> float32
# natively: set_float32_matmul_outputs(True) makes bfloat16 matmuls that XLA compiles produce
# float32 and round it to bfloat16 (bench/README.md, "bf16 with XLA on a CPU").
_float32_matmul_outputs = False


def set_float32_matmul_outputs(enabled: bool) -> None:
    """Whether XLA-compiled bfloat16 matmuls produce float32 from now on (at trace time).

    bert_tf.train.precision decides (bf16 with XLA on a CPU); outside XLA, which has no kernel
    for them, matmuls keep their dtype whatever this says.
    """
    global _float32_matmul_outputs
    _float32_matmul_outputs = enabled


def _in_xla_compilation() -> bool:
    # No public API tells whether a tf.function is traced for jit_compile.
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import control_flow_util
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


def matmul(a, b, transpose_b=False):
    """tf.matmul(a, b, transpose_b=transpose_b), possibly as float32-output dots.

    With set_float32_matmul_outputs(True), a bfloat16 product compiled by XLA, and the two
    products of its gradient, are bfloat16 x bfloat16 -> float32 dots rounded to bfloat16.

    Args:
      a: [..., M, K] tensor.
      b: [..., K, N] tensor ([..., N, K] with transpose_b), a's dtype and batch dimensions.
      transpose_b: multiply by b's transpose.

    Returns:
      The [..., M, N] product in a's dtype.
    """
    if not (_float32_matmul_outputs and a.dtype == tf.bfloat16 and _in_xla_compilation()):
        return tf.matmul(a, b, transpose_b=transpose_b)

    def dot(x, y, adj_x=False, adj_y=False):
        return tf.cast(tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=tf.float32, adj_x=adj_x,
                                                adj_y=adj_y), tf.bfloat16)

    @tf.custom_gradient
    def product(a, b):
        def gradient(upstream):
            if transpose_b:  # a @ b^T
                return dot(upstream, b), dot(upstream, a, adj_x=True)
            return dot(upstream, b, adj_y=True), dot(a, upstream, adj_x=True)
        return dot(a, b, adj_y=transpose_b), gradient
    return product(a, b)


def attention_probabilities(scores, adder):
    """softmax(scores + adder) over the last axis, in the scores' dtype.

    float32 scores: tf.nn.softmax. Half-precision scores (bfloat16, float16): the max-subtract,
    exponentials and sum run in float32 and the probabilities are rounded once to the compute
    dtype, which is all the backward pass keeps ([B, heads, S, S]: 2 bytes an element where
    TF's float32 softmax kept 4), like NVIDIA's masked softmax, whose fp16 probabilities feed
    dropout and the context matmul and are what its softmax gradient reads
    (DeepLearningExamples TensorFlow2/LanguageModeling/BERT/official/nlp/modeling/layers/
    masked_softmax.py and attention.py). The gradient, p * (g - sum(g * p)), sums in float32.

    Args:
      scores: [..., S] attention scores, float32/bfloat16/float16.
      adder: float32 tensor broadcastable to scores (0 for real tokens, MASK_ADDER for padding).

    Returns:
      Probabilities with scores' shape and dtype.
    """
    if scores.dtype == tf.float32:
        return tf.nn.softmax(scores + adder, axis=-1)

    @tf.custom_gradient
    def softmax(scores):
        probs = tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32) + adder, axis=-1),
                        attention_probs_dtype(scores.dtype.name))

        def gradient(upstream):
            p, g = tf.cast(probs, tf.float32), tf.cast(upstream, tf.float32)
            return tf.cast(p * (g - tf.reduce_sum(g * p, axis=-1, keepdims=True)), scores.dtype)
        return probs, gradient
    return softmax(scores)


def _float32_gelu(value, slope):
    """A GELU that computes in float32 whatever its input's dtype, with its derivative written
    out and recomputed from the input in the backward pass.

    Why: on CPUs TF's bfloat16 elementwise kernels cost about twice their float32 ones, and
    autodiff of tf.nn.gelu makes a dozen of them; this is 3 casts and a few float32 ops each way
    (BERT-base's [512, 3072] GELU, forward and backward: bench/model_pieces.py in
    bench/README.md). It is also closer to the float32 function than bfloat16 math.

    Args:
      value: float32 x -> GELU(x).
      slope: float32 x -> dGELU/dx.
    """
    @tf.custom_gradient
    def gelu(x):
        def gradient(upstream):
            x32 = tf.cast(x, tf.float32)
            return tf.cast(tf.cast(upstream, tf.float32) * slope(x32), x.dtype)
        return tf.cast(value(tf.cast(x, tf.float32)), x.dtype), gradient
    return gelu


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_GELU_CUBIC = 0.044715


def _tanh_gelu_parts(x):
    inner = _SQRT_2_OVER_PI * x * (1.0 + _TANH_GELU_CUBIC * x * x)
    return inner, tf.tanh(inner)


def _tanh_gelu_value(x):
    return 0.5 * x * (1.0 + _tanh_gelu_parts(x)[1])


def _tanh_gelu_slope(x):
    _, t = _tanh_gelu_parts(x)
    d_inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_GELU_CUBIC * x * x)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner


def _erf_gelu_value(x):
    return 0.5 * x * (1.0 + tf.math.erf(x * math.sqrt(0.5)))


def _erf_gelu_slope(x):
    density = tf.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return 0.5 * (1.0 + tf.math.erf(x * math.sqrt(0.5))) + x * density


ACTIVATIONS = {
    # Exact erf GELU: Google's first release (modeling.py at fe35475) and Hugging Face's "gelu".
    # Google's modeling.py uses the tanh approximation since bee6030 (Feb 2019); they differ by
    # at most 4.7e-4. We keep erf deliberately, so converted Hugging Face models reproduce
    # Hugging Face's outputs (tests/test_convert.py).
    "gelu": _float32_gelu(_erf_gelu_value, _erf_gelu_slope),
    # The tanh approximation under Hugging Face's name for it ("gelu_new"): what Google's
    # modeling.py computes for "gelu" today, Model Garden's BertEncoder (`_approx_gelu`) and
    # KerasHub's BertBackbone (`gelu_approximate`); cheaper than the erf.
    "gelu_new": _float32_gelu(_tanh_gelu_value, _tanh_gelu_slope),
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
    "linear": tf.identity,
}


class BertOutputs(NamedTuple):
    sequence_output: tf.Tensor  # [B, S, H]
    pooled_output: tf.Tensor  # [B, H]
    hidden_states: tuple  # embedding output, then each layer's output: [B, S, H]
    attention_probs: tuple | None  # per layer [B, heads, S, S] float32, if return_attention


class PreTrainingOutputs(NamedTuple):
    mlm_logits: tf.Tensor  # [B, P, V]
    nsp_logits: tf.Tensor  # [B, 2]
    bert: BertOutputs


class _NamedModule(tf.Module):
    """A module whose variables carry their full Google checkpoint names.

    `named_variables()` yields (name, variable) in definition order, which
    `variables_by_name` turns into the checkpoint dict.
    """

    def __init__(self, scope):
        super().__init__()
        self.scope = scope
        self._own = []  # (full name, variable), in creation order
        self._children = []

    def _add(self, name, shape, initializer):
        full_name = f"{self.scope}/{name}" if self.scope else name
        variable = tf.Variable(initializer(shape), name=full_name, dtype=tf.float32)
        self._own.append((full_name, variable))
        return variable

    def _child(self, module):
        self._children.append(module)
        return module

    def named_variables(self):
        yield from self._own
        for child in self._children:
            yield from child.named_variables()


def _truncated_normal(stddev):
    # Like Google's truncated_normal_initializer: resampled beyond 2 stddev.
    return lambda shape: tf.random.truncated_normal(shape, stddev=stddev)


def _zeros(shape):
    return tf.zeros(shape)


def _ones(shape):
    return tf.ones(shape)


class Dense(_NamedModule):
    """`scope/kernel` [in, out] and `scope/bias` [out]; x is [..., in] in compute dtype."""

    def __init__(self, scope, in_dim, out_dim, initializer_range):
        super().__init__(scope)
        self.kernel = self._add("kernel", [in_dim, out_dim], _truncated_normal(initializer_range))
        self.bias = self._add("bias", [out_dim], _zeros)

    def __call__(self, x):
        y = matmul(x, tf.cast(self.kernel, x.dtype))
        return tf.nn.bias_add(y, tf.cast(self.bias, x.dtype))


class LayerNorm(_NamedModule):
    """`scope/gamma`, `scope/beta`; normalises in float32, returns `out_dtype`."""

    def __init__(self, scope, dim):
        super().__init__(scope)
        self.gamma = self._add("gamma", [dim], _ones)
        self.beta = self._add("beta", [dim], _zeros)

    def __call__(self, x, out_dtype):
        x = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        y = (x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * self.gamma + self.beta
        return tf.cast(y, out_dtype)


class _StatelessDropout:
    """Dropout for one forward pass, with masks that are a function of one seed.

    Each dropout site gets its own seed, folded from the pass's seed with the site's
    index in call order (fixed at trace time). No RNG state is involved, so the caller
    reproduces the masks exactly (e.g. after a resume) by passing the same seed.
    """

    def __init__(self, seed):
        self.seed = seed  # [2] int32/int64 tensor
        self.sites = 0

    def __call__(self, x, rate):
        if rate == 0:
            return x
        site_seed = tf.random.experimental.stateless_fold_in(self.seed, self.sites)
        self.sites += 1
        return stateless_dropout(x, rate, site_seed)


def stateless_dropout(x, rate: float, seed):
    """Dropout whose mask is a function of `seed`, drawn from 16 random bits per element.

    tf.nn.experimental.stateless_dropout draws a 32-bit Philox number per element (one bfloat16
    or float32 uniform); two 16-bit halves of each number serve here, which halves the
    random-number work, most of dropout's cost on a CPU (bench/model_pieces.py in
    bench/README.md). An element is dropped when its 16 bits are below round(rate * 65536), so
    the rate is quantised to 1/65536 (0.1 -> 0.1000061); kept elements are scaled by the
    inverse of the quantised keep probability, so the expectation is exact.

    Args:
      x: tensor of any float dtype and shape.
      rate: Python float in [0, 1).
      seed: [2] int tensor.

    Returns:
      x with dropped elements zeroed and kept ones scaled, in x's dtype.
    """
    threshold = round(rate * 65536)
    size = tf.size(x)
    bits = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                       dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
    keep = tf.reshape(halves >= threshold, tf.shape(x))
    scale = tf.cast(65536 / (65536 - threshold), x.dtype)
    return tf.where(keep, x * scale, tf.zeros([], x.dtype))


def _no_dropout(x, rate):
    return x


def _dropout_for(training, dropout_seed):
    """`training` is a Python bool (dropout is in the graph or not). Without a seed, one is
    drawn from TF's global RNG: masks differ from call to call, as with tf.nn.dropout, but
    cannot be reproduced."""
    if not training:
        return _no_dropout
    if dropout_seed is None:
        dropout_seed = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)
    return _StatelessDropout(dropout_seed)


class Embeddings(_NamedModule):
    def __init__(self, config: BertConfig):
        super().__init__("bert/embeddings")
        init = _truncated_normal(config.initializer_range)
        h = config.hidden_size
        self.word_embeddings = self._add("word_embeddings", [config.vocab_size, h], init)
        self.token_type_embeddings = self._add(
            "token_type_embeddings", [config.type_vocab_size, h], init)
        self.position_embeddings = self._add(
            "position_embeddings", [config.max_position_embeddings, h], init)
        self.layer_norm = self._child(LayerNorm("bert/embeddings/LayerNorm", h))
        self.dropout_prob = config.hidden_dropout_prob

    def __call__(self, input_ids, segment_ids, compute_dtype, dropout):
        seq_length = tf.shape(input_ids)[1]
        # Lookups and the sum stay float32 (they are gathers and adds, not matmuls).
        x = tf.gather(self.word_embeddings, input_ids)
        # A one-hot product for the tiny token-type table, as Google does: its
        # gradient is a dense tensor rather than IndexedSlices.
        token_types = tf.one_hot(segment_ids, self.token_type_embeddings.shape[0])
        x += tf.einsum("bst,th->bsh", token_types, self.token_type_embeddings)
        x += self.position_embeddings[tf.newaxis, :seq_length]
        x = self.layer_norm(x, compute_dtype)
        return dropout(x, self.dropout_prob)


# The pooler's variables: read only by [CLS]-based heads (NSP, sequence classification).
POOLER_SCOPE = "bert/pooler/"

EMBEDDING_TABLES = ("bert/embeddings/word_embeddings", "bert/embeddings/position_embeddings",
                    "bert/embeddings/token_type_embeddings")


def word_embedding_rms(variables_by_name) -> float:
    """The root mean square of the word embedding table."""
    word = variables_by_name[EMBEDDING_TABLES[0]]
    return float(tf.sqrt(tf.reduce_mean(tf.square(tf.cast(word, tf.float64)))))


def rescale_embeddings(variables_by_name, target_rms: float) -> None:
    """Scales the word, position and token-type tables by one factor, so that the word
    table's root mean square is `target_rms` (> 0).

    The encoder's outputs do not change: the three tables are summed and then LayerNorm-ed
    (`Embeddings`), and LayerNorm undoes a common scale. What changes is how far a fixed-size
    optimizer step (Adam's) moves them relative to their size. The masked-LM head's logits,
    which reuse the word table, do change: this is for fine-tuning.
    """
    rms = word_embedding_rms(variables_by_name)
    if rms == 0:  # an all-zero table stays zero at any scale
        return
    factor = target_rms / rms
    for name in EMBEDDING_TABLES:
        variables_by_name[name].assign(variables_by_name[name] * factor)


def top_layer_scopes(config: BertConfig, count: int) -> tuple[str, ...]:
    """Variable-name prefixes of the pooler and the top `count` encoder layers (none for 0):
    what fine-tuning's --reinit_top_layers leaves at BERT's initialisation."""
    if count == 0:
        return ()
    top = range(config.num_hidden_layers - count, config.num_hidden_layers)
    return (POOLER_SCOPE, *(f"bert/encoder/layer_{i}/" for i in top))


class TransformerLayer(_NamedModule):
    """One post-LayerNorm encoder layer, on [B*S, H] activations."""

    def __init__(self, config: BertConfig, index):
        scope = f"bert/encoder/layer_{index}"
        super().__init__(scope)
        h, r = config.hidden_size, config.initializer_range
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.query = self._child(Dense(f"{scope}/attention/self/query", h, h, r))
        self.key = self._child(Dense(f"{scope}/attention/self/key", h, h, r))
        self.value = self._child(Dense(f"{scope}/attention/self/value", h, h, r))
        self.attention_output = self._child(Dense(f"{scope}/attention/output/dense", h, h, r))
        self.attention_layer_norm = self._child(
            LayerNorm(f"{scope}/attention/output/LayerNorm", h))
        self.intermediate = self._child(
            Dense(f"{scope}/intermediate/dense", h, config.intermediate_size, r))
        self.output_dense = self._child(
            Dense(f"{scope}/output/dense", config.intermediate_size, h, r))
        self.output_layer_norm = self._child(LayerNorm(f"{scope}/output/LayerNorm", h))
        self.activation = ACTIVATIONS[config.hidden_act]
        self.hidden_dropout_prob = config.hidden_dropout_prob
        self.attention_dropout_prob = config.attention_probs_dropout_prob

    def _split_heads(self, x, batch_size, seq_length):
        # [B*S, H] -> [B, heads, S, head_size]
        x = tf.reshape(x, [batch_size, seq_length, self.num_heads, self.head_size])
        return tf.transpose(x, [0, 2, 1, 3])

    def __call__(self, x, attention_adder, batch_size, seq_length, dropout):
        """x: [B*S, H] compute dtype; attention_adder: [B, 1, 1, S] float32.

        Returns the new [B*S, H] activations and the attention probs (compute dtype).
        """
        dtype = x.dtype
        # Scaling the queries instead of the [B, heads, S, S] scores is cheaper.
        query = self._split_heads(self.query(x), batch_size, seq_length) * tf.cast(
            1.0 / math.sqrt(self.head_size), dtype)
        key = self._split_heads(self.key(x), batch_size, seq_length)
        value = self._split_heads(self.value(x), batch_size, seq_length)
        scores = matmul(query, key, transpose_b=True)  # [B, heads, S, S]
        probs = attention_probabilities(scores, attention_adder)
        dropped = dropout(probs, self.attention_dropout_prob)
        context = matmul(dropped, value)  # [B, heads, S, head_size]
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), tf.shape(x))

        attention = dropout(self.attention_output(context), self.hidden_dropout_prob)
        attention = self.attention_layer_norm(attention + x, dtype)
        intermediate = self.activation(self.intermediate(attention))
        output = dropout(self.output_dense(intermediate), self.hidden_dropout_prob)
        return self.output_layer_norm(output + attention, dtype), probs


class BertModel(_NamedModule):
    """The BERT encoder with pooler; variables under `bert/...`."""

    def __init__(self, config: BertConfig, compute_dtype=tf.float32):
        super().__init__("")
        compute_dtype = tf.as_dtype(compute_dtype)
        if compute_dtype not in (tf.float32, tf.float16, tf.bfloat16):
            raise ValueError(f"compute_dtype must be float32, float16 or bfloat16, "
                             f"got {compute_dtype.name}")
        self.config = config
        self.compute_dtype = compute_dtype
        self.embeddings = self._child(Embeddings(config))
        self.layers = [self._child(TransformerLayer(config, i))
                       for i in range(config.num_hidden_layers)]
        self.pooler = self._child(
            Dense("bert/pooler/dense", config.hidden_size, config.hidden_size,
                  config.initializer_range))

    def __call__(self, input_ids, input_mask=None, segment_ids=None, training=False,
                 return_attention=False, dropout_seed=None) -> BertOutputs:
        """input_ids, input_mask (1 = real token), segment_ids: [B, S] integers.

        `training` must be a Python bool: it decides whether dropout is in the graph.
        `dropout_seed` ([2] int tensor) fixes the dropout masks: the same seed gives the
        same masks; without one, each call draws a seed from TF's global RNG.
        """
        input_ids = tf.convert_to_tensor(input_ids)
        static_length = input_ids.shape[1]
        if static_length is not None and static_length > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {static_length} exceeds max_position_embeddings "
                             f"({self.config.max_position_embeddings}) of bert_config.json")
        if input_mask is None:
            input_mask = tf.ones_like(input_ids)
        if segment_ids is None:
            segment_ids = tf.zeros_like(input_ids)
        shape = tf.shape(input_ids)
        batch_size, seq_length = shape[0], shape[1]
        hidden = self.config.hidden_size

        attention_adder = (1.0 - tf.cast(input_mask, tf.float32)) * MASK_ADDER
        attention_adder = attention_adder[:, tf.newaxis, tf.newaxis, :]

        dropout = _dropout_for(training, dropout_seed)
        x = self.embeddings(input_ids, segment_ids, self.compute_dtype, dropout)
        x = tf.reshape(x, [-1, hidden])
        states, all_probs = [x], []
        for layer in self.layers:
            x, probs = layer(x, attention_adder, batch_size, seq_length, dropout)
            states.append(x)
            all_probs.append(probs)

        def as_sequence(t):
            return tf.reshape(tf.cast(t, tf.float32), [batch_size, seq_length, hidden])

        sequence = tf.reshape(x, [batch_size, seq_length, hidden])
        pooled = tf.tanh(self.pooler(sequence[:, 0]))
        return BertOutputs(
            sequence_output=tf.cast(sequence, tf.float32),
            pooled_output=tf.cast(pooled, tf.float32),
            hidden_states=tuple(as_sequence(s) for s in states),
            attention_probs=(tuple(tf.cast(p, tf.float32) for p in all_probs)
                             if return_attention else None),
        )


class MaskedLMHead(_NamedModule):
    """`cls/predictions`: transform, then logits against the (tied) word embeddings."""

    def __init__(self, config: BertConfig, word_embeddings):
        super().__init__("cls/predictions")
        h = config.hidden_size
        self.transform = self._child(
            Dense("cls/predictions/transform/dense", h, h, config.initializer_range))
        self.activation = ACTIVATIONS[config.hidden_act]
        self.layer_norm = self._child(LayerNorm("cls/predictions/transform/LayerNorm", h))
        self.output_bias = self._add("output_bias", [config.vocab_size], _zeros)
        # Tied, not owned: the embedding variable is named under bert/embeddings.
        self.word_embeddings = word_embeddings

    def __call__(self, x):
        """x: [N, H] compute dtype -> float32 logits [N, V]."""
        x = self.layer_norm(self.activation(self.transform(x)), x.dtype)
        logits = matmul(x, tf.cast(self.word_embeddings, x.dtype), transpose_b=True)
        return tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)


class NextSentenceHead(_NamedModule):
    """`cls/seq_relationship`: output_weights [2, H] (Google's layout) and output_bias."""

    def __init__(self, config: BertConfig):
        super().__init__("cls/seq_relationship")
        self.output_weights = self._add(
            "output_weights", [2, config.hidden_size],
            _truncated_normal(config.initializer_range))
        self.output_bias = self._add("output_bias", [2], _zeros)

    def __call__(self, pooled):
        logits = tf.matmul(pooled, self.output_weights, transpose_b=True)
        return tf.nn.bias_add(logits, self.output_bias)


class BertForPreTraining(_NamedModule):
    """BERT plus the masked-LM and next-sentence heads (`cls/...`)."""

    def __init__(self, config: BertConfig, compute_dtype=tf.float32):
        super().__init__("")
        self.config = config
        self.bert = self._child(BertModel(config, compute_dtype))
        self.masked_lm = self._child(MaskedLMHead(config, self.bert.embeddings.word_embeddings))
        self.next_sentence = self._child(NextSentenceHead(config))

    def __call__(self, features, training=False, return_attention=False,
                 dropout_seed=None) -> PreTrainingOutputs:
        """features: dict with input_ids, input_mask, segment_ids [B, S] and
        masked_lm_positions [B, P] (int32). training, dropout_seed: as BertModel's."""
        outputs = self.bert(features["input_ids"], features["input_mask"],
                            features["segment_ids"], training=training,
                            return_attention=return_attention, dropout_seed=dropout_seed)
        # Gather before the head: only P of the S positions need [V] logits.
        positions = features["masked_lm_positions"]
        masked = tf.cast(tf.gather(outputs.sequence_output, positions, batch_dims=1),
                         self.bert.compute_dtype)  # [B, P, H]
        mlm_logits = self.masked_lm(tf.reshape(masked, [-1, self.config.hidden_size]))
        mlm_logits = tf.reshape(mlm_logits, [tf.shape(positions)[0], tf.shape(positions)[1],
                                             self.config.vocab_size])
        nsp_logits = self.next_sentence(outputs.pooled_output)
        return PreTrainingOutputs(mlm_logits=mlm_logits, nsp_logits=nsp_logits, bert=outputs)


# The per-batch sums every loss and accuracy is computed from; training allreduces them.
METRIC_SUMS = ("mlm_loss_sum", "mlm_weight_sum", "mlm_correct_sum", "nsp_loss_sum",
               "nsp_correct_sum", "num_examples")


def cross_entropy_and_predictions(labels, logits):
    """-log softmax(logits)[label] and the argmax, per row of float32 logits [..., V], with the
    gradient softmax - one_hot(label).

    As tf.nn.sparse_softmax_cross_entropy_with_logits, but the softmax is tf.nn.softmax (oneDNN's
    on CPUs): at the masked-LM head's shapes forward and backward take 0.4x the time of TF's
    fused kernel (bench/model_pieces.py). The log-sum-exp comes from the largest probability,
    which is at least 1/V, so the loss stays finite and exact to float32 rounding even where
    the label's own probability underflows.

    Args:
      labels: int32 [...] class ids.
      logits: float32 [..., V].

    Returns:
      (negative log-likelihood float32 [...], argmax int32 [...]).
    """
    predictions = tf.argmax(logits, -1, output_type=tf.int32)
    batch_dims = len(labels.shape)

    @tf.custom_gradient
    def negative_log_likelihood(logits):
        probs = tf.nn.softmax(logits)
        top = tf.gather(logits, predictions, batch_dims=batch_dims)
        log_sum_exp = top - tf.math.log(tf.gather(probs, predictions, batch_dims=batch_dims))

        def gradient(upstream):
            return upstream[..., tf.newaxis] * (probs - tf.one_hot(labels, tf.shape(logits)[-1]))
        return log_sum_exp - tf.gather(logits, labels, batch_dims=batch_dims), gradient
    return negative_log_likelihood(logits), predictions


def pretraining_loss(outputs: PreTrainingOutputs, features) -> dict:
    """Masked-LM and next-sentence sums (float32 scalars, keys METRIC_SUMS) and the batch's
    differentiable `loss`.

    features needs masked_lm_ids, masked_lm_weights [B, P] and next_sentence_labels [B].
    Sums, not means, so that training can normalise by totals over accumulation steps and
    ranks; `metrics_from_sums` turns them into losses and accuracies.
    """
    mlm_ids = tf.cast(features["masked_lm_ids"], tf.int32)
    mlm_weights = tf.cast(features["masked_lm_weights"], tf.float32)
    nsp_labels = tf.cast(tf.reshape(features["next_sentence_labels"], [-1]), tf.int32)

    mlm_nll, mlm_predictions = cross_entropy_and_predictions(mlm_ids, outputs.mlm_logits)
    mlm_hit = tf.cast(tf.equal(mlm_predictions, mlm_ids), tf.float32)
    nsp_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=nsp_labels, logits=outputs.nsp_logits)
    nsp_hit = tf.cast(tf.equal(tf.argmax(outputs.nsp_logits, -1, output_type=tf.int32),
                               nsp_labels), tf.float32)
    sums = {
        "mlm_loss_sum": tf.reduce_sum(mlm_weights * mlm_nll),
        "mlm_weight_sum": tf.reduce_sum(mlm_weights),
        "mlm_correct_sum": tf.reduce_sum(mlm_weights * mlm_hit),
        "nsp_loss_sum": tf.reduce_sum(nsp_nll),
        "nsp_correct_sum": tf.reduce_sum(nsp_hit),
        "num_examples": tf.cast(tf.size(nsp_labels), tf.float32),
    }
    # This batch's objective (Google's normaliser for the masked LM), differentiable.
    loss = (sums["mlm_loss_sum"] / (sums["mlm_weight_sum"] + 1e-5)
            + sums["nsp_loss_sum"] / tf.maximum(sums["num_examples"], 1.0))
    return {**sums, "loss": loss}


def metrics_from_sums(sums) -> dict[str, float]:
    """Losses and accuracies (Google's names) from METRIC_SUMS, as Python floats.

    Args:
      sums: dict keyed by METRIC_SUMS, or a sequence in that order (numbers or scalar tensors).

    Returns:
      loss, masked_lm_loss, masked_lm_accuracy, next_sentence_loss, next_sentence_accuracy.
    """
    if not isinstance(sums, dict):
        sums = dict(zip(METRIC_SUMS, sums, strict=True))
    sums = {name: float(sums[name]) for name in METRIC_SUMS}
    weight = sums["mlm_weight_sum"] + 1e-5  # Google's normaliser
    examples = max(sums["num_examples"], 1.0)
    mlm_loss, nsp_loss = sums["mlm_loss_sum"] / weight, sums["nsp_loss_sum"] / examples
    return {
        "loss": mlm_loss + nsp_loss,
        "masked_lm_loss": mlm_loss,
        "masked_lm_accuracy": sums["mlm_correct_sum"] / weight,
        "next_sentence_loss": nsp_loss,
        "next_sentence_accuracy": sums["nsp_correct_sum"] / examples,
    }


def _natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def variables_by_name(module) -> dict:
    """Google checkpoint name (no ':0') -> tf.Variable, embeddings first, layers in order."""
    named = dict(module.named_variables())
    return {name: named[name] for name in sorted(named, key=_natural_key)}
