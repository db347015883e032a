"""BERT pretraining with Horovod data parallelism: the loop, top to bottom.

One optimizer update = `num_accumulation_steps` micro-batches on every rank.
Each micro-batch adds its gradient of

    mlm_loss_sum / total_mask_weight + nsp_loss_sum / total_examples

(totals over all micro-batches of the update on all ranks) into local
accumulators; then ONE allreduce sums the accumulators, so 2 ranks x batch b,
1 rank x batch 2b and 2 micro-batches of b all take the same update. The
totals come from the data (mask weights), before the forward pass, by a
scalar allreduce. After the gradient allreduce: unscale (fp16), check
finiteness (every rank sees the same sums, so every rank decides the same),
clip to global norm 1.0, step; a non-finite update is skipped and lowers the
loss scale.

Only rank 0 writes (report.Reporter). A checkpoint holds the model, optimizer
slots, global step, loss scale and the input position, all by name; rerunning
the same command resumes exactly: the data, the dynamic masks and the dropout
masks are functions of (--seed, rank, input position), not of RNG state.
"""

import math
import sys
import time

import tensorflow as tf

from bert_tf.data import input_pipeline, records
from bert_tf.data.files import InputDataError, expand_patterns
from bert_tf.data.tokenization import FullTokenizer, VocabError
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.model.modeling import (
    METRIC_SUMS,
    BertForPreTraining,
    metrics_from_sums,
    pretraining_loss,
    variables_by_name,
)
from bert_tf.train import distributed, optimization, precision
from bert_tf.train.config import PretrainingConfig, PretrainingConfigError
from bert_tf.train.report import OutputDirError, Reporter

GLOBAL_STEP = "global_step"
INPUT_POSITION = "input_batches_consumed"  # micro-batches this run's data has consumed per rank
TIMING_WARMUP_UPDATES = 2  # excluded from the average throughput (tracing, compilation)
LOGGED_METRICS = ("loss", "masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy",
                  "next_sentence_accuracy", "learning_rate", "loss_scale", "grad_norm")


class TrainingError(RuntimeError):
    """A run that cannot go on; the message says why and what to do."""


