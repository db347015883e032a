"""BERT pretraining with Horovod data parallelism: the loop, top to bottom.

One optimizer update = `num_accumulation_steps` micro-batches on every rank
(K micro-batches in all). Each micro-batch adds its (loss-scaled) gradient of

    mlm_loss_sum / (total_mask_weight / K) + nsp_loss_sum / (total_examples / K)

(totals over all micro-batches of the update on all ranks) into local
accumulators; then, divided by the rank's micro-batches and the loss scale,
ONE allreduce averages them over ranks, so 2 ranks x batch b, 1 rank x batch
2b and 2 micro-batches of b all take the same update. The totals come from
the data (mask weights), before the forward pass, by a scalar allreduce.
After the gradient allreduce: check finiteness (every rank sees the same
sums, so every rank decides the same), clip to global norm 1.0, step; a
non-finite update is skipped and lowers the loss scale (train/state.py says
why the magnitudes are these).

Only rank 0 writes (report.Reporter). A checkpoint holds the model, optimizer
slots, global step, loss scale and the input position, all by name; rerunning
the same command resumes exactly: the data, the dynamic masks and the dropout
masks are functions of (--seed, rank, input position), not of RNG state.

`train_loop` is the one training loop: fine-tuning (train/finetune.py) runs through it
too, with its own batches, dev evaluation and checkpoint interval (a `LoopPlan`). It
owns what every run needs: stop on a signal to any rank (after the same update on
every rank; rank 0 saves), the peer watchdog, non-finite updates, metrics.jsonl and
checkpoints; `claimed_output_dir` and `resume_or_initialise` are the shared set-up
(the output-dir lock, corrupt-checkpoint fallback, the resume).
"""

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable

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
)
from bert_tf.train import distributed, faults, precision, run_data
from bert_tf.train import state as train_state
from bert_tf.train.config import PretrainingConfig, PretrainingConfigError
from bert_tf.train.report import OutputDirError, Reporter
from bert_tf.train.state import TrainState

# Saved beside the variables: [ranks, per-rank micro-batch, accumulation steps] of the run.
RUN_LAYOUT = "run_layout"
TIMING_WARMUP_UPDATES = 2  # excluded from the average throughput (tracing, compilation)
LOGGED_METRICS = ("loss", "masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy",
                  "next_sentence_accuracy", "learning_rate", "loss_scale", "grad_norm")


class TrainingError(RuntimeError):
    """A run that cannot go on; the message says why and what to do."""


class PretrainingState(TrainState):
    """TrainState for BertForPreTraining: the masked-LM loss normalised by the update's total
    mask weight plus the next-sentence loss normalised by its total examples."""

    def __init__(self, bert_config: BertConfig, config: PretrainingConfig):
        model = BertForPreTraining(bert_config, precision.compute_dtype(config.precision))
        super().__init__(model, config, METRIC_SUMS, name="pretraining",
                         exclude_from_layer_adaptation=config.exclude_from_layer_adaptation)

    def loss_sums(self, features, dropout_seed) -> dict:
        outputs = self.model(features, training=True, dropout_seed=dropout_seed)
        return pretraining_loss(outputs, features)

    def objective(self, sums, totals):
        """totals = [mask weight, examples] of the update per micro-batch (TrainState)."""
        return (tf.math.divide_no_nan(sums["mlm_loss_sum"], totals[0])
                + tf.math.divide_no_nan(sums["nsp_loss_sum"], totals[1]))

    def local_totals(self, micro_batches) -> tf.Tensor:
        return tf.stack([
            tf.add_n([tf.reduce_sum(b["masked_lm_weights"]) for b in micro_batches]),
            tf.cast(tf.add_n([tf.shape(b["input_ids"])[0] for b in micro_batches]), tf.float32),
        ])

    def metrics_from_sums(self, sums) -> dict:
        return metrics_from_sums(sums)


def update_metrics(result) -> dict:
    """Python numbers from a PretrainingState's apply_update result."""
    return train_state.update_metrics(result, metrics_from_sums)


# --------------------------------------------------------------------------- the run


