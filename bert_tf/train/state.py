"""The update machinery every training run shares: pretraining and fine-tuning alike.

A `TrainState` holds a model, its optimizer, the loss scale, the step and the input position
(everything a checkpoint holds) and performs one optimizer update from a list of micro-batches:

    totals (allreduced)  ->  per micro-batch: forward/backward (XLA with --use_xla),
    accumulate  ->  ONE gradient allreduce (mean; + one of the metric sums and the stop
    flag)  ->  unscale, finiteness and clip (one pass)  ->  step

A task supplies three things by subclassing: `loss_sums` (the per-batch sums named by
`metric_names`, from which losses and accuracies follow), `objective` (the sums made into a
micro-batch's loss, normalised by `totals`) and `local_totals` (what the normalisers count,
summed over this rank's micro-batches before the allreduce). Normalising by totals over every
micro-batch of every rank is what makes 2 ranks x batch b, 1 rank x batch 2b and 2 micro-batches
of b take the same update.

Magnitudes (fp16): the totals the objective sees are the update's totals divided by its
micro-batches on all ranks (K), i.e. those of an average micro-batch, so each micro-batch's
backward pass differentiates a mean loss times the loss scale, as NVIDIA's TF2 BERT does
(official/modeling/model_training_utils.py scales each micro-batch's mean loss and divides by
the accumulation count after the allreduce). Dividing by the whole update's totals instead made
every half-precision gradient K times smaller (1,024x for BERT-large phase 1 on 8 GPUs),
pushing them into float16's subnormals. The allreduce averages each rank's sum of its
micro-batch gradients over ranks, and the clipping's multiply divides by the micro-batches and
the loss scale: the same gradient as normalising by the totals (exactly, for powers of two).
With --fp16_allreduce the division comes before the allreduce, so it compresses unscaled
gradients (NVIDIA's order) rather than scaled ones that can pass float16's 65504.

A stop request (a preemption signal, faults.StopSignals) rides as one more element in the
allreduce of the metric sums, so every rank learns in the same update that some rank was asked
to stop, at no extra collective.
"""

import dataclasses
import functools
import time

import tensorflow as tf

from bert_tf.model.modeling import variables_by_name
from bert_tf.train import distributed, optimization, precision
from bert_tf.train.config import duration_seconds

GLOBAL_STEP = "global_step"
INPUT_POSITION = "input_batches_consumed"  # micro-batches this run's data has consumed per rank
# Wall-clock seconds of the updates so far, rank 0's clock (--max_train_time). Checkpoints
# written before it existed resume with 0 spent (resume.py).
TRAIN_SECONDS = "train_seconds"


