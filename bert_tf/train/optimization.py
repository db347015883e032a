"""Keras-free optimizers and learning-rate schedule for BERT pretraining.

Two optimizers, both with decoupled weight decay that skips LayerNorm and
bias variables, and slots named the way Google's and NVIDIA's checkpoints name
them (`<var>/adam_m`, `<var>/adam_v`):

- `adamw`: Google BERT's AdamWeightDecayOptimizer (no bias correction).
- `lamb`: LAMB as in NVIDIA's BERT recipes (bias-corrected Adam direction plus
  weight decay, scaled per variable by the trust ratio ||w|| / ||update||).
  Which variables get no trust ratio is `exclude_from_layer_adaptation`
  (regexes, run_pretraining's --exclude_from_layer_adaptation):
  - default `LayerNorm, layer_norm, bias`, as NVIDIA's PyTorch recipe gets it
    (its FusedLAMB applies the ratio only where weight decay is non-zero, and
    LayerNorm/bias are in its no-decay group: PyTorch/LanguageModeling/BERT/
    run_pretraining.py, lamb_amp_opt/csrc/multi_tensor_lamb.cu). Why: a
    zero-initialised bias with a ratio moves by lr * ||bias|| per step, so the
    masked-LM output bias could hardly learn the token frequencies.
  - empty: every variable, as NVIDIA's TensorFlow recipes (TF1 LAMBOptimizer in
    TensorFlow/LanguageModeling/BERT/optimization.py has no exclusion; TF2
    passes exclude_from_layer_adaptation=['None'] to TF-Addons LAMB in
    TensorFlow2/LanguageModeling/BERT/optimization.py, a pattern no variable
    matches). launch/recipes/ use this.
  The exclusion goes by name only, so --weight_decay_rate=0 leaves the trust
  ratio where it was (unlike apex's FusedLAMB, whose ratio follows the decay:
  there a rate of 0 turns LAMB into bias-corrected Adam).

Schedule (`learning_rate_at`), of the share of the run done (of `num_train_steps`, or of a
time budget): linear warmup to the peak, then polynomial decay to 0 at the end, computed from
step 0 as Google's `polynomial_decay` is (so there is a small drop at the end of warmup). The
power is 1.0 for AdamW (Google) and 0.5 for LAMB (NVIDIA's LAMB recipes). Or Cramming's
triangle (the budget recipe, docs/budget.md).

Gradients are clipped to global norm 1.0 by the caller before `apply`, once per
update on the allreduced (global) gradient, as NVIDIA's TensorFlow 2 code does
(TensorFlow2/LanguageModeling/BERT/official/modeling/model_training_utils.py).
The references differ here: Google's optimization.py clips before
CrossShardOptimizer's cross-replica sum, i.e. each TPU core's gradient; NVIDIA's
TF1 optimization.py with gradient accumulation clips each micro-batch's
gradient before accumulating it (and before the allreduce). We clip the
gradient the update applies, so that 1 rank x 2b and 2 ranks x b give the
same update.
"""

import re

import tensorflow as tf

from bert_tf.train.config import OPTIMIZER_TYPES

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
# From this many parameters on, LAMB's `apply` is one XLA-compiled function even without
# --use_xla: XLA fuses each variable's dozen elementwise ops into one pass over memory, which the
# update is bound by (BERT-base: 0.73 -> 0.45 CPU seconds per update, 1.18x in wall time in
# every round; bench/optimizer_update.py, bench/README.md). Smaller models (tests, the demo's L2
# H128) would pay more in compile time (seconds) than they save. AdamW is left to TF's fused
# multi-threaded Adam kernel: XLA saved CPU time there (0.22 -> 0.14 s) but not wall time.
FUSED_UPDATE_MIN_PARAMETERS = 10_000_000
# Our default: no LAMB trust ratio for these (NVIDIA PyTorch's behaviour; see the module doc).
EXCLUDE_FROM_LAYER_ADAPTATION = EXCLUDE_FROM_WEIGHT_DECAY
CLIP_NORM = 1.0


def decay_power(optimizer_type: str) -> float:
    """Polynomial decay power of the reference recipe for this optimizer."""
    return 0.5 if optimizer_type == "lamb" else 1.0


# --learning_rate_schedule=triangle: Cramming's "budget-triangle2" (Geiping & Goldstein 2022;
# get_budget_triangle with base_percentage=0.25, falloff=0.25 in their
# cramming/backend/optimizers/schedulers.py, chosen by config/train/bert-o4.yaml): from
# TRIANGLE_START x peak up to the peak at TRIANGLE_PEAK_AT of the run, then linearly to 0.
TRIANGLE_START, TRIANGLE_PEAK_AT = 0.25, 0.75


