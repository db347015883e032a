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
checkpoints. The jobs around it have their own modules: run_setup.py (the output-dir lock,
bert_config.json, AMP, the data), resume.py (the resume, corrupt-checkpoint fallback, saving),
faults.py (what stops a run, as advice), elastic.py (--elastic) and pretraining_eval.py.
"""

import dataclasses
import math
import sys
from collections.abc import Callable

import tensorflow as tf

from bert_tf.data.files import InputDataError
from bert_tf.data.tokenization import VocabError, resolve_spec
from bert_tf.model import checkpoints, devices
from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.model.modeling import (
    METRIC_SUMS,
    POOLER_SCOPE,
    BertForPreTraining,
    metrics_from_sums,
    pretraining_loss,
)
from bert_tf.train import distributed, faults, precision
from bert_tf.train.config import PretrainingConfig, PretrainingConfigError
from bert_tf.train.elastic import train_elastic
from bert_tf.train.faults import TrainingError
from bert_tf.train.pretraining_eval import evaluate, trained_metrics
from bert_tf.train.report import OutputDirError, Reporter, Throughput
from bert_tf.train.resume import resume_or_initialise, save
from bert_tf.train.run_setup import (
    claimed_output_dir,
    enable_amp,
    load_bert_config,
    load_dynamic_masking,
    train_dataset,
    validated_files,
)
from bert_tf.train.state import TrainState

LOGGED_METRICS = ("loss", "masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy",
                  "next_sentence_accuracy", "learning_rate", "loss_scale", "grad_norm")


# What only the next-sentence loss reaches (the pooler feeds only its head).
NSP_ONLY = (POOLER_SCOPE, "cls/seq_relationship/")


class PretrainingState(TrainState):
    """TrainState for BertForPreTraining: the masked-LM loss normalised by the update's total
    mask weight plus the next-sentence loss normalised by its total examples."""

    def __init__(self, bert_config: BertConfig, config: PretrainingConfig):
        if not config.dropout:  # the checkpoint's bert_config.json keeps its rates
            bert_config = dataclasses.replace(bert_config, hidden_dropout_prob=0.0,
                                              attention_probs_dropout_prob=0.0)
        model = BertForPreTraining(bert_config, precision.compute_dtype(config.precision))
        super().__init__(model, config, METRIC_SUMS, name="pretraining",
                         exclude_from_layer_adaptation=config.exclude_from_layer_adaptation,
                         untrained=() if config.next_sentence_prediction else NSP_ONLY)

    def loss_sums(self, features, dropout_seed) -> dict:
        outputs = self.model(features, training=True, dropout_seed=dropout_seed)
        return pretraining_loss(outputs, features)

    def objective(self, sums, totals):
        """totals = [mask weight, examples] of the update per micro-batch (TrainState)."""
        mlm_loss = tf.math.divide_no_nan(sums["mlm_loss_sum"], totals[0])
        if not self.config.next_sentence_prediction:
            return mlm_loss
        return mlm_loss + tf.math.divide_no_nan(sums["nsp_loss_sum"], totals[1])

    def local_totals(self, micro_batches) -> tf.Tensor:
        return tf.stack([
            tf.add_n([tf.reduce_sum(b["masked_lm_weights"]) for b in micro_batches]),
            tf.cast(tf.add_n([tf.shape(b["input_ids"])[0] for b in micro_batches]), tf.float32),
        ])

    def metrics_from_sums(self, sums) -> dict:
        return trained_metrics(metrics_from_sums(sums), self.config)


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
        enable_amp(config, report)
        masking = load_dynamic_masking(config, bert_config) if config.dynamic_masking else None
        def checked_files(flag, split_over_ranks=True):
            return validated_files(config, flag, bert_config, split_over_ranks)

        # Elastic: the training files are checked at each world size, after the state's sync.
        train_files = checked_files("input_files") if config.do_train and not config.elastic \
            else []
        eval_files = checked_files("eval_files", not config.elastic) if config.do_eval else []

        tf.random.set_seed(config.seed)
        state = PretrainingState(bert_config, config)
        resume_or_initialise(state, config, report, _initialise_from_checkpoint,
                             broadcast=not config.elastic)
        if report.enabled:
            bert_config.to_json_file(f"{config.output_dir}/bert_config.json")
        if config.vocab_file:  # how the data's text was tokenized, beside the checkpoints
            report.summary("tokenizer_spec", resolve_spec(config.vocab_file,
                                                          check_dictionary=False).to_json())

        summary = {}
        if config.do_train:
            if config.elastic:
                summary["train"] = train_elastic(train, state, config,
                                                 lambda: checked_files("input_files"), masking,
                                                 report)
            else:
                summary["train"] = train(state, config, train_files, masking, report)
        if config.do_eval and not summary.get("train", {}).get("stopped_by"):
            summary["eval"] = evaluate(state.model, config, eval_files, masking)
            report.summary("eval_results", summary["eval"])
        return summary


def _initialise_from_checkpoint(state, config: PretrainingConfig, report: Reporter) -> None:
    if config.init_checkpoint:
        loaded = checkpoints.init_from_checkpoint(config.init_checkpoint, state.params)
        report.log(f"initialised from {config.init_checkpoint}: {len(loaded.loaded)} loaded, "
                   f"{len(loaded.missing)} new, {len(loaded.unused)} unused")


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
    budget = (f" or {state.max_train_seconds:g} s of updates "
              f"({float(state.train_seconds.numpy()):.0f} s spent)" if state.max_train_seconds else "")
    report.log(f"training from step {state.step} to {config.num_train_steps}{budget}: {num_ranks} "
               f"rank(s) x {config.num_accumulation_steps} micro-batch(es) x "
               f"{config.train_batch_size} = {sequences_per_update} sequences per update, "
               f"{config.precision}, xla={config.use_xla}, "
               f"dynamic_masking={config.dynamic_masking}")
    if len(files) < num_ranks:
        report.log(f"{len(files)} input file(s) for {num_ranks} ranks: sharding by record "
                   "(more files than ranks reads faster)")
    batches = iter(train_dataset(config, files, distributed.rank(), num_ranks, masking,
                                 skip_batches=int(state.input_position.numpy())))
    logged = tuple(trained_metrics(dict.fromkeys(LOGGED_METRICS), config))
    plan = LoopPlan(sequences_per_update, logged, config.save_checkpoints_steps,
                    config.keep_checkpoint_max, explain_peer_loss=not config.elastic)
    if after_save is not None:
        plan.after_save = after_save
    outcome = train_loop(state, batches, config, report, plan)
    if state.max_train_seconds and state.finished() and state.step < config.num_train_steps:
        report.log(f"--max_train_time={config.max_train_time} spent at step {state.step}")
    summary = {**outcome.meter.summary(config.time_to_train_sequences),
               "global_step": state.step, "stopped_by": outcome.stopped_by,
               "ranks": num_ranks, "sequences_per_update": sequences_per_update,
               "train_seconds": float(state.train_seconds.numpy()),
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
    meter: Throughput
    metrics: dict | None = None  # the last update's
    stopped_by: str | None = None  # the signal's name, or that another rank got one


def nothing_to_train(state, config, report: Reporter) -> bool:
    """True (and says so) when a resumed run already reached --num_train_steps or spent
    --max_train_time."""
    if not state.finished():
        return False
    report.log(f"global_step {state.step}, {float(state.train_seconds.numpy()):.0f} s spent: "
                "--num_train_steps reached or --max_train_time spent, nothing to train")
    return True


def train_loop(state, batches, config, report: Reporter, plan: LoopPlan) -> LoopOutcome:
    """Updates `state` from `batches` (this rank's micro-batches from its input position on)
    until config.num_train_steps or the time budget (TrainState.finished). A SIGTERM/SIGINT to any rank stops every rank after the
    same update, with a checkpoint; see `_log_step_save` for logging and saving."""
    outcome = LoopOutcome(Throughput(plan.sequences_per_update))
    report.start_metrics(state.step)
    nonfinite_in_a_row = 0
    with (faults.peer_loss_explained(state, config, plan.explain_peer_loss),
          distributed.Watchdog(config.peer_timeout_seconds) as watchdog,
          faults.StopSignals() as signals):
        def stop_requested():
            return signals.received is not None

        while not state.finished() and not outcome.stopped_by:
            outcome.metrics = outcome.meter.time(
                lambda: faults.guarded_update(state, batches, config, stop_requested))
            watchdog.beat()
            if outcome.metrics["stop_requested"]:  # on every rank, in the same update
                outcome.stopped_by = signals.received or "a signal to another rank"
            finite = outcome.metrics["finite"] and math.isfinite(outcome.metrics["loss"])
            nonfinite_in_a_row = 0 if finite else nonfinite_in_a_row + 1
            if not finite:
                faults.check_nonfinite(state, config, nonfinite_in_a_row, report)
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
    last = state.finished()
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


# The errors a user can fix: reported on stderr without a traceback.
USER_ERRORS = (TrainingError, PretrainingConfigError, BertConfigError, checkpoints.CheckpointError,
               InputDataError, precision.PrecisionError, VocabError, OutputDirError,
               devices.DeviceError)


def main(config: PretrainingConfig) -> None:
    """Entry point for run_pretraining.py: runs, or exits non-zero with a clear message."""
    try:
        run(config)
    except USER_ERRORS as e:
        print(f"run_pretraining: error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