class TrainState(tf.Module):
    """Model, optimizer, loss scale, step and input position, plus the two halves of an update:
    `gradients` (one micro-batch forward/backward, XLA-compiled with use_xla; `accumulate` sums
    them over micro-batches) and `apply_update` (allreduce, unscale, finiteness, clip, step).

    Args:
      model: a module with `named_variables()` (bert_tf.model), called by `loss_sums`.
      config: any object with the training fields of PretrainingConfig (optimizer_type,
        weight_decay_rate, precision, seed, num_accumulation_steps, use_xla, fp16_allreduce,
        learning_rate, learning_rate_schedule, num_train_steps, num_warmup_steps,
        max_train_time).
      metric_names: names of the sums `loss_sums` returns, in the order they are allreduced.
      name: the module's name.
      exclude_from_layer_adaptation: regexes of the variables LAMB gives no trust ratio.
      untrained: name prefixes of variables the loss does not reach (e.g. the pooler without
        next sentence prediction). They are checkpointed but get no optimizer step: with a zero
        gradient, weight decay alone would still shrink them, and LAMB's trust ratio makes that
        lr x the weight per step, which took the pooler to 0 (docs/budget.md).
    """

    def __init__(self, model, config, metric_names, name="train_state",
                 exclude_from_layer_adaptation=optimization.EXCLUDE_FROM_LAYER_ADAPTATION,
                 untrained=()):
        super().__init__(name=name)
        self.config = config
        self.metric_names = tuple(metric_names)
        self.model = model
        self.params = variables_by_name(model)
        untrained = tuple(untrained)
        self.trained = {name: v for name, v in self.params.items()
                        if not name.startswith(untrained)}
        self.optimizer = optimization.create_optimizer(
            config.optimizer_type, self.trained, config.weight_decay_rate,
            exclude_from_layer_adaptation, bias_correction=config.adam_bias_correction)
        precision.configure_xla_matmuls(config.precision, config.use_xla, precision.has_gpu())
        self.loss_scale = precision.DynamicLossScale(
            enabled=precision.uses_loss_scaling(config.precision, precision.has_gpu()))
        # Folded with each micro-batch's input position into its dropout seed; a variable, as
        # an elastic run's rank can change (set_rank).
        self.dropout_seed = tf.Variable([config.seed, distributed.rank()], dtype=tf.int64,
                                        trainable=False)
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name=GLOBAL_STEP)
        self.input_position = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name=INPUT_POSITION)
        self.train_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                         name=TRAIN_SECONDS)
        self.max_train_seconds = duration_seconds(config.max_train_time)
        self._clock = None  # when this process's previous update began (time.monotonic)
        # Gradient sums over an update's micro-batches (none needed for one micro-batch).
        self.accumulators = []
        # The divisor of the accumulated gradients, read when apply_update runs: a value
        # captured when it was traced would go stale when an elastic run's world size changes.
        self.accumulation_divisor = tf.Variable(float(config.num_accumulation_steps),
                                                trainable=False, name="accumulation_divisor")
        self.set_accumulation_steps(config.num_accumulation_steps)
        self.metric_sums = tf.Variable(tf.zeros([len(self.metric_names)]), trainable=False)
        self.decay_power = optimization.decay_power(config.optimizer_type)
        # Without AutoGraph: nothing here branches on a tensor but the one tf.cond in
        # _apply_update, and converting the model's and optimizer's Python made a short run
        # 18.1 s where it is 14.7 s (bench/startup.py in bench/README.md, "Start-up").
        graph = functools.partial(tf.function, autograph=False)
        self.gradients = graph(self._gradients, jit_compile=config.use_xla)
        self.accumulate = graph(self._accumulate, jit_compile=config.use_xla)
        self.apply_update = graph(self._apply_update)
        # Called from apply_update after the allreduce, so it can be compiled: XLA fuses the
        # optimizer's per-variable elementwise passes (LAMB, BERT-base, CPU: 1.40 -> 1.51
        # sequences/s, bench/train_step.py as reported in bench/README.md).
        self.apply_optimizer = graph(self.optimizer.apply, jit_compile=config.use_xla)

    def set_accumulation_steps(self, steps: int) -> None:
        """Micro-batches per update from now on (an elastic run's world size changed)."""
        if steps != self.config.num_accumulation_steps:
            self.config = dataclasses.replace(self.config, num_accumulation_steps=steps)
        self.accumulation_divisor.assign(float(steps))
        if steps > 1 and not self.accumulators:
            self.accumulators = [tf.Variable(tf.zeros_like(v), trainable=False)
                                 for v in self.trained.values()]

    def set_rank(self, rank: int) -> None:
        """This process's rank from now on (the dropout masks depend on it)."""
        self.dropout_seed.assign([self.config.seed, rank])

    # ------------------------------------------------------------------ the task's part

    def loss_sums(self, features, dropout_seed) -> dict:
        """This micro-batch's sums (float32 scalars), keyed by at least `metric_names`."""
        raise NotImplementedError

    def objective(self, sums, totals):
        """The differentiable loss of this micro-batch: its sums normalised by `totals`, the
        update's totals per micro-batch (divide with tf.math.divide_no_nan: they can be 0)."""
        raise NotImplementedError

    def local_totals(self, micro_batches) -> tf.Tensor:
        """The normalisers' counts over this rank's micro-batches (a float32 vector)."""
        raise NotImplementedError

    def metrics_from_sums(self, sums) -> dict:
        """Python-float metrics from the allreduced sums (a list in `metric_names` order)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the update

    def checkpoint_variables(self) -> dict[str, tf.Variable]:
        return {**self.params, **self.optimizer.slots_by_name(),
                **self.loss_scale.variables_by_name(),
                GLOBAL_STEP: self.global_step, INPUT_POSITION: self.input_position,
                TRAIN_SECONDS: self.train_seconds}

    def micro_batches_per_update(self) -> int:
        """K: the micro-batches of one update on all ranks."""
        return self.config.num_accumulation_steps * distributed.size()

    def _gradients(self, features, totals):
        """This micro-batch's (loss-scaled) gradients and metric sums; counts it as consumed
        input. totals: the normalisers over the whole update on all ranks, divided by K."""
        params = list(self.trained.values())
        # Every rank and micro-batch gets its own masks; a resumed run the same ones.
        dropout_seed = tf.random.experimental.stateless_fold_in(self.dropout_seed,
                                                                self.input_position)
        with tf.GradientTape() as tape:
            sums = self.loss_sums(features, dropout_seed)
            scaled_loss = self.objective(sums, totals) * self.loss_scale.scale
        grads = tape.gradient(scaled_loss, params)
        self.input_position.assign_add(1)
        grads = [tf.zeros_like(p) if g is None else tf.convert_to_tensor(g)
                 for p, g in zip(params, grads, strict=True)]
        return grads, tf.stack([sums[name] for name in self.metric_names])

    def _accumulate(self, features, totals, first: bool):
        """Adds this micro-batch's gradients and metric sums to the accumulators; the first
        micro-batch of an update overwrites them (no zeroing pass)."""
        grads, metric_sums = self._gradients(features, totals)
        for accumulator, grad in zip([*self.accumulators, self.metric_sums],
                                     [*grads, metric_sums], strict=True):
            if first:
                accumulator.assign(grad)
            else:
                accumulator.assign_add(grad)

    def _apply_update(self, grads, metric_sums, stop_requested=False, chief_seconds=0.0):
        """Allreduces the update's gradients, then steps unless one is non-finite. The result's
        `stop_requested` is true on every rank when `stop_requested` was on any.
        `chief_seconds`: on rank 0, the wall time since its previous update began (0 on the
        others), added to train_seconds on every rank, so all follow one clock."""
        config = self.config
        loss_scale = self.loss_scale.scale.read_value()
        divisor = loss_scale * self.accumulation_divisor
        if config.fp16_allreduce:
            # Unscaled before the allreduce, as NVIDIA's TF2 BERT does, so that float16
            # compression sees each rank's mean gradient (scaled ones can pass 65504).
            grads, divisor = [g / divisor for g in grads], tf.constant(1.0)
        # A float32 allreduce is linear: dividing after it, in the clipping's multiply, gives
        # the same average in one pass less over memory. A non-finite local gradient stays
        # non-finite in the average, so every rank skips the same update.
        grads = distributed.allreduce_mean(grads, fp16_compression=config.fp16_allreduce)
        (sums_and_stops,) = distributed.allreduce_sum([tf.concat(
            [metric_sums, [tf.cast(stop_requested, tf.float32), chief_seconds]], axis=0)])
        metric_sums, stop_requests = sums_and_stops[:-2], sums_and_stops[-2]
        self.train_seconds.assign_add(tf.cast(sums_and_stops[-1], tf.float64))
        clipped, grad_norm, finite = optimization.unscale_and_clip(grads, divisor)
        learning_rate = optimization.learning_rate_at(
            self._progress(), peak=config.learning_rate,
            warmup=config.num_warmup_steps / config.num_train_steps, power=self.decay_power,
            schedule=config.learning_rate_schedule)

        def take_the_step():
            self.apply_optimizer(clipped, learning_rate, self.global_step)
            self.global_step.assign_add(1)

        tf.cond(finite, take_the_step, lambda: None)  # else no weight, slot or step changes
        self.loss_scale.update(finite)
        return {"finite": finite, "metric_sums": metric_sums, "learning_rate": learning_rate,
                "grad_norm": grad_norm, "loss_scale": loss_scale,
                "stop_requested": stop_requests > 0}

    def update(self, batches, stop_requested=lambda: False) -> dict:
        """One optimizer update from the next `num_accumulation_steps` micro-batches of this
        rank's `batches` (an iterator, or a list of exactly that many); returns its metrics.
        `stop_requested()` is asked after the forward/backward passes, so a signal that arrives
        during them stops the run after this update."""
        batches = iter(batches)
        # All before the first forward pass (their totals normalise each micro-batch's loss);
        # the training pipeline makes them one update ahead (input_pipeline batches_per_update).
        micro_batches = [next(batches) for _ in range(self.config.num_accumulation_steps)]
        (totals,) = distributed.allreduce_sum([self.local_totals(micro_batches)])
        totals /= float(self.micro_batches_per_update())
        if len(micro_batches) == 1:  # no accumulators: saves a copy of the gradients
            grads, metric_sums = self.gradients(micro_batches[0], totals)
        else:
            for i, features in enumerate(micro_batches):
                self.accumulate(features, totals, first=i == 0)
            grads = [a.read_value() for a in self.accumulators]
            metric_sums = self.metric_sums.read_value()
        stop = tf.constant(bool(stop_requested()))
        return self.update_metrics(self.apply_update(grads, metric_sums, stop,
                                                     tf.constant(self._chief_seconds())))

    def _chief_seconds(self) -> float:
        """On rank 0: the seconds since its previous update began (0 at the first), which
        count its tracing, input waits, logging and checkpoints; 0.0 on the other ranks."""
        now = time.monotonic()
        elapsed = now - self._clock if self._clock is not None else 0.0
        self._clock = now
        return elapsed if distributed.rank() == 0 else 0.0

    def _progress(self):
        """The share of the run done: of num_train_steps, or of the time budget if further."""
        progress = tf.cast(self.global_step, tf.float32) / float(self.config.num_train_steps)
        if self.max_train_seconds:
            spent = tf.cast(self.train_seconds / self.max_train_seconds, tf.float32)
            progress = tf.maximum(progress, spent)
        return progress

    def finished(self) -> bool:
        """Whether num_train_steps are done or the time budget is spent."""
        return (self.step >= self.config.num_train_steps or bool(self.max_train_seconds)
                and float(self.train_seconds.numpy()) >= self.max_train_seconds)

    def update_metrics(self, result) -> dict:
        """Python numbers from apply_update's result."""
        return update_metrics(result, self.metrics_from_sums)

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())


def update_metrics(result, metrics_from_sums) -> dict:
    """Python numbers from an apply_update result.

    Args:
      result: what TrainState.apply_update returned.
      metrics_from_sums: the task's function from the list of metric sums to named metrics.
    """
    return {
        "finite": bool(result["finite"]),
        **metrics_from_sums(result["metric_sums"].numpy().tolist()),
        "learning_rate": float(result["learning_rate"]),
        "grad_norm": float(result["grad_norm"]),
        "loss_scale": float(result["loss_scale"]),
        "stop_requested": bool(result["stop_requested"]),
    }