def learning_rate_at(progress, *, peak: float, warmup: float, power: float,
                     schedule: str = "poly") -> tf.Tensor:
    """Learning rate for the update that follows `progress` of the run.

    Args:
      progress: the share of the run done (a float scalar): updates / num_train_steps, or,
        with a time budget, the share of it spent when that is further along.
      peak: the peak learning rate.
      warmup: "poly": the share of the run warming up linearly from 0 (num_warmup_steps /
        num_train_steps).
      power: "poly": the decay power.
      schedule: "poly" (Google's warmup and polynomial_decay from step 0, so with a small drop
        at the end of warmup) or "triangle" (TRIANGLE_START, TRIANGLE_PEAK_AT).

    Returns:
      A float32 scalar, 0 from progress 1 on.
    """
    progress = tf.minimum(tf.cast(progress, tf.float32), 1.0)
    if schedule == "triangle":
        rising = TRIANGLE_START + progress * (1.0 - TRIANGLE_START) / TRIANGLE_PEAK_AT
        return peak * tf.minimum(rising, (1.0 - progress) / (1.0 - TRIANGLE_PEAK_AT))
    decayed = peak * tf.pow(1.0 - progress, power)
    if not warmup:
        return decayed
    return tf.where(progress < warmup, peak * progress / warmup, decayed)


def unscale_and_clip(grads, divisor=1.0):
    """Divides the gradients by `divisor` (loss scale times micro-batches) and clips them to
    global norm CLIP_NORM, in one multiply per gradient; returns (clipped, norm, finite).

    The update is bound by passes over memory (110M floats for BERT-base), so unscaling,
    clipping and the finiteness check share one reduction and one multiply instead of a
    divide, an is-finite pass, the norm and a multiply (BERT-base bf16 clip + AdamW op time
    188 -> 161 ms: bench/README.md, "The work that is not a matmul"). The norm is finite exactly when every element
    is, except that squares past float32's range (an element beyond 1.8e19) count as
    non-finite too: such an update is skipped like an overflowed one (the caller skips updates
    that are not finite, so their clipped values do not matter).

    Returns:
      clipped: the gradients divided and clipped; norm: the global norm of the divided
      gradients (before clipping); finite: a bool scalar.
    """
    norm = tf.linalg.global_norm(grads) / divisor
    finite = tf.math.is_finite(norm)
    factor = CLIP_NORM / tf.maximum(norm, CLIP_NORM) / divisor
    return [g * factor for g in grads], norm, finite


class AdamWeightDecay(tf.Module):
    """Google BERT's Adam with decoupled weight decay over float32 master variables: without
    bias correction unless `bias_correction` (Keras's and PyTorch's Adam)."""

    compiles_large_updates = False  # see FUSED_UPDATE_MIN_PARAMETERS

    def __init__(self, variables_by_name: dict[str, tf.Variable], *, weight_decay_rate: float,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY,
                 exclude_from_layer_adaptation=EXCLUDE_FROM_LAYER_ADAPTATION,
                 bias_correction: bool = False, name: str | None = None):
        super().__init__(name=name)
        self.bias_correction = bias_correction
        self.names = list(variables_by_name)
        self.params = list(variables_by_name.values())
        self.weight_decay_rate = weight_decay_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.decays = [bool(weight_decay_rate) and not _matches(n, exclude_from_weight_decay)
                       for n in self.names]
        # Used by LAMB only: which variables get the trust ratio.
        self.adapted = [not _matches(n, exclude_from_layer_adaptation) for n in self.names]
        named = list(variables_by_name.items())
        self.m = [_zeros_slot(p, f"{n}/adam_m") for n, p in named]
        self.v = [_zeros_slot(p, f"{n}/adam_v") for n, p in named]
        self.fused = self.compiles_large_updates and (
            sum(p.shape.num_elements() for p in self.params) >= FUSED_UPDATE_MIN_PARAMETERS)
        self._compiled_update = tf.function(self._update, jit_compile=True)

    def apply(self, grads, learning_rate, step) -> None:
        """One update with `grads` (aligned with the variables), where `step` updates have been
        applied before; XLA-compiled for large models where `compiles_large_updates`."""
        update = self._compiled_update if self.fused else self._update
        update(grads, learning_rate, step)

    def slots_by_name(self) -> dict[str, tf.Variable]:
        slots = {}
        for n, m, v in zip(self.names, self.m, self.v, strict=True):
            slots[f"{n}/adam_m"] = m
            slots[f"{n}/adam_v"] = v
        return slots

    def _update(self, grads, learning_rate, step) -> None:
        """Google's AdamW update, bias-corrected for `step` (updates applied before) with
        `bias_correction`.

        TF's fused Adam kernel updates m, v and the variable in one pass over memory, where
        separate ops would make several. It scales the learning rate by
        sqrt(1 - beta2_power) / (1 - beta1_power): powers of 0 turn that correction off. The
        decay term lr * rate * w uses the weights before the update, so applying it first
        gives Google's update exactly."""
        learning_rate = tf.cast(learning_rate, tf.float32)
        t = tf.cast(step, tf.float32) + 1.0
        powers = (tf.pow(self.beta_1, t), tf.pow(self.beta_2, t)) if self.bias_correction \
            else (tf.constant(0.0), tf.constant(0.0))
        constants = dict(beta1_power=powers[0], beta2_power=powers[1],
                         beta1=tf.constant(self.beta_1), beta2=tf.constant(self.beta_2),
                         epsilon=tf.constant(self.epsilon))
        for param, m, v, grad, decays in zip(self.params, self.m, self.v, grads, self.decays,
                                             strict=True):
            if decays:
                param.assign_sub(learning_rate * self.weight_decay_rate * param)
            tf.raw_ops.ResourceApplyAdam(var=param.handle, m=m.handle, v=v.handle,
                                         lr=learning_rate, grad=grad, **constants)


