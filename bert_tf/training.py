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

Only rank 0 writes checkpoints, metrics.jsonl and TensorBoard summaries.
A checkpoint holds the model, optimizer slots, global step, loss scale and the
input position, all by name; rerunning the same command resumes exactly: the
data, the dynamic masks and the dropout masks are functions of (--seed, rank,
input position), not of RNG state.
"""

import json
import os
import sys
import tempfile
import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from bert_tf import checkpoints, distributed, input_pipeline, optimization, precision
from bert_tf.config import BertConfig, BertConfigError
from bert_tf.flags import PretrainingConfig, PretrainingConfigError
from bert_tf.modeling import BertForPreTraining, pretraining_loss, variables_by_name
from bert_tf.tokenization import FullTokenizer, VocabError

# Per-update sums, allreduced with the gradients, from which metrics are computed.
METRIC_SUMS = ("mlm_loss_sum", "mlm_weight_sum", "mlm_correct_sum", "nsp_loss_sum",
               "nsp_correct_sum", "num_examples")
GLOBAL_STEP = "global_step"
INPUT_POSITION = "input_batches_consumed"  # micro-batches this run's data has consumed per rank
RECORDS_CHECKED_PER_FILE = 16
TIMING_WARMUP_UPDATES = 2  # excluded from the average throughput (tracing, compilation)
# TensorBoard shows a summary as a scalar plot by this metadata (what tf.summary.scalar
# writes; that one needs the tensorboard package, which tensorflow-cpu does not install).
SCALAR_SUMMARY = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


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

    def update(self, micro_batches) -> dict:
        """One optimizer update from this rank's micro-batches; returns metrics."""
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


def update_metrics(result) -> dict:
    """Python numbers from apply_update's result."""
    sums = dict(zip(METRIC_SUMS, result["metric_sums"].numpy().tolist(), strict=True))
    weight, examples = max(sums["mlm_weight_sum"], 1e-5), max(sums["num_examples"], 1.0)
    mlm_loss, nsp_loss = sums["mlm_loss_sum"] / weight, sums["nsp_loss_sum"] / examples
    return {
        "finite": bool(result["finite"]),
        "loss": mlm_loss + nsp_loss, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss,
        "mlm_accuracy": sums["mlm_correct_sum"] / weight,
        "nsp_accuracy": sums["nsp_correct_sum"] / examples,
        "learning_rate": float(result["learning_rate"]),
        "grad_norm": float(result["grad_norm"]),
        "loss_scale": float(result["loss_scale"]),
    }


def run(config: PretrainingConfig) -> dict:
    """Trains and/or evaluates as the config says; returns the final summary."""
    config.validate()
    distributed.init()
    distributed.pin_gpu_to_local_rank()
    rank, num_ranks = distributed.rank(), distributed.size()
    primary = rank == 0
    if primary:
        _check_output_dir(config.output_dir)
    bert_config = _load_bert_config(config.bert_config_file)
    if config.precision == "amp":
        option = precision.enable_auto_mixed_precision(precision.has_gpu())
        _log(primary, f"--precision=amp: Grappler rewrite {option} on")
        if config.use_xla:
            _log(primary, "warning: --use_xla compiles forward/backward without the AMP "
                 "rewrite (XLA bypasses Grappler): that part runs in float32")
    masking = load_dynamic_masking(config, bert_config) if config.dynamic_masking else None
    train_files = _checked_files(config.input_files, "input_files", config, bert_config) \
        if config.do_train else []
    eval_files = _checked_files(config.eval_files, "eval_files", config, bert_config) \
        if config.do_eval else []

    tf.random.set_seed(config.seed)
    state = PretrainingState(bert_config, config)
    _restore(state, config, primary)
    distributed.broadcast_variables(list(state.checkpoint_variables().values()))
    if primary:
        bert_config.to_json_file(os.path.join(config.output_dir, "bert_config.json"))

    summary = {}
    if config.do_train:
        summary["train"] = _train(state, config, train_files, rank, num_ranks, masking)
    if config.do_eval:
        summary["eval"] = evaluate(state.model, config, eval_files, rank, num_ranks, masking)
        if primary:
            _write_json(os.path.join(config.output_dir, "eval_results.json"), summary["eval"])
            _log(primary, "eval: " + json.dumps(summary["eval"]))
    return summary


def train_dataset(config: PretrainingConfig, files, rank, num_ranks, masking=None,
                  skip_batches=0):
    """This rank's training micro-batches after the first `skip_batches` (a resumed run's input
    position); with `masking`, masks are chosen per batch, seeded by its index."""
    return input_pipeline.pretraining_dataset(
        files, batch_size=config.train_batch_size, max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq, is_training=True,
        rank=rank, num_ranks=num_ranks, seed=config.seed, dynamic_masking=masking,
        skip_batches=skip_batches)


