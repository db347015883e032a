"""Rank 0's output: stdout, metrics.jsonl, TensorBoard and JSON summaries, behind one object.

Every rank holds a Reporter; only rank 0's writes anything, so the loop never asks which rank
it is. Use it as a context manager: the metrics file and the TensorBoard writer are closed on
every exit path, errors included. `Throughput` times the updates for the sequences/s it reports.
"""

import contextlib
import json
import os
import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from bert_tf.data.files import OutputDirError

# TensorBoard shows a summary as a scalar plot by this metadata (what tf.summary.scalar
# writes; that one needs the tensorboard package, which tensorflow-cpu does not install).
SCALAR_SUMMARY = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
NOT_PLOTTED = ("step", "num_ranks")
TIMING_WARMUP_UPDATES = 2  # excluded from the average throughput (tracing, compilation)


def write_json(path: str, payload: dict) -> None:
    """Writes JSON atomically (a reader never sees half a file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, path)


class Reporter:
    """Rank 0's output for one run in `output_dir` (checked and made by
    faults.claimed_output_dir); on other ranks every method does nothing."""

    def __init__(self, output_dir: str, enabled: bool):
        self.output_dir = output_dir
        self.enabled = enabled
        self._metrics_file = None
        self._writer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def log(self, message: str) -> None:
        if self.enabled:
            print(message, flush=True)

    def start_metrics(self, start_step: int) -> None:
        """Opens metrics.jsonl for appending after dropping what a killed run logged past its
        last checkpoint (`start_step`), and the TensorBoard writer."""
        if not self.enabled:
            return
        self.close()  # an elastic run starts again after each world-size change
        path = os.path.join(self.output_dir, "metrics.jsonl")
        try:
            _drop_metrics_after(path, start_step)
            self._metrics_file = open(path, "a")  # closed by close()
        except OSError as e:
            raise OutputDirError(f"cannot write {path} ({e.strerror}); make it writable "
                                 "(or move it away) and rerun") from None
        self._writer = tf.summary.create_file_writer(self.output_dir)

    def metrics(self, record: dict) -> None:
        """One metrics record: a JSON line, TensorBoard scalars and a line on stdout."""
        if not self.enabled:
            return
        try:
            self._metrics_file.write(json.dumps(record) + "\n")
            self._metrics_file.flush()
        except OSError as e:
            path, metrics_file, self._metrics_file = self._metrics_file.name, self._metrics_file, None
            with contextlib.suppress(OSError):  # its close flushes the same bytes again
                metrics_file.close()
            raise OutputDirError(f"cannot write {path} at step {record['step']} "
                                 f"({e.strerror})") from None
        with self._writer.as_default(step=record["step"]):
            for key, value in record.items():
                if key not in NOT_PLOTTED:
                    tf.summary.write(key, float(value), metadata=SCALAR_SUMMARY)
        print(" ".join(f"{key}={_short(value)}" for key, value in record.items()), flush=True)

    def summary(self, name: str, payload: dict) -> None:
        """`name`.json in the output directory, and one line on stdout."""
        if self.enabled:
            write_json(os.path.join(self.output_dir, f"{name}.json"), payload)
            print(f"{name}: {json.dumps(payload)}", flush=True)

    def close(self) -> None:
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


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


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
