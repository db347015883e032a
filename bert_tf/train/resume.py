"""Resuming and saving a run in --output_dir.

Rank 0 resumes from the newest checkpoint that reads back (newer corrupt ones are set aside),
refuses one trained on other data (run_data.py) or with another number of sequences per update,
and re-derives the input position when the same sequences per update are split otherwise
(ranks x micro-batch x accumulation). Every checkpoint it saves holds the run's layout and data
beside the variables.
"""

import math
import os

import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.train import distributed, run_data
from bert_tf.train.faults import TrainingError
from bert_tf.train.report import Reporter
from bert_tf.train.state import TRAIN_SECONDS

# Saved beside the variables: [ranks, per-rank micro-batch, accumulation steps] of the run.
RUN_LAYOUT = "run_layout"
# Variables an older bert_tf's checkpoints lack: those resume with their initial value.
OPTIONAL_ON_RESUME = (TRAIN_SECONDS,)


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


def _restore_newest_readable(state, config, report: Reporter):
    """Restores the newest checkpoint that reads back; newer corrupt ones are set aside
    (`*.corrupt`) with a warning. Returns its prefix, or None without checkpoints."""
    corrupt = []
    variables = state.checkpoint_variables()
    optional = {name: variables.pop(name) for name in OPTIONAL_ON_RESUME if name in variables}
    for prefix in checkpoints.listed_checkpoints(config.output_dir):
        try:
            checkpoints.restore(prefix, variables, require_all=True)
            checkpoints.restore(prefix, optional)
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