def run(config: PretrainingConfig) -> dict:
    """Trains and/or evaluates as the config says; returns the final summary."""
    config.validate()
    if config.elastic and not distributed.launched_elastic():
        raise TrainingError("--elastic needs horovodrun's elastic mode: start it with horovodrun "
                            "--gloo --min-np N --max-np M --host-discovery-script SCRIPT, or "
                            "launch/launch.py --host_discovery_script (docs/running.md)")
    distributed.init()
    distributed.pin_gpu_to_local_rank(config.deterministic)
    if config.elastic:
        config = dataclasses.replace(
            config, num_accumulation_steps=config.accumulation_steps_for(distributed.size()))
    # Elastic: no collective before the state's first sync, which also broadcasts the weights.
    with claimed_output_dir(config.output_dir, check_shared=not config.elastic) as report:
        bert_config = load_bert_config(config.bert_config_file, config.max_seq_length)
        _enable_amp(config, report)
        masking = load_dynamic_masking(config, bert_config) if config.dynamic_masking else None
        train_files = validated_files(config, "input_files", bert_config) if config.do_train else []
        eval_files = validated_files(config, "eval_files", bert_config) if config.do_eval else []

        tf.random.set_seed(config.seed)
        state = PretrainingState(bert_config, config)
        resume_or_initialise(state, config, report, _initialise_from_checkpoint,
                             broadcast=not config.elastic)
        if report.enabled:
            bert_config.to_json_file(f"{config.output_dir}/bert_config.json")

        summary = {}
        if config.do_train:
            trainer = train_elastic if config.elastic else train
            summary["train"] = trainer(state, config, train_files, masking, report)
        if config.do_eval and not summary.get("train", {}).get("stopped_by"):
            summary["eval"] = evaluate(state.model, config, eval_files, masking)
            report.summary("eval_results", summary["eval"])
        return summary


def train(state: PretrainingState, config: PretrainingConfig, files, masking,
          report: Reporter, after_save=None) -> dict:
    """Updates until --num_train_steps, logging every --log_every_n_steps and saving every
    --save_checkpoints_steps (and at the end); returns the throughput summary.
    `after_save(step)`, if given, runs after each update's logging and saving."""
    if nothing_to_train(state, config, report):
        return {"global_step": state.step}
    num_ranks = distributed.size()
    sequences_per_update = (config.train_batch_size * config.num_accumulation_steps
                            * num_ranks)
    report.log(f"training from step {state.step} to {config.num_train_steps}: {num_ranks} "
               f"rank(s) x {config.num_accumulation_steps} micro-batch(es) x "
               f"{config.train_batch_size} = {sequences_per_update} sequences per update, "
               f"{config.precision}, xla={config.use_xla}, "
               f"dynamic_masking={config.dynamic_masking}")
    if len(files) < num_ranks:
        report.log(f"{len(files)} input file(s) for {num_ranks} ranks: sharding by record "
                   "(more files than ranks reads faster)")
    batches = iter(train_dataset(config, files, distributed.rank(), num_ranks, masking,
                                 skip_batches=int(state.input_position.numpy())))
    plan = LoopPlan(sequences_per_update, LOGGED_METRICS, config.save_checkpoints_steps,
                    config.keep_checkpoint_max, explain_peer_loss=not config.elastic)
    if after_save is not None:
        plan.after_save = after_save
    outcome = train_loop(state, batches, config, report, plan)
    summary = {**outcome.meter.summary(config.time_to_train_sequences),
               "global_step": state.step, "stopped_by": outcome.stopped_by,
               "ranks": num_ranks, "sequences_per_update": sequences_per_update,
               "final_loss": outcome.metrics["loss"],
               "final_masked_lm_accuracy": outcome.metrics["masked_lm_accuracy"]}
    report.summary("train_summary", summary)
    return summary


# --------------------------------------------------------------------------- the loop