class PretrainingState(tf.Module):
    """Model, optimizer, loss scale, step and input position (everything a
    checkpoint holds), plus the two halves of an update: `gradients` (one
    micro-batch forward/backward, XLA-compiled with --use_xla; `accumulate` sums
    them over micro-batches) and `apply_update` (allreduce, unscale, finiteness,
    clip, step)."""

    def __init__(self, bert_config: BertConfig, config: PretrainingConfig):
        super().__init__(name="pretraining")
        self.config = config
        on_gpu = precision.has_gpu()
        self.model = BertForPreTraining(bert_config, precision.compute_dtype(config.precision))
        self.params = variables_by_name(self.model)
        self.optimizer = optimization.create_optimizer(
            config.optimizer_type, self.params, config.weight_decay_rate)
        self.loss_scale = precision.DynamicLossScale(
            enabled=precision.uses_loss_scaling(config.precision, on_gpu))
        # Folded with each micro-batch's input position into its dropout seed.
        self.dropout_seed = tf.constant([config.seed, distributed.rank()], tf.int64)
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name=GLOBAL_STEP)
        self.input_position = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name=INPUT_POSITION)
        # Gradient sums over an update's micro-batches (none needed for one micro-batch).
        accumulating = config.num_accumulation_steps > 1
        self.accumulators = [tf.Variable(tf.zeros_like(v), trainable=False)
                             for v in self.params.values()] if accumulating else []
        self.metric_sums = tf.Variable(tf.zeros([len(METRIC_SUMS)]), trainable=False)
        self.decay_power = optimization.decay_power(config.optimizer_type)
        self.gradients = tf.function(self._gradients, jit_compile=config.use_xla)
        self.accumulate = tf.function(self._accumulate, jit_compile=config.use_xla)
        self.apply_update = tf.function(self._apply_update)
        # Called from apply_update after the allreduce, so it can be compiled: XLA fuses the
        # optimizer's per-variable elementwise passes (LAMB, BERT-base, CPU: 0.92 -> 0.61 s).
        self.apply_optimizer = tf.function(self.optimizer.apply, jit_compile=config.use_xla)

    def checkpoint_variables(self) -> dict[str, tf.Variable]:
        return {**self.params, **self.optimizer.slots_by_name(),
                **self.loss_scale.variables_by_name(),
                GLOBAL_STEP: self.global_step, INPUT_POSITION: self.input_position}

    def _gradients(self, features, totals):
        """This micro-batch's (loss-scaled) gradients and metric sums; counts it as consumed
        input. totals = [mask weight, examples] over the whole update on all ranks."""
        params = list(self.params.values())
        # Every rank and micro-batch gets its own masks; a resumed run the same ones.
        dropout_seed = tf.random.experimental.stateless_fold_in(self.dropout_seed,
                                                                self.input_position)
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True, dropout_seed=dropout_seed)
            sums = pretraining_loss(outputs, features)
            loss = (sums["mlm_loss_sum"] / tf.maximum(totals[0], 1.0)
                    + sums["nsp_loss_sum"] / tf.maximum(totals[1], 1.0))
            scaled_loss = loss * self.loss_scale.scale
        grads = tape.gradient(scaled_loss, params)
        self.input_position.assign_add(1)
        grads = [tf.zeros_like(p) if g is None else tf.convert_to_tensor(g)
                 for p, g in zip(params, grads, strict=True)]
        return grads, tf.stack([sums[name] for name in METRIC_SUMS])

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

    def _apply_update(self, grads, metric_sums):
        """Allreduces the update's gradients, then steps unless one is non-finite."""
        config = self.config
        grads = distributed.allreduce_sum(grads, fp16_compression=config.fp16_allreduce)
        (metric_sums,) = distributed.allreduce_sum([metric_sums])
        loss_scale = self.loss_scale.scale.read_value()
        grads = [g / loss_scale for g in grads]
        finite = precision.all_finite(grads)
        clipped, grad_norm = optimization.clip_by_global_norm(grads, finite)
        learning_rate = optimization.learning_rate_at(
            self.global_step, peak=config.learning_rate, num_train_steps=config.num_train_steps,
            num_warmup_steps=config.num_warmup_steps, power=self.decay_power)
        if finite:
            self.apply_optimizer(clipped, learning_rate, self.global_step)
            self.global_step.assign_add(1)
        self.loss_scale.update(finite)
        return {"finite": finite, "metric_sums": metric_sums, "learning_rate": learning_rate,
                "grad_norm": grad_norm, "loss_scale": loss_scale}

    def update(self, batches) -> dict:
        """One optimizer update from the next `num_accumulation_steps` micro-batches of this
        rank's `batches` (an iterator, or a list of exactly that many); returns its metrics."""
        batches = iter(batches)
        micro_batches = [next(batches) for _ in range(self.config.num_accumulation_steps)]
        local_totals = tf.stack([
            tf.add_n([tf.reduce_sum(b["masked_lm_weights"]) for b in micro_batches]),
            tf.cast(tf.add_n([tf.shape(b["input_ids"])[0] for b in micro_batches]), tf.float32),
        ])
        (totals,) = distributed.allreduce_sum([local_totals])
        if len(micro_batches) == 1:  # no accumulators: saves a copy of the gradients
            grads, metric_sums = self.gradients(micro_batches[0], totals)
        else:
            for i, features in enumerate(micro_batches):
                self.accumulate(features, totals, first=i == 0)
            grads = [a.read_value() for a in self.accumulators]
            metric_sums = self.metric_sums.read_value()
        return update_metrics(self.apply_update(grads, metric_sums))

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())


def update_metrics(result) -> dict:
    """Python numbers from apply_update's result."""
    return {
        "finite": bool(result["finite"]),
        **metrics_from_sums(result["metric_sums"].numpy().tolist()),
        "learning_rate": float(result["learning_rate"]),
        "grad_norm": float(result["grad_norm"]),
        "loss_scale": float(result["loss_scale"]),
    }


# --------------------------------------------------------------------------- the run


