"""Faults of a run: those the loop survives (a stop signal, a contested --output_dir) and those
that stop it with a `TrainingError` saying why and what to do.

`StopSignals` turns SIGTERM/SIGINT (a scheduler's or spot instance's notice, Ctrl-C) into a
request the loop reads once per update, so the update in flight finishes and a checkpoint is
written. `claimed_output_dir` checks and creates the directory
(bert_tf.data.output_dir.check_output_dir), holds its lock
(bert_tf.data.output_dir.OutputDirLock) and removes the directory again if a failed run created
it and left it empty. `check_nonfinite`, `guarded_update` and `peer_loss_explained` turn too many
non-finite updates in a row, an unreadable record or a token id outside the embedding table, and
a lost peer rank into one message naming the cause and the checkpoint kept.
"""

import contextlib
import os
import signal

import tensorflow as tf

from bert_tf.data import records
from bert_tf.data.files import expand_patterns
from bert_tf.data.output_dir import (
    LOCK_FILE,  # noqa: F401 (re-exported)
    OutputDirLock,
    check_output_dir,
)
from bert_tf.model import checkpoints
from bert_tf.train import distributed
from bert_tf.train.config import PretrainingConfig
from bert_tf.train.report import Reporter

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingError(RuntimeError):
    """A run that cannot go on; the message says why and what to do."""


class StopSignals:
    """While active, the first SIGTERM/SIGINT only records itself (`received` = its name); a
    second one exits at once (status 128 + signal), for a user who does not want to wait.
    Restores the previous handlers on exit. Only the main thread can install handlers."""

    def __init__(self):
        self.received = None
        self._previous = {}

    def __enter__(self):
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        if self.received is not None:
            raise SystemExit(128 + signum)
        self.received = signal.Signals(signum).name


@contextlib.contextmanager
def claimed_output_dir(directory: str, enabled: bool):
    """Rank 0 (`enabled`): creates `directory` if needed and holds its lock for the block;
    yields the lock's notes. If the block fails and this call created the directory, the
    directory is removed again when nothing else was written there."""
    if not enabled:
        yield []
        return
    existed = os.path.isdir(directory)
    check_output_dir(directory, "output_dir", create=True)
    try:
        with OutputDirLock(directory) as lock:
            yield lock.notes
    except BaseException:
        if not existed:
            with contextlib.suppress(OSError):  # not empty: keep what was written
                os.rmdir(directory)
        raise


def check_nonfinite(state, config, in_a_row: int, report: Reporter) -> None:
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


def guarded_update(state, batches, config, stop_requested=lambda: False) -> dict:
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
def peer_loss_explained(state, config, enabled: bool):
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
    """Names the damaged input file (found by its record headers) and what to do."""
    problem = records.damage_message(expand_patterns(config.input_files), "input_files", error)
    return (f"{problem}. Training stopped at step {state.step}; the last "
            f"checkpoint {checkpoints.latest_checkpoint(config.output_dir)} is kept: fix the "
            "file and rerun the same command to resume from it")
