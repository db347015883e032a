"""What the estimate takes in, checked: its numbers (the shared check,
bert_tf.data.numeric_flags) and a throughput measured in a short run's metrics.jsonl."""

import json

from bert_tf.data.numeric_flags import FlagValueError, check_number


class EstimateError(ValueError):
    """Bad estimator input; the message names the flag or file."""


def throughput_from_metrics(path, num_devices=None, skip_first=1):
    """Mean sequences/second per device over a metrics.jsonl from a short run.

    Its `sequences_per_second` counts all ranks together; the rank count comes from
    each record's `num_ranks` or else `num_devices`. The first `skip_first` records
    (tracing/compilation) are skipped when there are more."""
    records = []
    for line_number, record in _metrics_records(path):
        if "sequences_per_second" in record:
            _check_throughput_record(path, line_number, record, num_devices)
            records.append(record)
    if not records:
        raise EstimateError(
            f"--metrics_file={path}: no record has 'sequences_per_second'; pass a metrics.jsonl "
            "written by run_pretraining.py, or --sequences_per_second")
    if len(records) > skip_first:
        records = records[skip_first:]
    per_device = [r["sequences_per_second"] / r.get("num_ranks", num_devices) for r in records]
    return sum(per_device) / len(per_device)


def _metrics_records(path):
    """(line number, JSON object) of each non-empty line of a metrics.jsonl."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except FileNotFoundError:
        raise EstimateError(f"--metrics_file={path}: file not found") from None
    except IsADirectoryError:
        raise EstimateError(f"--metrics_file={path} is a directory; pass the metrics.jsonl in "
                            "it") from None
    except UnicodeDecodeError:
        raise EstimateError(f"--metrics_file={path}: not a text file (not UTF-8); pass the "
                            "metrics.jsonl run_pretraining.py wrote") from None
    records = []
    for line_number, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if line_number == lines[-1][0] and not line.endswith("\n"):
                continue  # the last line, cut short by a kill mid-write
            raise EstimateError(f"{path}:{line_number}: not JSON ({e})") from None
        if not isinstance(record, dict):
            raise EstimateError(f"{path}:{line_number}: not a JSON object (a metrics.jsonl "
                                "line is one record {{...}})")
        records.append((line_number, record))
    return records


def _check_throughput_record(path, line_number, record, num_devices):
    """A record's sequences_per_second is a positive number and its rank count known."""
    try:
        check_numbers(record, {"sequences_per_second": {"above": 0}, "num_ranks": COUNT})
    except EstimateError as e:
        raise EstimateError(f"{path}:{line_number}: {str(e).removeprefix('--')} (not a record "
                            "run_pretraining.py writes)") from None
    if record.get("sequences_per_second") is None:
        raise EstimateError(f"{path}:{line_number}: sequences_per_second is null")
    if record.get("num_ranks", num_devices) is None:
        raise EstimateError(
            f"--metrics_file={path} does not say how many ranks ran: pass "
            "--metrics_num_devices (the -np of that run)")


# Every numeric flag's bounds (bert_tf.data.numeric_flags.check_number's keywords).
COUNT = {"at_least": 1, "integer": True}
POSITIVE = {"above": 0}
NUMERIC_FLAGS = {
    "max_seq_length": COUNT, "max_predictions_per_seq": COUNT, "num_sequences": POSITIVE,
    "corpus_tokens": POSITIVE, "epochs": POSITIVE, "num_train_steps": COUNT,
    "global_batch_size": COUNT, "num_devices": COUNT, "sequences_per_second": POSITIVE,
    "metrics_num_devices": COUNT, "efficiency": {"above": 0, "at_most": 1},
    "price_per_device_hour": {"at_least": 0}, "peak_tflops": POSITIVE, "gpus_per_node": COUNT,
    "num_nodes": COUNT, "network_gbps": POSITIVE, "price_per_hour": {"at_least": 0},
    "train_batch_size": COUNT, "num_accumulation_steps": COUNT, "max_nodes": COUNT,
}


def check_numbers(values: dict, bounds: dict, where: str = ""):
    """check_number on each given (not None) value.

    Args:
      values: {flag: value}.
      bounds: {flag: check_number's bound keywords}.
      where: a prefix for the message, e.g. the recipe the values came from.

    Raises:
      EstimateError naming the flag, its bounds and the value.
    """
    for flag, limits in bounds.items():
        if values.get(flag) is not None:
            try:
                check_number(flag, values[flag], **limits)
            except FlagValueError as e:
                raise EstimateError(f"{where}{e}") from None