def _train(state: PretrainingState, config: PretrainingConfig, files, rank, num_ranks,
           masking) -> dict:
    primary = rank == 0
    k = config.num_accumulation_steps
    start_step = int(state.global_step.numpy())
    if start_step >= config.num_train_steps:
        _log(primary, f"global_step {start_step} >= --num_train_steps: nothing to train")
        return {"global_step": start_step}
    if len(files) < num_ranks:
        _log(primary, f"{len(files)} input file(s) for {num_ranks} ranks: sharding by record "
             "(more files than ranks reads faster)")
    batches = iter(train_dataset(config, files, rank, num_ranks, masking,
                                 skip_batches=int(state.input_position.numpy())))

    writer = (tf.summary.create_file_writer(config.output_dir) if primary
              else tf.summary.create_noop_writer())
    metrics_path = os.path.join(config.output_dir, "metrics.jsonl")
    if primary:
        _drop_metrics_after(metrics_path, start_step)
    metrics_file = open(metrics_path, "a") if primary else None
    sequences_per_update = config.train_batch_size * k * num_ranks
    watchdog = None
    update_times, nonfinite_in_a_row, last_saved = [], 0, start_step
    interval_start, interval_updates = time.perf_counter(), 0
    _log(primary, f"training from step {start_step} to {config.num_train_steps}: {num_ranks} "
         f"rank(s) x {k} micro-batch(es) x {config.train_batch_size} = {sequences_per_update} "
         f"sequences per update, {config.precision}, xla={config.use_xla}, "
         f"dynamic_masking={config.dynamic_masking}")

    step = start_step
    while step < config.num_train_steps:
        t0 = time.perf_counter()
        micro_batches = [next(batches) for _ in range(k)]
        metrics = _guarded_update(state, micro_batches, config)
        step = int(state.global_step.numpy())
        update_times.append(time.perf_counter() - t0)
        interval_updates += 1
        # Started after the first update, whose tracing (and a resume's skip) can take long.
        watchdog = watchdog or distributed.start_watchdog(config.peer_timeout_seconds)
        if watchdog:
            watchdog.beat()

        if metrics["finite"] and _isfinite(metrics["loss"]):
            nonfinite_in_a_row = 0
        else:
            nonfinite_in_a_row += 1
            _log(primary, f"step {step}: non-finite gradients, update skipped "
                 f"(loss scale now {float(state.loss_scale.scale.numpy()):g})")
            if nonfinite_in_a_row >= config.max_nonfinite_updates:
                last = checkpoints.latest_checkpoint(config.output_dir)
                raise TrainingError(
                    f"{nonfinite_in_a_row} updates in a row had a non-finite loss or gradients "
                    f"(at step {step}); stopping. The last good checkpoint is {last}. Usual "
                    "causes: --learning_rate too high, fp16 overflow (try --precision=bf16 or "
                    "fp32), or bad data (token ids >= vocab_size)")
            continue

        if step % config.log_every_n_steps == 0 or step == config.num_train_steps:
            elapsed = time.perf_counter() - interval_start
            record = {"step": step, **{key: metrics[key] for key in (
                "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy",
                "learning_rate", "loss_scale", "grad_norm")},
                "sequences_per_second": interval_updates * sequences_per_update / elapsed,
                "step_time": elapsed / interval_updates, "num_ranks": num_ranks}
            interval_start, interval_updates = time.perf_counter(), 0
            if primary:
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                with writer.as_default(step=step):
                    for key, value in record.items():
                        if key not in ("step", "num_ranks"):
                            tf.summary.write(key, float(value), metadata=SCALAR_SUMMARY)
                print(" ".join(f"{key}={_short(value)}" for key, value in record.items()),
                      flush=True)
        if step % config.save_checkpoints_steps == 0 or step == config.num_train_steps:
            _save(state, config, primary, step)
            last_saved = step
            if watchdog:
                watchdog.beat()

    if last_saved != step:
        _save(state, config, primary, step)
    if watchdog:
        watchdog.stop()
    if metrics_file:
        metrics_file.close()
    writer.close()
    summary = _throughput_summary(update_times, sequences_per_update, config)
    summary.update(global_step=step, ranks=num_ranks, sequences_per_update=sequences_per_update,
                   final_loss=metrics["loss"], final_mlm_accuracy=metrics["mlm_accuracy"])
    if primary:
        _write_json(os.path.join(config.output_dir, "train_summary.json"), summary)
        _log(primary, "summary: " + json.dumps(summary))
    return summary


def _guarded_update(state: PretrainingState, micro_batches, config) -> dict:
    """state.update, with the two errors users meet turned into advice."""
    try:
        return state.update(micro_batches)
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
                f"at step {int(state.global_step.numpy())}); see that rank's error above. "
                "Rerun the same command to resume from the last checkpoint in "
                f"--output_dir={config.output_dir}") from None
        raise


def evaluate(model, config: PretrainingConfig, files, rank, num_ranks, masking=None) -> dict:
    """Masked-LM loss/accuracy and NSP accuracy over up to --max_eval_steps batches per rank.
    With `masking` (unmasked records) the masks are fixed by --seed and the batch order."""
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
    weight = max(sums["mlm_weight_sum"], 1e-5)
    return {
        "masked_lm_loss": sums["mlm_loss_sum"] / weight,
        "masked_lm_accuracy": sums["mlm_correct_sum"] / weight,
        "next_sentence_loss": sums["nsp_loss_sum"] / sums["num_examples"],
        "next_sentence_accuracy": sums["nsp_correct_sum"] / sums["num_examples"],
        "examples": int(sums["num_examples"]),
    }


