"""Interleaved rounds: how every benchmark here that compares rows times them (issue 38).

On a shared machine one sequential pass per row lets the load of the moment decide a ratio:
a row that ran while another job was busy looks slow. So each row is timed once per round,
rounds are repeated, and the order rotates by one row each round; a row's figure is the median
of its rounds with their min-max, and a ratio of two rows is the ratio of their medians with
the min-max of the per-round ratios (the two rows of one round ran minutes apart at most, under
similar load). A verdict line says whether that spread crosses 1.0.

On this kind of machine the host also slows the whole machine down in phases (`SteadyMachine`):
each row starts only while the machine runs at its usual speed, and a round during which it
slowed down is timed again.

Rows that run in child processes are `RowProcess`es: built and warmed up once, then kept
alive and asked to time one round at a time (common.serve_rounds is the child's side), so a
round costs only its timed steps, not a start-up and an XLA compile per row.
"""

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

BENCH = Path(__file__).resolve().parent

class RowError(RuntimeError):
    """A row's process failed; the message has its output's tail."""


class RowProcess:
    """One row's child process (a command taking --rounds_dir), alive between rounds.

    Use as a context manager: entering starts it and waits until it has warmed up; `measure`
    times one round; leaving stops it (killing it if it does not stop).
    """

    def __init__(self, label, cmd, env=None, timeout=1800):
        self.label, self.cmd, self.env, self.timeout = label, [str(c) for c in cmd], env, timeout
        self.directory = Path(tempfile.mkdtemp(prefix="bench-row-"))
        self.log_path = self.directory / "log.txt"
        self.process = None
        self.ready = {}

    def __enter__(self):
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen([*self.cmd, "--rounds_dir", str(self.directory)],
                                            env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        try:
            self.ready = self._wait_for(self.directory / "ready.json")
        except RowError:
            self.__exit__()
            raise
        return self

    def measure(self, round_index):
        """The child's record for round `round_index` (rounds are numbered from 0)."""
        (self.directory / f"go-{round_index}").touch()
        return self._wait_for(self.directory / f"result-{round_index}.json")

    def _wait_for(self, path):
        deadline = time.monotonic() + self.timeout
        while not path.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                code = self.process.returncode
                how = "timed out" if code is None else f"exit {code}"
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RowError(f"{self.label}: {how}: {' '.join(self.cmd)}\n{tail}")
            time.sleep(0.05)
        return json.loads(path.read_text())

    def __exit__(self, *exc):
        (self.directory / "stop").touch()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


class SteadyMachine:
    """Keeps each round of timings inside one speed phase of the machine.

    The hosts of this kind of machine change its speed in phases: a fixed
    single-threaded computation took 1.74x as long for 5-30 s at a time, once or twice a minute,
    on one host (2026-12-05, the AVX512_BF16 EPYC), and 1.5x as long for 70% of the time, in
    phases of 0.2-12 s, on another (the same day, an AVX2 EPYC); the process's CPU time grows with
    its wall time, so CPU seconds do not undo it. A round whose rows ran in different phases
    gets a ratio the code did not make. So a short probe runs before each row and after the
    round, and a round whose probes differ by more than `tolerance` is timed again, at most
    `max_retries` times (each record says how often). Which phase a round runs in does not
    matter: every row of it ran in the same one. A phase shorter than one row, between two
    probes, goes unseen.
    """

    def __init__(self, tolerance=1.25, max_retries=3):
        import numpy as np

        self.tolerance, self.max_retries = tolerance, max_retries
        # An integer matmul runs in numpy's own loop on one thread, never in a BLAS thread pool,
        # whose wake-ups made a float probe's times spread 1.6x within one phase.
        self.matrix = np.random.default_rng(0).integers(0, 100, (120, 120))

    def probe_s(self) -> float:
        start = time.perf_counter()
        for _ in range(4):
            self.matrix @ self.matrix
        return time.perf_counter() - start

    def consistent(self, probes) -> bool:
        return max(probes) <= self.tolerance * min(probes)


def run_rounds(rows, rounds, log=None, steady=None):
    """Times every row once per round, `rounds` times, rotating the order by one each round.

    Args:
      rows: {label: measure}, where measure(round_index) returns a record with `step_s` (or
        raises RowError, which drops the row from later rounds).
      rounds: how many rounds.
      log: function taking a progress line (default: print to stderr).
      steady: a SteadyMachine (default: a new one), or False to time without one.

    Returns:
      {label: [record per round]} (a record is {"error": ...} from a failed round on);
      each record also gets `round`, `load_average`, and with a SteadyMachine `retries` (times
      its round was timed again) and `probe_s` (the machine's probe just before the row).
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    steady = SteadyMachine() if steady is None else steady
    labels = list(rows)
    results = {label: [] for label in labels}
    failed = set()
    for round_index in range(rounds):
        shift = round_index % len(labels) if labels else 0
        order = [label for label in labels[shift:] + labels[:shift] if label not in failed]
        for retry in range(steady.max_retries + 1 if steady else 1):
            records, probes = _time_round(rows, order, round_index, steady)
            if not steady or steady.consistent(probes):
                break
            again = (f"timing it again ({retry + 1}/{steady.max_retries})"
                     if retry < steady.max_retries else "kept: no retries left")
            log(f"[rounds] round {round_index + 1}/{rounds}: the machine's speed changed during "
                f"it (probes {min(probes) * 1e3:.1f}-{max(probes) * 1e3:.1f} ms), " + again)
        for label, record in records.items():
            if "error" in record:
                failed.add(label)
            record.update(round=round_index, load_average=os.getloadavg()[0],
                          **({"retries": retry} if steady else {}))
            results[label].append(record)
            log(f"[rounds] round {round_index + 1}/{rounds} {label}: "
                + (record["error"].splitlines()[0] if "error" in record
                   else f"{record['step_s']:.3g} s/step, load {record['load_average']:.1f}"))
    return results


def _time_round(rows, order, round_index, steady):
    """One round's records, and the machine's probes before each row and after the last."""
    records, probes = {}, []
    for label in order:
        if steady:
            probes.append(steady.probe_s())
        try:
            record = rows[label](round_index)
        except RowError as error:
            record = {"error": str(error)}
        records[label] = {**record, **({"probe_s": probes[-1]} if steady else {})}
    if steady:
        probes.append(steady.probe_s())
    return records, probes


def steady_line(records_by_row):
    """One line on the SteadyMachine's work over all rows' records, for a report."""
    records = [r for rs in records_by_row for r in rs]
    timed_again = {r["round"] for r in records if r.get("retries")}
    probes = [r["probe_s"] for r in records if "probe_s" in r]
    speeds = (f"; the probe before a row took {min(probes) * 1e3:.1f}-{max(probes) * 1e3:.1f} ms "
              "over the run" if probes else "")
    return (f"Rounds timed again because the machine's speed changed during them: "
            f"{len(timed_again)}{speeds} (bench/rounds.py, SteadyMachine).")


def run_processes(rows, rounds, timeout):
    """Starts each row's RowProcess (one at a time, each warming up alone), times them all in
    run_rounds, then stops them.

    Args:
      rows: (label, row dict, command, environment) per row; a command of None means the row
        cannot run and its environment is the reason.
      rounds: how many rounds.
      timeout: seconds a process may take to warm up, or to time one round.

    Each row dict gets `rounds` (its records) and, as they apply, `ready` (what its process
    reported after warming up), `skipped` or `error`.
    """
    measures = {}
    with contextlib.ExitStack() as stack:
        for label, row, cmd, env in rows:
            print(f"[rounds] starting {label} ...", file=sys.stderr, flush=True)
            if cmd is None:
                row["error"] = env
                continue
            try:
                process = stack.enter_context(RowProcess(label, cmd, env, timeout))
            except RowError as error:
                row["error"] = str(error)
                continue
            if "skipped" in process.ready:
                row["skipped"] = process.ready["skipped"]
                continue
            row["ready"] = process.ready
            measures[label] = process.measure
        results = run_rounds(measures, rounds)
    for label, row, _, _ in rows:
        row["rounds"] = results.get(label, [])
        failed = [r["error"] for r in row["rounds"] if "error" in r]
        if failed:
            row["error"] = failed[0]


def spread(values):
    """{median, min, max} of a list of numbers."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def row_summary(records, batch_size):
    """A row's median and min-max over its rounds: step seconds and sequences/s."""
    timed = [r for r in records if "step_s" in r]
    if not timed:
        return None
    steps = [r["step_s"] for r in timed]
    return {"rounds": len(timed), "step_s": spread(steps),
            "sequences_per_s": spread([batch_size / s for s in steps]),
            "cpu_s": spread([r["cpu_s"] for r in timed if "cpu_s" in r] or [float("nan")]),
            "load_average": spread([r["load_average"] for r in timed])}


def compare(numerator, denominator):
    """Speed of one row over another (sequences/s, so their step times' inverse ratio): the
    ratio of the rows' median step times, and the min-max of the ratios within each round.

    Args:
      numerator, denominator: the two rows' records per round (run_rounds' lists).

    Returns:
      {ratio, min, max, rounds, verdict}, or None if no round timed both.
    """
    a = {r["round"]: r["step_s"] for r in numerator if "step_s" in r}
    b = {r["round"]: r["step_s"] for r in denominator if "step_s" in r}
    paired = sorted(set(a) & set(b))
    if not paired:
        return None
    per_round = [b[i] / a[i] for i in paired]
    ratio = statistics.median(b.values()) / statistics.median(a.values())
    low, high = min(per_round), max(per_round)
    if low > 1.0:
        verdict = "faster in every round"
    elif high < 1.0:
        verdict = "slower in every round"
    else:
        verdict = "spread crosses 1.0: not decided"
    return {"ratio": ratio, "min": low, "max": high, "rounds": len(paired), "verdict": verdict}


def verdict_line(name, comparison):
    """One line: VERDICT name: ratio (per-round min-max, rounds): verdict."""
    if comparison is None:
        return f"VERDICT {name}: not measured"
    return (f"VERDICT {name}: {comparison['ratio']:.2f}x (per round {comparison['min']:.2f}-"
            f"{comparison['max']:.2f}, {comparison['rounds']} rounds): {comparison['verdict']}")


def measure_peaks(python, threads, size=4096):
    """TensorFlow's best fp32 and bf16 matmul FLOP/s here: each dtype's faster of TF's default
    kernels and oneDNN's, measured in child processes with `threads` threads."""
    best = {}
    for onednn in ("0", "1"):
        env = {**common.set_thread_env(threads), "TF_ENABLE_ONEDNN_OPTS": onednn}
        (record,) = common.run_json([python, BENCH / "compare_train.py", "--child", "peaks",
                                     "--threads", threads, "--peak_size", size], env=env)[-1:]
        if "error" in record:
            raise RowError(f"matmul peak measurement failed: {record['error']}")
        for dtype, flops in record["peak_flops"].items():
            best[dtype] = max(best.get(dtype, 0.0), flops)
    return best


def peaks_line(when, peaks):
    """One line: the matmul peaks ({dtype name: FLOP/s}) measured at `when`, and the load."""
    figures = ", ".join(f"{dtype} {flops / 1e9:.0f}" for dtype, flops in peaks.items())
    return f"matmul peak at {when}: {figures} GFLOP/s (load {os.getloadavg()[0]:.1f})"
