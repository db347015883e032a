"""Numeric precision: compute dtype, TF's auto-mixed-precision rewrite and
dynamic loss scaling. Master weights and optimizer state are always float32.

- fp32: everything float32.
- bf16: the model computes in bfloat16 (oneDNN kernels on this CPU); no loss
  scaling (bfloat16 has float32's exponent range).
- fp16: the model computes in float16 with dynamic loss scaling.
- amp: the model is written in float32 and Grappler's auto mixed precision
  pass rewrites the graphs: to float16 on a GPU (with loss scaling, as in
  NVIDIA's recipes), to bfloat16 on a CPU (`auto_mixed_precision_onednn_bfloat16`,
  which needs oneDNN: TF_ENABLE_ONEDNN_OPTS=1 on CPUs where it is not the default).
  The rewrite applies to tf.function graphs that XLA does not compile.

bf16 with XLA on a CPU: XLA's CPU backend computes bfloat16 -> bfloat16 dots in float32, so
`configure_xla_matmuls` has the model write them as bfloat16 -> float32 dots, which it runs in
bfloat16.
"""

import tensorflow as tf

from bert_tf.model import modeling
from bert_tf.train.config import PRECISION_MODES, PRECISIONS, xla_cpu_float32_output_matmuls


def has_gpu() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


def compute_dtype(precision: str) -> tf.DType:
    """The dtype the model computes in (for amp the rewrite chooses per op)."""
    if precision not in PRECISION_MODES:
        raise ValueError(f"--precision must be one of {PRECISIONS}, got {precision!r}")
    return tf.as_dtype(PRECISION_MODES[precision].compute_dtype)


def configure_xla_matmuls(precision: str, use_xla: bool, on_gpu: bool) -> bool:
    """Sets (and returns) whether the model's XLA-compiled bfloat16 matmuls produce float32.

    On for bf16 with XLA on a CPU only: there XLA upcasts bfloat16 -> bfloat16 dots to float32
    (a BERT-base update ran at 0.94x fp32's speed) but runs bfloat16 -> float32 ones on
    AVX512_BF16/AMX (bench/README.md, "bf16 with XLA on a CPU"). GPUs run bfloat16 dots as
    they are; without XLA oneDNN does.
    """
    enabled = xla_cpu_float32_output_matmuls(precision) and use_xla and not on_gpu
    modeling.set_float32_matmul_outputs(enabled)
    return enabled


def uses_loss_scaling(precision: str, on_gpu: bool) -> bool:
    """fp16 needs loss scaling, and so does amp where it rewrites to float16."""
    mode = PRECISION_MODES[precision]
    return mode.compute_dtype == "float16" or (mode.float16_on_gpu and on_gpu)


class PrecisionError(RuntimeError):
    """A precision mode this TensorFlow process cannot provide."""


def onednn_enabled() -> bool:
    """Whether TensorFlow's oneDNN CPU ops are on (decided when TF starts)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # a TF without the probe: let the rewrite decide
        return True
    return _pywrap_util_port.IsMklEnabled()


def enable_auto_mixed_precision(on_gpu: bool) -> str:
    """Turns on Grappler's mixed precision rewrite; returns the option used.

    The CPU (bfloat16) rewrite exists only with oneDNN, which TF turns on by
    default only on CPUs with AVX512_VNNI/AVX512_BF16/AMX; elsewhere it would
    silently do nothing, so that is an error.
    """
    if not on_gpu and not onednn_enabled():
        raise PrecisionError(
            "--precision=amp on a CPU needs TensorFlow's oneDNN ops, which are off in this "
            "process: set TF_ENABLE_ONEDNN_OPTS=1 in the environment (before Python starts), "
            "or use --precision=bf16 (explicit bfloat16) or fp32")
    option = "auto_mixed_precision" if on_gpu else "auto_mixed_precision_onednn_bfloat16"
    tf.config.optimizer.set_experimental_options({option: True})
    return option


class DynamicLossScale(tf.Module):
    """Dynamic loss scaling state (float16 only; disabled it is a constant 1).

    The scale halves on every update with non-finite gradients and doubles
    after `growth_interval` finite updates in a row. The caller passes the
    finiteness of the *allreduced* gradients, so every rank takes the same
    decision. Initial scale and interval are those of TF's and PyTorch's
    dynamic loss scalers (2**15, 2000).
    """

    def __init__(self, enabled: bool, initial_scale: float = 2.0**15,
                 growth_interval: int = 2000, name: str = "loss_scale"):
        super().__init__(name=name)
        self.enabled = enabled
        self.growth_interval = growth_interval
        self.scale = tf.Variable(initial_scale if enabled else 1.0, dtype=tf.float32,
                                 trainable=False, name="loss_scale")
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                      name="loss_scale_good_steps")

    def variables_by_name(self) -> dict[str, tf.Variable]:
        return {"loss_scale": self.scale, "loss_scale_good_steps": self.good_steps}

    def update(self, grads_finite) -> None:
        """Adjusts the scale after an update attempt (no-op when disabled)."""
        if not self.enabled:
            return
        grown = self.good_steps + 1 >= self.growth_interval
        new_scale = tf.where(
            grads_finite,
            tf.where(grown, self.scale * 2.0, self.scale),
            tf.maximum(self.scale * 0.5, 1.0),
        )
        new_good = tf.where(grads_finite & ~grown, self.good_steps + 1, tf.zeros([], tf.int64))
        self.scale.assign(new_scale)
        self.good_steps.assign(new_good)

