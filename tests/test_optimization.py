"""LAMB / AdamW updates, weight-decay exclusion, the schedule and clipping."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bert_tf.train import optimization
from bert_tf.train.config import PretrainingConfig, PretrainingConfigError

pytestmark = pytest.mark.ngc  # also run by `make test-ngc` (TensorFlow 2.17)

RECIPES = Path(__file__).resolve().parent.parent / "launch" / "recipes"


def _variables():
    return {
        "layer/dense/kernel": tf.Variable([[0.5, -1.0], [2.0, 0.25]]),
        "layer/dense/bias": tf.Variable([0.3, -0.3]),
        "layer/LayerNorm/gamma": tf.Variable([1.0, 1.0]),
    }


def test_slots_use_google_names():
    opt = optimization.create_optimizer("lamb", _variables(), weight_decay_rate=0.01)
    assert set(opt.slots_by_name()) == {
        f"{name}/{slot}" for name in _variables() for slot in ("adam_m", "adam_v")}


def test_adamw_first_step_is_googles_uncorrected_adam_and_skips_decay_for_bias_layernorm():
    variables = _variables()
    before = {n: v.numpy().copy() for n, v in variables.items()}
    opt = optimization.create_optimizer("adamw", variables, weight_decay_rate=0.1)
    grads = [tf.fill(v.shape, 0.2) for v in variables.values()]
    opt.apply(grads, learning_rate=0.01, step=0)
    # m = 0.1 g, v = 0.001 g^2 and no bias correction: m / sqrt(v) = 0.1 / sqrt(0.001) = 3.1623.
    adam = 0.1 * 0.2 / (np.sqrt(0.001) * 0.2 + 1e-6)
    for name, variable in variables.items():
        decay = 0.1 * before[name] if name.endswith("kernel") else 0.0
        np.testing.assert_allclose(variable.numpy(), before[name] - 0.01 * (adam + decay),
                                   rtol=1e-6)
    np.testing.assert_allclose(opt.slots_by_name()["layer/dense/kernel/adam_m"].numpy(),
                               np.full([2, 2], 0.02), rtol=1e-6)


def test_adamw_with_bias_correction_steps_by_the_learning_rate_at_first_and_later():
    variables = {"layer/dense/bias": tf.Variable([0.3, -0.3])}
    opt = optimization.create_optimizer("adamw", variables, weight_decay_rate=0.0,
                                        bias_correction=True)
    for step in range(3):  # a constant gradient: corrected m / sqrt(v) is 1 at every step
        before = variables["layer/dense/bias"].numpy().copy()
        opt.apply([tf.constant([0.2, -0.2])], learning_rate=0.01, step=step)
        np.testing.assert_allclose(variables["layer/dense/bias"].numpy() - before,
                                   [-0.01, 0.01], rtol=1e-3)


def test_lamb_moves_weights_by_learning_rate_times_their_norm_and_bias_layernorm_by_adam():
    variables = _variables()
    before = {n: v.numpy().copy() for n, v in variables.items()}
    opt = optimization.create_optimizer("lamb", variables, weight_decay_rate=0.01)
    grads = [tf.constant(np.random.default_rng(0).normal(size=v.shape), tf.float32)
             for v in variables.values()]
    opt.apply(grads, learning_rate=0.05, step=0)
    # The trust ratio ||w|| / ||update|| makes a weight's step lr * ||w|| long. Bias and
    # LayerNorm get none (as apex's FusedLAMB): a bias-corrected first Adam step is
    # lr * sign(g) per element, so a zero-initialised bias can move at all.
    for name, variable in variables.items():
        moved = variable.numpy() - before[name]
        if name.endswith("kernel"):
            np.testing.assert_allclose(np.linalg.norm(moved),
                                       0.05 * np.linalg.norm(before[name]), rtol=1e-5)
        else:
            np.testing.assert_allclose(np.abs(moved), 0.05, rtol=1e-4)


def test_large_models_get_an_xla_compiled_lamb_update_with_the_same_values():
    assert not optimization.create_optimizer("lamb", _variables(), 0.01).fused  # small
    large = {"big/kernel": tf.Variable(tf.zeros([optimization.FUSED_UPDATE_MIN_PARAMETERS]))}
    assert optimization.create_optimizer("lamb", large, 0.01).fused
    assert not optimization.create_optimizer("adamw", large, 0.01).fused  # TF's Adam kernel
    graph, compiled = _variables(), _variables()
    grads = [tf.constant(np.random.default_rng(1).normal(size=v.shape), tf.float32)
             for v in graph.values()]
    plain = optimization.create_optimizer("lamb", graph, weight_decay_rate=0.01)
    fused = optimization.create_optimizer("lamb", compiled, weight_decay_rate=0.01)
    fused.fused = True  # as for a model of FUSED_UPDATE_MIN_PARAMETERS
    for step in range(2):
        plain.apply(grads, learning_rate=0.05, step=step)
        fused.apply(grads, learning_rate=0.05, step=step)
    for name in graph:
        np.testing.assert_allclose(compiled[name].numpy(), graph[name].numpy(), rtol=1e-5)
    for a, b in zip(fused.m + fused.v, plain.m + plain.v, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5)


def test_lamb_moves_a_zero_initialised_bias_at_full_learning_rate():
    variables = {"cls/predictions/output_bias": tf.Variable(tf.zeros([1000]))}
    opt = optimization.create_optimizer("lamb", variables, weight_decay_rate=0.01)
    grads = [tf.fill([1000], -1.0)]
    for step in range(3):
        opt.apply(grads, learning_rate=0.1, step=step)
    # With a trust ratio the first step would set ||bias|| and every later step grow it by
    # only 10%; without, each element gains lr per step.
    np.testing.assert_allclose(variables["cls/predictions/output_bias"].numpy(), 0.3, rtol=1e-4)


def _bert_variables():
    return {name: tf.Variable(tf.fill([2, 2] if name.endswith("kernel") else [2], 0.5))
            for name in ("bert/encoder/layer_0/attention/self/query/kernel",
                         "bert/encoder/layer_0/attention/self/query/bias",
                         "bert/encoder/layer_0/output/LayerNorm/gamma",
                         "bert/encoder/layer_0/output/LayerNorm/beta",
                         "bert/embeddings/word_embeddings",
                         "cls/predictions/output_bias")}


SUFFIXES = ("query/kernel", "query/bias", "LayerNorm/gamma", "LayerNorm/beta", "word_embeddings",
            "output_bias")


@pytest.mark.parametrize("exclude, adapted", [
    (optimization.EXCLUDE_FROM_LAYER_ADAPTATION, {"query/kernel", "word_embeddings"}),
    ((), set(SUFFIXES)),  # NVIDIA's TensorFlow LAMB: every variable
    (("embeddings",), {"query/kernel", "query/bias", "LayerNorm/gamma", "LayerNorm/beta",
                       "output_bias"}),
])
def test_lamb_trust_ratio_goes_to_the_variables_not_excluded(exclude, adapted):
    variables = _bert_variables()
    before = {n: v.numpy().copy() for n, v in variables.items()}
    opt = optimization.create_optimizer("lamb", variables, weight_decay_rate=0.01,
                                        exclude_from_layer_adaptation=exclude)
    grads = [tf.fill(v.shape, 0.1) for v in variables.values()]
    opt.apply(grads, learning_rate=0.1, step=0)
    got = set()
    for name, variable in variables.items():
        moved = np.linalg.norm(variable.numpy() - before[name])
        # With a trust ratio a variable moves lr * ||w||; without, the first bias-corrected
        # step moves each of its n elements by lr (plus decay): lr * sqrt(n) or more.
        if np.isclose(moved, 0.1 * np.linalg.norm(before[name]), rtol=1e-4):
            got.update(suffix for suffix in SUFFIXES if name.endswith(suffix))
    assert got == adapted


def test_lamb_trust_ratio_does_not_follow_weight_decay_rate():
    # Name-based (as NVIDIA's TensorFlow LAMB): a rate of 0 keeps the kernel's trust ratio,
    # where apex's FusedLAMB would drop it and step like Adam.
    variables = _bert_variables()
    opt = optimization.create_optimizer("lamb", variables, weight_decay_rate=0.0)
    assert opt.adapted == [n.endswith(("kernel", "word_embeddings")) for n in variables]
    assert not any(opt.decays)


def test_lamb_bias_correction_uses_the_step():
    variables = {"w": tf.Variable([1.0, -1.0, 1.0, -1.0])}
    opt = optimization.create_optimizer("lamb", variables, weight_decay_rate=0.0)
    grads = [tf.constant([1.0, -1.0, 1.0, -1.0])]
    opt.apply(grads, learning_rate=0.1, step=0)
    # Bias-corrected first step: update = g / |g| = sign(g), ratio = ||w|| / ||u|| = 1.
    np.testing.assert_allclose(variables["w"].numpy(), [0.9, -0.9, 0.9, -0.9], rtol=1e-5)


@pytest.mark.parametrize("optimizer_type,power", [("adamw", 1.0), ("lamb", 0.5)])
def test_schedule_warms_up_linearly_then_decays_polynomially(optimizer_type, power):
    assert optimization.decay_power(optimizer_type) == power

    def lr(step):
        return float(optimization.learning_rate_at(step / 100, peak=1e-3, warmup=0.1,
                                                   power=power))

    np.testing.assert_allclose([lr(0), lr(5), lr(9)], [0.0, 5e-4, 9e-4], rtol=1e-6)
    for step in (10, 50, 99):
        np.testing.assert_allclose(lr(step), 1e-3 * (1 - step / 100) ** power, rtol=1e-5)
    assert lr(100) == 0.0 and lr(150) == 0.0


def test_triangle_schedule_is_crammings_budget_triangle():
    """From a quarter of the peak up to it at 3/4 of the run, then linearly to 0 (Cramming's
    get_budget_triangle, base_percentage=0.25, falloff=0.25)."""
    def lr(progress):
        return float(optimization.learning_rate_at(progress, peak=1.0, warmup=0.0, power=1.0,
                                                   schedule="triangle"))

    np.testing.assert_allclose([lr(0), lr(0.375), lr(0.75), lr(0.875), lr(1.0), lr(1.5)],
                               [0.25, 0.625, 1.0, 0.5, 0.0, 0.0], atol=1e-6)


def test_unscale_and_clip():
    grads = [tf.constant([6.0, 0.0]), tf.constant([8.0])]  # norm 10, divided by 2: 5
    clipped, norm, finite = optimization.unscale_and_clip(grads, tf.constant(2.0))
    assert bool(finite) and float(norm) == pytest.approx(5.0)
    np.testing.assert_allclose(np.concatenate([g.numpy() for g in clipped]), [0.6, 0.0, 0.8],
                               rtol=1e-6)
    small, norm, _ = optimization.unscale_and_clip([tf.constant([0.6, 0.8])], 2.0)
    np.testing.assert_allclose(small[0].numpy(), [0.3, 0.4], rtol=1e-6)
    assert float(norm) == pytest.approx(0.5)
    for bad in (np.inf, np.nan):
        _, _, finite = optimization.unscale_and_clip([tf.ones([2]), tf.constant([1.0, bad])])
        assert not bool(finite)


def test_unknown_optimizer_is_rejected():
    with pytest.raises(ValueError, match="--optimizer_type"):
        optimization.create_optimizer("sgd", _variables(), 0.01)


def test_exclude_from_layer_adaptation_flag_rejects_a_bad_regex(tmp_path):
    config = PretrainingConfig(bert_config_file="c.json", output_dir=str(tmp_path), do_eval=True,
                               eval_files="e", exclude_from_layer_adaptation=("bias", "(norm"))
    with pytest.raises(PretrainingConfigError, match=r"--exclude_from_layer_adaptation: '\(norm'"):
        config.validate()


def test_exclude_from_layer_adaptation_flag_empty_means_every_variable():
    flag_values = flags.FlagValues()
    flags.DEFINE_list("exclude_from_layer_adaptation", ["bias"], "", flag_values=flag_values)
    flag_values(["prog", "--flagfile=" + str(RECIPES / "bert_base_phase1.flags")], known_only=True)
    assert flag_values.exclude_from_layer_adaptation == []