@dataclasses.dataclass
class LoopPlan:
    """What differs between the runs `train_loop` serves (pretraining, fine-tuning)."""
    sequences_per_update: int
    logged_metrics: tuple  # names from the update's metrics written to metrics.jsonl
    save_every_n_steps: int  # also saved after the last update and when stopped
    keep_checkpoint_max: int | None
    # Extra metrics.jsonl fields at a step (fine-tuning: the epoch).
    log_fields: Callable[[int], dict] = lambda step: {}
    # Called after every update that stepped, before its checkpoint (fine-tuning: dev eval).
    after_step: Callable[[int], None] = lambda step: None
    # Called after the update's checkpoint, if any (elastic: commit; it may raise Horovod's
    # host-change interrupt, which must not cost the checkpoint).
    after_save: Callable[[int], None] = lambda step: None
    # A failed collective becomes one line naming the lost peer (not under elastic Horovod,
    # whose driver recovers from it).
    explain_peer_loss: bool = True


@dataclasses.dataclass
class LoopOutcome:
    """How `train_loop` ended, for the caller's summary."""
    meter: "Throughput"
    metrics: dict | None = None  # the last update's
    stopped_by: str | None = None  # the signal's name, or that another rank got one


def nothing_to_train(state, config, report: Reporter) -> bool:
    """True (and says so) when a resumed run already reached --num_train_steps."""
    if state.step < config.num_train_steps:
        return False
    report.log(f"global_step {state.step} >= --num_train_steps: nothing to train")
    return True


def train_loop(state, batches, config, report: Reporter, plan: LoopPlan) -> LoopOutcome:
    """Updates `state` from `batches` (this rank's micro-batches from its input position on)
    until config.num_train_steps. A SIGTERM/SIGINT to any rank stops every rank after the
    same update, with a checkpoint; see `_log_step_save` for logging and saving."""
    outcome = LoopOutcome(Throughput(plan.sequences_per_update))
    report.start_metrics(state.step)
    nonfinite_in_a_row = 0
    with (_peer_loss_explained(state, config, plan.explain_peer_loss),
          distributed.Watchdog(config.peer_timeout_seconds) as watchdog,
          faults.StopSignals() as signals):
        def stop_requested():
            return signals.received is not None

        while state.step < config.num_train_steps and not outcome.stopped_by:
            outcome.metrics = outcome.meter.time(
                lambda: _guarded_update(state, batches, config, stop_requested))
            watchdog.beat()
            if outcome.metrics["stop_requested"]:  # on every rank, in the same update
                outcome.stopped_by = signals.received or "a signal to another rank"
            finite = outcome.metrics["finite"] and math.isfinite(outcome.metrics["loss"])
            nonfinite_in_a_row = 0 if finite else nonfinite_in_a_row + 1
            if not finite:
                _check_nonfinite(state, config, nonfinite_in_a_row, report)
            _log_step_save(state, config, report, plan, outcome, finite)
            watchdog.beat()
    if outcome.stopped_by:
        report.log(f"stopped at step {state.step} by {outcome.stopped_by}; checkpoint saved: "
                   "rerun the same command to resume")
    return outcome


def _log_step_save(state, config, report: Reporter, plan: LoopPlan, outcome: LoopOutcome,
                  finite: bool) -> None:
    """Logs every --log_every_n_steps, runs plan.after_step and saves every
    plan.save_every_n_steps, each also after the last update; saves when stopping."""
    step = state.step
    last = step == config.num_train_steps
    if finite and (step % config.log_every_n_steps == 0 or last):
        try:
            report.metrics({"step": step, **plan.log_fields(step),
                            **{k: outcome.metrics[k] for k in plan.logged_metrics},
                            **outcome.meter.interval(), "num_ranks": distributed.size()})
        except OutputDirError as e:  # e.g. a full disk: keep the updates made so far
            save(state, config, report, plan.keep_checkpoint_max)
            raise TrainingError(f"{e}; the updates so far are saved: free the disk (or fix "
                                "--output_dir) and rerun the same command to resume") from None
    if finite:
        plan.after_step(step)
    if finite and (step % plan.save_every_n_steps == 0 or last) or outcome.stopped_by:
        save(state, config, report, plan.keep_checkpoint_max)
    plan.after_save(step)