def run(config: PretrainingConfig) -> dict:
    """Trains and/or evaluates as the config says; returns the final summary."""
    config.validate()
    distributed.init()
    distributed.pin_gpu_to_local_rank()
    with Reporter(config.output_dir, enabled=distributed.rank() == 0) as report:
        distributed.check_shared_output_dir(config.output_dir)
        bert_config = load_bert_config(config.bert_config_file)
        _enable_amp(config, report)
        masking = load_dynamic_masking(config, bert_config) if config.dynamic_masking else None
        train_files = validated_files(config, "input_files", bert_config) if config.do_train else []
        eval_files = validated_files(config, "eval_files", bert_config) if config.do_eval else []

        tf.random.set_seed(config.seed)
        state = PretrainingState(bert_config, config)
        _restore(state, config, report)
        distributed.broadcast_variables(list(state.checkpoint_variables().values()))
        if report.enabled:
            bert_config.to_json_file(f"{config.output_dir}/bert_config.json")

        summary = {}
        if config.do_train:
            summary["train"] = train(state, config, train_files, masking, report)
        if config.do_eval:
            summary["eval"] = evaluate(state.model, config, eval_files, masking)
            report.summary("eval_results", summary["eval"])
        return summary


def train(state: PretrainingState, config: PretrainingConfig, files, masking,
          report: Reporter) -> dict:
    """Updates until --num_train_steps, logging every --log_every_n_steps and saving every
    --save_checkpoints_steps (and at the end); returns the throughput summary."""
    start_step = state.step
    if start_step >= config.num_train_steps:
        report.log(f"global_step {start_step} >= --num_train_steps: nothing to train")
        return {"global_step": start_step}
    num_ranks = distributed.size()
    sequences_per_update = (config.train_batch_size * config.num_accumulation_steps
                            * num_ranks)
    report.log(f"training from step {start_step} to {config.num_train_steps}: {num_ranks} "
               f"rank(s) x {config.num_accumulation_steps} micro-batch(es) x "
               f"{config.train_batch_size} = {sequences_per_update} sequences per update, "
               f"{config.precision}, xla={config.use_xla}, "
               f"dynamic_masking={config.dynamic_masking}")
    if len(files) < num_ranks:
        report.log(f"{len(files)} input file(s) for {num_ranks} ranks: sharding by record "
                   "(more files than ranks reads faster)")
    batches = iter(train_dataset(config, files, distributed.rank(), num_ranks, masking,
                                 skip_batches=int(state.input_position.numpy())))
    report.start_metrics(start_step)
    meter = Throughput(sequences_per_update)
    nonfinite_in_a_row, step = 0, start_step
    with distributed.Watchdog(config.peer_timeout_seconds) as watchdog:
        while step < config.num_train_steps:
            metrics = meter.time(lambda: _guarded_update(state, batches, config))
            step = state.step
            watchdog.beat()
            if not (metrics["finite"] and math.isfinite(metrics["loss"])):
                nonfinite_in_a_row += 1
                _check_nonfinite(state, config, nonfinite_in_a_row, report)
                continue
            nonfinite_in_a_row = 0
            last = step == config.num_train_steps
            if step % config.log_every_n_steps == 0 or last:
                report.metrics({"step": step, **{k: metrics[k] for k in LOGGED_METRICS},
                                **meter.interval(), "num_ranks": num_ranks})
            if step % config.save_checkpoints_steps == 0 or last:
                _save(state, config, report)
                watchdog.beat()
    summary = {**meter.summary(config.time_to_train_sequences), "global_step": step,
               "ranks": num_ranks, "sequences_per_update": sequences_per_update,
               "final_loss": metrics["loss"],
               "final_masked_lm_accuracy": metrics["masked_lm_accuracy"]}
    report.summary("train_summary", summary)
    return summary