class Lamb(AdamWeightDecay):
    """LAMB (You et al. 2019) in the form NVIDIA's BERT recipes use: bias-corrected Adam
    direction plus weight decay, scaled per variable by the trust ratio ||w|| / ||update||
    (not for variables matching exclude_from_layer_adaptation). No fused kernel: the ratio needs the update's norm before
    the update is applied."""

    compiles_large_updates = True

    def _update(self, grads, learning_rate, step) -> None:
        """The LAMB update; `step` (updates applied before) gives the bias correction."""
        t = tf.cast(step, tf.float32) + 1.0
        m_correction = 1.0 - tf.pow(self.beta_1, t)
        v_correction = 1.0 - tf.pow(self.beta_2, t)
        slots = zip(self.params, self.m, self.v, grads, self.decays, self.adapted, strict=True)
        for param, m, v, grad, decays, adapted in slots:
            next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
            next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
            update = (next_m / m_correction) / (tf.sqrt(next_v / v_correction) + self.epsilon)
            if decays:
                update += self.weight_decay_rate * param
            if adapted:
                w_norm = tf.norm(param)
                u_norm = tf.norm(update)
                update *= tf.where((w_norm > 0.0) & (u_norm > 0.0), w_norm / u_norm, 1.0)
            param.assign_sub(learning_rate * update)
            m.assign(next_m)
            v.assign(next_v)


def create_optimizer(optimizer_type: str, variables_by_name: dict[str, tf.Variable],
                     weight_decay_rate: float,
                     exclude_from_layer_adaptation=EXCLUDE_FROM_LAYER_ADAPTATION,
                     bias_correction: bool = False) -> AdamWeightDecay:
    """The optimizer of `optimizer_type` over `variables_by_name`.

    Args:
      optimizer_type: "lamb" or "adamw".
      variables_by_name: float32 master variables under their checkpoint names.
      weight_decay_rate: decoupled weight decay (never on LayerNorm and bias).
      exclude_from_layer_adaptation: regexes of the variables LAMB gives no trust ratio;
        empty = every variable has one (NVIDIA's TensorFlow LAMB). Unused by adamw.
      bias_correction: adamw: correct Adam's moments (LAMB always does).

    Returns:
      An AdamWeightDecay (or its subclass Lamb).
    """
    if optimizer_type not in OPTIMIZER_TYPES:
        raise ValueError(
            f"--optimizer_type must be one of {OPTIMIZER_TYPES}, got {optimizer_type!r}")
    cls = Lamb if optimizer_type == "lamb" else AdamWeightDecay
    return cls(variables_by_name, weight_decay_rate=weight_decay_rate,
               exclude_from_layer_adaptation=tuple(exclude_from_layer_adaptation),
               bias_correction=bias_correction, name="optimizer")


def _matches(name: str, patterns) -> bool:
    return any(re.search(pattern, name) for pattern in patterns)


def _zeros_slot(param: tf.Variable, name: str) -> tf.Variable:
    return tf.Variable(tf.zeros(param.shape, tf.float32), trainable=False, name=name)