def train_elastic(state: PretrainingState, config: PretrainingConfig, files, masking,
                  report: Reporter) -> dict:
    """train() under elastic Horovod (--elastic). When a host leaves or joins, every rank
    resets and training goes on at the new world size with the same --global_batch_size, from
    the state after the last update (a host change announced by the driver) or as committed
    every --elastic_commit_every_n_steps updates (a rank lost without notice)."""
    elastic = distributed.ElasticState(state.checkpoint_variables(),
                                       input_ranks=distributed.size())

    def commit_or_check_hosts(step: int) -> None:
        if step % config.elastic_commit_every_n_steps == 0:
            elastic.commit()  # also checks for host changes
        else:
            elastic.check_host_updates()

    def train_at_current_size(elastic) -> dict:
        if report.enabled != (distributed.rank() == 0):
            raise TrainingError(
                f"{distributed.where()}: rank 0 moved to another process (its host left the "
                "job); only the first rank 0 writes checkpoints and logs, so the host of rank 0 "
                "must stay in the discovery script's output. Rerun the same command to resume "
                f"from the last checkpoint in --output_dir={config.output_dir}")
        distributed.check_shared_output_dir(config.output_dir)
        _adapt_to_world_size(state, elastic, config, report)
        return train(state, state.config, files, masking, report,
                     after_save=commit_or_check_hosts)

    return distributed.run_elastic(train_at_current_size, elastic)


def _adapt_to_world_size(state: PretrainingState, elastic, config: PretrainingConfig,
                         report: Reporter) -> None:
    """After an elastic (re)start: this rank's dropout seed, the micro-batches per update for
    the world size and, when that changed, the input position re-derived as on a resume with
    another rank count (the same count of sequences consumed, so none skipped or repeated)."""
    ranks, batch = distributed.size(), config.train_batch_size
    state.set_rank(distributed.rank())
    state.set_accumulation_steps(config.accumulation_steps_for(ranks))
    was = elastic.input_ranks
    if was == ranks:
        return
    position = rederived_input_position(int(state.input_position.numpy()), (was, batch),
                                        (ranks, batch))
    state.input_position.assign(position)
    elastic.input_ranks = ranks
    elastic.save()  # a later sync broadcasts the variables and input_ranks together
    report.log(f"elastic: world size {was} -> {ranks} ranks at step {state.step}; "
               f"accumulation {config.accumulation_steps_for(was)} -> "
               f"{state.config.num_accumulation_steps} micro-batch(es) of {batch} per rank "
               f"(global batch {config.global_batch_size} kept); input position re-derived to "
               f"{position} micro-batches per rank")


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
        # Warm-up updates are left out on every start (a resumed run traces again); a run of
        # no more updates than that has no throughput to report.
        timed = self.update_times[TIMING_WARMUP_UPDATES:]
        seconds = sum(timed)
        per_second = len(timed) * self.sequences_per_update / seconds if seconds else None
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


def _guarded_update(state, batches, config, stop_requested=lambda: False) -> dict:
    """state.update, with the errors users meet turned into advice."""
    try:
        return state.update(batches, stop_requested)
    except tf.errors.DataLossError as e:
        raise TrainingError(_data_loss_message(state, config, e)) from None
    except tf.errors.OpError as e:
        if "indices" in e.message and "not in [0," in e.message:
            raise TrainingError(
                f"a token id in the data is outside the embedding table ({e.message.strip()}); "
                f"vocab_size in --bert_config_file={config.bert_config_file} is smaller than "
                "the vocabulary the data was made with: use the bert_config.json whose "
                "vocab_size matches the vocab file given to create_pretraining_data.py") from None
        raise


@contextlib.contextmanager
def _peer_loss_explained(state, config, enabled: bool):
    """A collective that failed because a peer rank or node is gone becomes one line saying so,
    with the checkpoint kept and how to resume (instead of only the launcher's message)."""
    where = distributed.where()
    try:
        yield
    except tf.errors.OpError as e:
        if not enabled or not distributed.is_peer_failure(e):
            raise
        raise TrainingError(
            f"{where}: lost a peer rank at step {state.step} (a process or node of this job "
            "failed or exited; see its error, if any, above). The last checkpoint, "
            f"{checkpoints.latest_checkpoint(config.output_dir)}, is kept: rerun the same "
            "command to resume from it") from None