class Throughput:
    """Times updates: sequences/s per logging interval and over the run (without the first
    TIMING_WARMUP_UPDATES, which trace and compile)."""

    def __init__(self, sequences_per_update: int):
        self.sequences_per_update = sequences_per_update
        self.update_times = []
        self._interval_start, self._interval_updates = time.perf_counter(), 0

    def time(self, update):
        started = time.perf_counter()
        result = update()
        self.update_times.append(time.perf_counter() - started)
        self._interval_updates += 1
        return result

    def interval(self) -> dict:
        """Sequences/s and seconds per update since the last call."""
        elapsed = time.perf_counter() - self._interval_start
        updates = self._interval_updates
        self._interval_start, self._interval_updates = time.perf_counter(), 0
        return {"sequences_per_second": updates * self.sequences_per_update / elapsed,
                "step_time": elapsed / updates}

    def summary(self, time_to_train_sequences: float) -> dict:
        timed = self.update_times[TIMING_WARMUP_UPDATES:] or self.update_times
        seconds = sum(timed)
        per_second = len(timed) * self.sequences_per_update / seconds if seconds else 0.0
        return {
            "updates_this_run": len(self.update_times),
            "timed_updates": len(timed),
            "avg_sequences_per_second": per_second,
            "time_to_train_sequences": time_to_train_sequences,
            "time_to_train_hours": (time_to_train_sequences / per_second / 3600
                                    if per_second else None),
        }


def _check_nonfinite(state, config, in_a_row: int, report: Reporter) -> None:
    """Logs a skipped update; stops the run after --max_nonfinite_updates in a row."""
    report.log(f"step {state.step}: non-finite gradients, update skipped "
               f"(loss scale now {float(state.loss_scale.scale.numpy()):g})")
    if in_a_row >= config.max_nonfinite_updates:
        raise TrainingError(
            f"{in_a_row} updates in a row had a non-finite loss or gradients (at step "
            f"{state.step}); stopping. The last good checkpoint is "
            f"{checkpoints.latest_checkpoint(config.output_dir)}. Usual causes: "
            "--learning_rate too high, fp16 overflow (try --precision=bf16 or fp32), or bad "
            "data (token ids >= vocab_size)")


def _guarded_update(state: PretrainingState, batches, config) -> dict:
    """state.update, with the two errors users meet turned into advice."""
    try:
        return state.update(batches)
    except tf.errors.OpError as e:
        if "indices" in e.message and "not in [0," in e.message:
            raise TrainingError(
                f"a token id in the data is outside the embedding table ({e.message.strip()}); "
                f"vocab_size in --bert_config_file={config.bert_config_file} is smaller than "
                "the vocabulary the data was made with: use the bert_config.json whose "
                "vocab_size matches the vocab file given to create_pretraining_data.py") from None
        if "Horovod has been shut down" in e.message:
            raise TrainingError(
                f"rank {distributed.rank()}: another rank failed or exited (Horovod shut down "
                f"at step {state.step}); see that rank's error above. Rerun the same command "
                f"to resume from the last checkpoint in --output_dir={config.output_dir}"
            ) from None
        raise


def evaluate(model, config: PretrainingConfig, files, masking=None) -> dict:
    """Masked-LM loss/accuracy and NSP accuracy over up to --max_eval_steps batches per rank.
    With `masking` (unmasked records) the masks are fixed by --seed and the batch order."""
    rank, num_ranks = distributed.rank(), distributed.size()
    dataset = input_pipeline.pretraining_dataset(
        files, batch_size=config.eval_batch_size, max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq, is_training=False,
        rank=rank, num_ranks=num_ranks, seed=config.seed, dynamic_masking=masking)

    @tf.function(jit_compile=config.use_xla)
    def eval_sums(features):
        sums = pretraining_loss(model(features, training=False), features)
        return tf.stack([sums[name] for name in METRIC_SUMS])

    totals = tf.zeros([len(METRIC_SUMS)])
    for features in dataset.take(config.max_eval_steps):
        totals += eval_sums(features)
    (totals,) = distributed.allreduce_sum([totals])
    sums = dict(zip(METRIC_SUMS, totals.numpy().tolist(), strict=True))
    if sums["num_examples"] == 0:
        raise TrainingError(f"--eval_files={config.eval_files} gave no batch: each of the "
                            f"{num_ranks} rank(s) needs at least --eval_batch_size="
                            f"{config.eval_batch_size} records")
    return {**metrics_from_sums(sums), "examples": int(sums["num_examples"])}


