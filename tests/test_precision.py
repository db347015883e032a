"""Compute dtypes, dynamic loss scaling and the auto-mixed-precision rewrite."""

import os
import re
import subprocess

import pytest
import tensorflow as tf
from conftest import PYTHON, run_command

from bert_tf.train import precision

pytestmark = pytest.mark.ngc  # also run by `make test-ngc` (TensorFlow 2.17)


def test_compute_dtypes():
    assert precision.compute_dtype("fp32") == tf.float32
    assert precision.compute_dtype("fp16") == tf.float16
    assert precision.compute_dtype("bf16") == tf.bfloat16
    assert precision.compute_dtype("amp") == tf.float32  # the rewrite picks per op
    with pytest.raises(ValueError, match="--precision"):
        precision.compute_dtype("fp8")
    assert precision.uses_loss_scaling("fp16", on_gpu=False)
    assert precision.uses_loss_scaling("amp", on_gpu=True)
    assert not precision.uses_loss_scaling("amp", on_gpu=False)
    assert not precision.uses_loss_scaling("bf16", on_gpu=True)


def test_dynamic_loss_scale_halves_on_overflow_and_grows_after_interval():
    scale = precision.DynamicLossScale(enabled=True, initial_scale=1024.0, growth_interval=3)
    scale.update(tf.constant(False))
    assert float(scale.scale.numpy()) == 512.0
    for _ in range(2):
        scale.update(tf.constant(True))
    assert float(scale.scale.numpy()) == 512.0
    scale.update(tf.constant(True))  # the third finite update in a row
    assert float(scale.scale.numpy()) == 1024.0
    assert int(scale.good_steps.numpy()) == 0
    scale.update(tf.constant(True))
    scale.update(tf.constant(False))  # an overflow resets the run of good steps
    assert float(scale.scale.numpy()) == 512.0 and int(scale.good_steps.numpy()) == 0
    assert set(scale.variables_by_name()) == {"loss_scale", "loss_scale_good_steps"}


def test_disabled_loss_scale_stays_one():
    scale = precision.DynamicLossScale(enabled=False)
    scale.update(tf.constant(False))
    assert float(scale.scale.numpy()) == 1.0


AMP_SCRIPT = """
import numpy as np, tensorflow as tf
from bert_tf.train import precision
a = tf.constant(np.random.default_rng(0).normal(size=[64, 64]), tf.float32)
w = tf.Variable(a)
def two_layers(x):  # Grappler leaves graphs of under 4 nodes alone
    return tf.reduce_sum(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w), axis=0)
x = a.numpy().astype(np.float64)
exact = (np.maximum(x @ x, 0) @ x).sum(0)
fp32_error = np.abs(tf.function(two_layers)(a).numpy() - exact).max()
print("option", precision.enable_auto_mixed_precision(on_gpu=False))
amp_error = np.abs(tf.function(two_layers)(a).numpy() - exact).max()
print("errors", fp32_error, amp_error)
assert amp_error > 100 * fp32_error, (fp32_error, amp_error)  # bfloat16 has 8 mantissa bits
"""


def test_amp_rewrite_turns_float32_matmul_into_bfloat16_on_cpu():
    # In a subprocess: the option is global to the TF runtime, and oneDNN is
    # chosen when TF starts.
    proc = run_command([PYTHON, "-c", AMP_SCRIPT],
                       env={"TF_NUM_INTRAOP_THREADS": "1", "TF_ENABLE_ONEDNN_OPTS": "1"})
    assert "option auto_mixed_precision_onednn_bfloat16" in proc.stdout


def test_amp_without_onednn_is_a_clear_error():
    # bert_tf turns oneDNN on unless the environment says otherwise; here it does.
    script = """
import tensorflow as tf
from bert_tf.train import precision
try:
    precision.enable_auto_mixed_precision(on_gpu=False)
except precision.PrecisionError as e:
    print("error:", e)
print("options", tf.config.optimizer.get_experimental_options())
"""
    proc = run_command([PYTHON, "-c", script], env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert "error: --precision=amp on a CPU needs" in proc.stdout, proc.stdout
    assert "TF_ENABLE_ONEDNN_OPTS=1" in proc.stdout
    assert "auto_mixed_precision_onednn_bfloat16" not in proc.stdout.split("options")[1]


def test_entry_points_turn_onednn_on_unless_told_otherwise():
    # `python -m bert_tf COMMAND` turns it on before TensorFlow loads; the doctor reports it.
    probe = [str(PYTHON), "-m", "bert_tf", "doctor"]
    unset = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    on = subprocess.run(probe, env=unset, capture_output=True, text=True).stdout
    assert re.search(r"OK +oneDNN CPU kernels", on), on
    off = subprocess.run(probe, env={**unset, "TF_ENABLE_ONEDNN_OPTS": "0"}, capture_output=True,
                         text=True).stdout
    assert re.search(r"WARN +oneDNN CPU kernels", off), off
    # Importing the library changes nothing: the choice is the entry point's, explicitly.
    library = [str(PYTHON), "-c", "import bert_tf.train.precision as p; "
               "import os; print('set', 'TF_ENABLE_ONEDNN_OPTS' in os.environ)"]
    assert "set False" in subprocess.run(library, env=unset, capture_output=True, text=True,
                                         check=True).stdout


@pytest.mark.parametrize("mode,use_xla,on_gpu,expected", [
    ("bf16", True, False, True),
    ("bf16", False, False, False),  # oneDNN runs bfloat16 matmuls as they are
    ("bf16", True, True, False),  # so do GPUs under XLA
    ("fp32", True, False, False),
    ("fp16", True, False, False),
    ("amp", True, False, False),
])
def test_float32_output_matmuls_only_for_bf16_with_xla_on_a_cpu(mode, use_xla, on_gpu, expected):
    try:
        assert precision.configure_xla_matmuls(mode, use_xla, on_gpu) is expected
    finally:
        precision.configure_xla_matmuls("fp32", False, False)


def test_train_state_sets_up_float32_output_matmuls():
    # What --precision=bf16 --use_xla does on this CPU: the model's XLA-compiled bfloat16
    # matmuls become bfloat16 x bfloat16 -> float32 dots.
    import tiny
    from test_modeling import FLOAT32_OUTPUT_DOT, xla_product_and_gradients

    from bert_tf.model.config import BertConfig
    from bert_tf.train import distributed
    from bert_tf.train.loop import PretrainingState

    distributed.init()
    a = tf.ones([4, 8], tf.bfloat16)

    def dots_after_state(**settings):
        config = tiny.training_config(bert_config_file="unused", input_files="unused",
                                      output_dir="unused", **settings)
        PretrainingState(BertConfig(**tiny.TINY_BERT), config)
        return len(FLOAT32_OUTPUT_DOT.findall(xla_product_and_gradients(a, a, True)[1]))

    try:
        assert dots_after_state(precision="bf16", use_xla=True) == 3
        assert dots_after_state(precision="bf16", use_xla=False) == 0
    finally:
        precision.configure_xla_matmuls("fp32", False, False)