def _data_loss_message(state, config: PretrainingConfig, error) -> str:
    """Names the truncated input file (found by its record headers) and what to do."""
    for path in expand_patterns(config.input_files):
        offset = records.truncated_at(path)
        if offset is not None:
            problem = records.truncation_message(path, offset, "input_files")
            break
    else:
        problem = f"--input_files: a record is unreadable ({error.message.strip()})"
    return (f"{problem}. Training stopped at step {state.step}; the last "
            f"checkpoint {checkpoints.latest_checkpoint(config.output_dir)} is kept: fix the "
            "file and rerun the same command to resume from it")


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
        skip_batches=skip_batches, batches_per_update=config.num_accumulation_steps)


# --------------------------------------------------------------------------- set-up helpers


@contextlib.contextmanager
def claimed_output_dir(output_dir: str, check_shared: bool = True):
    """Rank 0 holds --output_dir's lock (faults.claimed_output_dir) for the block; every rank
    checks it sees rank 0's files (unless not `check_shared`). Yields the run's Reporter."""
    is_chief = distributed.rank() == 0
    with (faults.claimed_output_dir(output_dir, enabled=is_chief) as notes,
          Reporter(output_dir, enabled=is_chief) as report):
        for note in notes:
            report.log(note)
        if check_shared:
            distributed.check_shared_output_dir(output_dir)
        yield report


def resume_or_initialise(state, config, report: Reporter, initialise,
                         broadcast: bool = True) -> None:
    """Rank 0 resumes from --output_dir (the newest readable checkpoint), else calls
    initialise(state, config, report) (e.g. from --init_checkpoint); then (if `broadcast`)
    every rank gets rank 0's variables."""
    if report.enabled:
        removed = checkpoints.remove_stale_temporaries(config.output_dir)
        if removed:
            report.log(f"removed {len(removed)} partial file(s) left by an interrupted "
                       f"checkpoint write: {', '.join(os.path.basename(p) for p in removed)}")
        latest = _restore_newest_readable(state, config, report)
        if latest:
            run_data.check(latest, config)
            _check_run_layout(state, latest, config, report)
            report.log(f"resumed from {latest} (step {state.step}, "
                       f"input position {int(state.input_position.numpy())})")
        else:
            initialise(state, config, report)
    if broadcast:
        distributed.broadcast_variables(list(state.checkpoint_variables().values()))


def _initialise_from_checkpoint(state, config: PretrainingConfig, report: Reporter) -> None:
    if config.init_checkpoint:
        loaded = checkpoints.init_from_checkpoint(config.init_checkpoint, state.params)
        report.log(f"initialised from {config.init_checkpoint}: {len(loaded.loaded)} loaded, "
                   f"{len(loaded.missing)} new, {len(loaded.unused)} unused")


def _restore_newest_readable(state, config, report: Reporter):
    """Restores the newest checkpoint that reads back; newer corrupt ones are set aside
    (`*.corrupt`) with a warning. Returns its prefix, or None without checkpoints."""
    corrupt = []
    for prefix in checkpoints.listed_checkpoints(config.output_dir):
        try:
            checkpoints.restore(prefix, state.checkpoint_variables(), require_all=True)
        except checkpoints.CheckpointCorruptError as e:
            report.log(f"warning: {e}")
            corrupt.append(prefix)
            continue
        except checkpoints.CheckpointMismatchError as e:
            raise checkpoints.CheckpointMismatchError(
                f"--output_dir={config.output_dir} holds another run's checkpoint, which this "
                f"run cannot resume: {e}. To start from its weights, choose a new --output_dir "
                f"and pass --init_checkpoint={prefix}") from None
        for bad in corrupt:
            checkpoints.set_aside(bad)
            report.log(f"warning: renamed the corrupt checkpoint {bad} to "
                       f"{os.path.basename(bad)}.*{checkpoints.CORRUPT_SUFFIX}; resuming from "
                       f"the older {prefix} instead")
        return prefix
    if corrupt:
        raise TrainingError(
            f"no checkpoint in --output_dir={config.output_dir} reads back ({', '.join(corrupt)} "
            "are corrupt, see above); restore them from a copy, or move them away to start "
            "from scratch")
    return None