def train_dataset(config: PretrainingConfig, files, rank, num_ranks, masking=None,
                  skip_batches=0):
    """This rank's training micro-batches after the first `skip_batches` (a resumed run's input
    position); with `masking`, masks are chosen per batch, seeded by its index."""
    return input_pipeline.pretraining_dataset(
        files, batch_size=config.train_batch_size, max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq, is_training=True,
        rank=rank, num_ranks=num_ranks, seed=config.seed, dynamic_masking=masking,
        skip_batches=skip_batches)


# --------------------------------------------------------------------------- set-up helpers


def _restore(state: PretrainingState, config: PretrainingConfig, report: Reporter) -> None:
    """Rank 0 resumes from --output_dir, else initialises from --init_checkpoint;
    the caller then broadcasts every variable."""
    if not report.enabled:
        return
    latest = checkpoints.latest_checkpoint(config.output_dir)
    if latest:
        checkpoints.restore(latest, state.checkpoint_variables(), require_all=True)
        report.log(f"resumed from {latest} (step {state.step}, "
                   f"input position {int(state.input_position.numpy())})")
    elif config.init_checkpoint:
        loaded = checkpoints.init_from_checkpoint(config.init_checkpoint, state.params)
        report.log(f"initialised from {config.init_checkpoint}: {len(loaded.loaded)} loaded, "
                   f"{len(loaded.missing)} new, {len(loaded.unused)} unused")


def _save(state: PretrainingState, config: PretrainingConfig, report: Reporter) -> None:
    if report.enabled:
        prefix = checkpoints.save_checkpoint(state.checkpoint_variables(), config.output_dir,
                                             state.step, keep_max=config.keep_checkpoint_max)
        report.log(f"saved {prefix}")


def _enable_amp(config: PretrainingConfig, report: Reporter) -> None:
    if config.precision != "amp":
        return
    option = precision.enable_auto_mixed_precision(precision.has_gpu())
    report.log(f"--precision=amp: Grappler rewrite {option} on")
    if config.use_xla:
        report.log("warning: --use_xla compiles forward/backward without the AMP rewrite (XLA "
                   "bypasses Grappler): that part runs in float32")


def load_bert_config(path: str) -> BertConfig:
    if not tf.io.gfile.exists(path):
        raise TrainingError(f"--bert_config_file={path} does not exist")
    return BertConfig.from_json_file(path)


def load_dynamic_masking(config: PretrainingConfig,
                         bert_config: BertConfig) -> input_pipeline.DynamicMasking:
    """[MASK], the special ids and the random-token range from --vocab_file."""
    tokenizer = FullTokenizer(config.vocab_file)
    if tokenizer.vocab_size != bert_config.vocab_size:
        raise TrainingError(
            f"--vocab_file={config.vocab_file} has {tokenizer.vocab_size} tokens but vocab_size "
            f"is {bert_config.vocab_size} in --bert_config_file={config.bert_config_file}; "
            "--dynamic_masking needs the vocab file the data was made with and the "
            "bert_config.json made for it")
    return input_pipeline.DynamicMasking.from_tokenizer(tokenizer)


def validated_files(config: PretrainingConfig, flag: str, bert_config: BertConfig) -> list[str]:
    """The files of --input_files or --eval_files, checked once (records.validate_records)."""
    try:
        files = expand_patterns(getattr(config, flag))
    except InputDataError as e:
        raise InputDataError(f"--{flag}: {e}") from None
    return records.validate_records(files, config.max_seq_length, config.max_predictions_per_seq,
                                    vocab_size=bert_config.vocab_size,
                                    masked=not config.dynamic_masking, flag=flag)


# The errors a user can fix: reported on stderr without a traceback.
USER_ERRORS = (TrainingError, PretrainingConfigError, BertConfigError, checkpoints.CheckpointError,
               InputDataError, precision.PrecisionError, VocabError, OutputDirError)


def main(config: PretrainingConfig) -> None:
    """Entry point for run_pretraining.py: runs, or exits non-zero with a clear message."""
    try:
        run(config)
    except USER_ERRORS as e:
        print(f"run_pretraining: error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