def _throughput_summary(update_times, sequences_per_update, config) -> dict:
    timed = update_times[TIMING_WARMUP_UPDATES:] or update_times
    seconds = sum(timed)
    per_second = len(timed) * sequences_per_update / seconds if seconds else 0.0
    hours = config.time_to_train_sequences / per_second / 3600 if per_second else None
    return {
        "updates_this_run": len(update_times),
        "timed_updates": len(timed),
        "avg_sequences_per_second": per_second,
        "time_to_train_sequences": config.time_to_train_sequences,
        "time_to_train_hours": hours,
    }


def _restore(state: PretrainingState, config: PretrainingConfig, primary: bool) -> None:
    """Rank 0 resumes from --output_dir, else initialises from --init_checkpoint;
    the caller then broadcasts every variable."""
    if not primary:
        return
    latest = checkpoints.latest_checkpoint(config.output_dir)
    if latest:
        checkpoints.restore(latest, state.checkpoint_variables(), require_all=True)
        _log(True, f"resumed from {latest} (step {int(state.global_step.numpy())}, "
             f"input position {int(state.input_position.numpy())})")
    elif config.init_checkpoint:
        report = checkpoints.init_from_checkpoint(config.init_checkpoint, state.params)
        _log(True, f"initialised from {config.init_checkpoint}: {len(report.loaded)} loaded, "
             f"{len(report.missing)} new, {len(report.unused)} unused")


def _save(state: PretrainingState, config: PretrainingConfig, primary: bool, step: int) -> None:
    if primary:
        prefix = checkpoints.save_checkpoint(state.checkpoint_variables(), config.output_dir,
                                             step, keep_max=config.keep_checkpoint_max)
        _log(True, f"saved {prefix}")


def _load_bert_config(path: str) -> BertConfig:
    if not os.path.isfile(path):
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


def _checked_files(patterns: str, flag: str, config: PretrainingConfig,
                   bert_config: BertConfig) -> list[str]:
    """Expands --input_files/--eval_files and checks the first records of every file:
    feature lengths against the flags, token ids against vocab_size, masked or not
    against --dynamic_masking."""
    files = input_pipeline.check_record_shapes(input_pipeline.expand_patterns(patterns),
                                               config.max_seq_length,
                                               config.max_predictions_per_seq)
    for path in files:
        records = tf.data.TFRecordDataset(path).take(RECORDS_CHECKED_PER_FILE)
        for record in records.as_numpy_iterator():
            feature = tf.train.Example.FromString(record).features.feature
            largest = max(max(feature[name].int64_list.value, default=0)
                          for name in ("input_ids", "masked_lm_ids"))
            if largest >= bert_config.vocab_size:
                raise TrainingError(
                    f"--{flag}: {path} holds token id {largest} but vocab_size is "
                    f"{bert_config.vocab_size} in --bert_config_file={config.bert_config_file} "
                    "(this gives NaN losses on GPUs); use the bert_config.json whose "
                    "vocab_size matches the vocab file the data was made with")
            masked = any(weight != 0 for weight in feature["masked_lm_weights"].float_list.value)
            if masked and config.dynamic_masking:
                raise TrainingError(
                    f"--{flag}: {path} holds masked records, but --dynamic_masking masks "
                    "during training and needs unmasked ones: make the data with "
                    "create_pretraining_data.py --dynamic_masking, or drop --dynamic_masking")
            if not masked and not config.dynamic_masking:
                raise TrainingError(
                    f"--{flag}: {path} holds unmasked records (create_pretraining_data.py "
                    "--dynamic_masking): train on them with --dynamic_masking --vocab_file=VOCAB")
    return files


def _check_output_dir(output_dir: str) -> None:
    try:
        os.makedirs(output_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".write-test-"):
            pass
    except OSError as e:
        raise TrainingError(f"--output_dir={output_dir} is not writable ({e.strerror}); "
                            "choose a directory you can write to") from None


def _drop_metrics_after(path: str, step: int) -> None:
    """On resume, forget lines a killed run logged after its last checkpoint."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (ValueError, KeyError):  # a line cut short by the kill
                pass
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.writelines(kept)
    os.replace(tmp, path)


def _write_json(path: str, payload: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, path)


def _isfinite(value: float) -> bool:
    return value == value and abs(value) != float("inf")


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _log(primary: bool, message: str) -> None:
    if primary:
        print(message, flush=True)


# The errors a user can fix: reported on stderr without a traceback.
USER_ERRORS = (TrainingError, PretrainingConfigError, BertConfigError, checkpoints.CheckpointError,
               input_pipeline.InputDataError, precision.PrecisionError, VocabError)


def main(config: PretrainingConfig) -> None:
    """Entry point for run_pretraining.py: runs, or exits non-zero with a clear message."""
    try:
        run(config)
    except USER_ERRORS as e:
        print(f"run_pretraining: error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