def _run_layout(config) -> list[int]:
    return [distributed.size(), config.train_batch_size, config.num_accumulation_steps]


def _check_run_layout(state, prefix: str, config, report: Reporter) -> None:
    """Refuses a resume that changes the sequences per update; one that splits them otherwise
    (ranks x micro-batch x accumulation) goes on at the same count of sequences consumed."""
    saved = checkpoints.checkpoint_tensor(prefix, RUN_LAYOUT)
    now = _run_layout(config)
    if saved is None or [int(v) for v in saved] == now:  # None: written before layouts were
        return
    ranks, batch, accumulation = (int(v) for v in saved)
    was = f"{ranks} rank(s) x {accumulation} micro-batch(es) x {batch}"
    if ranks * batch * accumulation != math.prod(now):
        raise TrainingError(
            f"{prefix} was trained with {was} = {ranks * batch * accumulation} sequences per "
            f"update; this run has {now[0]} rank(s) x {now[2]} x {now[1]} = {math.prod(now)}. "
            "Resume with the same global batch (e.g. fewer ranks and more "
            "--num_accumulation_steps), or start a new --output_dir (with --init_checkpoint)")
    position = rederived_input_position(int(state.input_position.numpy()), (ranks, batch),
                                        (now[0], now[1]))
    state.input_position.assign(position)
    report.log(f"note: {prefix} was trained with {was}; continuing with {now[0]} rank(s) x "
               f"{now[2]} x {now[1]} (the same {math.prod(now)} sequences per update), input "
               f"position re-derived to {position} micro-batches per rank")


def rederived_input_position(position: int, was: tuple[int, int], now: tuple[int, int]) -> int:
    """The input position (micro-batches per rank) at which `now` = (ranks, micro-batch size)
    has consumed as many sequences as `position` under `was`: a resume or an elastic reset with
    another rank count goes on at the same count of sequences, none skipped or repeated."""
    consumed = position * was[0] * was[1]  # sequences, all ranks
    return consumed // (now[0] * now[1])


def save(state, config, report: Reporter, keep_max: int | None) -> None:
    """Rank 0 writes the state (and the run layout) to --output_dir, keeping `keep_max`."""
    if report.enabled:
        tensors = {**state.checkpoint_variables(),
                   RUN_LAYOUT: tf.constant(_run_layout(config), tf.int64),
                   run_data.RUN_DATA: run_data.tensor(config)}
        prefix = checkpoints.save_checkpoint(tensors, config.output_dir, state.step,
                                             keep_max=keep_max)
        report.log(f"saved {prefix}")


def _enable_amp(config: PretrainingConfig, report: Reporter) -> None:
    if config.precision != "amp":
        return
    option = precision.enable_auto_mixed_precision(precision.has_gpu())
    report.log(f"--precision=amp: Grappler rewrite {option} on")
    if config.use_xla:
        report.log("warning: --use_xla compiles forward/backward without the AMP rewrite (XLA "
                   "bypasses Grappler): that part runs in float32")


def load_bert_config(path: str, max_seq_length: int) -> BertConfig:
    """--bert_config_file, checked to have a position for each of --max_seq_length tokens."""
    if not tf.io.gfile.exists(path):
        raise TrainingError(f"--bert_config_file={path} does not exist")
    bert_config = BertConfig.from_json_file(path)
    if max_seq_length > bert_config.max_position_embeddings:
        raise TrainingError(
            f"--max_seq_length={max_seq_length} is longer than the model's "
            f"max_position_embeddings={bert_config.max_position_embeddings} in "
            f"--bert_config_file={path}; use --max_seq_length={bert_config.max_position_embeddings}"
            " or less")
    return bert_config


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
