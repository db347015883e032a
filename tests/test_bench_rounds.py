"""bench/rounds.py: the interleaved rounds every speed comparison is timed in. Rows here are
plain functions returning scripted step times, and the machine's probe is scripted, so each
case is deterministic; what is tested is the bookkeeping that decides which timings count."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name):
    sys.path.insert(0, str(BENCH))  # rounds imports its sibling `common`
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


rounds = _load("rounds")


class ScriptedMachine(rounds.SteadyMachine):
    """A SteadyMachine whose probe returns the given seconds in turn (then the last one)."""

    def __init__(self, probes, **kwargs):
        super().__init__(**kwargs)
        self.probes = list(probes)

    def probe_s(self):
        elapsed = self.probes.pop(0) if len(self.probes) > 1 else self.probes[0]
        self.fastest = min(self.fastest, elapsed)
        return elapsed


def scripted_row(times):
    """A row whose successive calls report the given step seconds."""
    calls = iter(times)
    return lambda round_index: {"step_s": next(calls)}


def test_a_round_in_which_a_row_slowed_down_is_timed_again_and_the_retry_is_recorded():
    rows = {"a": scripted_row([1.0, 2.0, 1.05]), "b": scripted_row([1.0, 1.0, 1.0])}
    lines = []
    results = rounds.run_rounds(rows, 2, log=lines.append, steady=ScriptedMachine([1.0]))
    assert [r["step_s"] for r in results["a"]] == [1.0, 1.05]  # the 2.0 was timed again
    assert [r["retries"] for r in results["a"]] == [0, 1]
    assert any("timing it again (1/3)" in line for line in lines)


def test_retries_are_bounded_and_the_last_timing_is_kept():
    rows = {"a": scripted_row([1.0] + [3.0] * 10)}
    lines = []
    results = rounds.run_rounds(rows, 2, log=lines.append,
                                steady=ScriptedMachine([1.0], max_retries=2))
    assert [r["step_s"] for r in results["a"]] == [1.0, 3.0]
    assert results["a"][1]["retries"] == 2
    slowed = [line for line in lines if "slowed down" in line]
    assert len(slowed) == 3 and slowed[-1].endswith("kept: no retries left")


def test_a_slow_probe_makes_the_row_wait_and_its_round_count_as_disturbed():
    # Probes: before a (fast), before b (slow, then fast after a 0.5 s wait), then fast.
    machine = ScriptedMachine([1.0, 2.0, 1.0], max_wait_s=5.0)
    rows = {"a": scripted_row([1.0, 1.1]), "b": scripted_row([1.0, 1.2])}
    lines = []
    results = rounds.run_rounds(rows, 1, log=lines.append, steady=machine)
    # The slow phase fell between the round's rows, so the round was timed again.
    assert [(r["step_s"], r["retries"]) for r in results["a"] + results["b"]] == [
        (1.1, 1), (1.2, 1)]
    assert "timing it again (1/3)" in lines[0]


def test_compare_gives_the_ratio_of_medians_and_a_verdict_from_the_per_round_ratios():
    fast = [{"round": i, "step_s": s} for i, s in enumerate([1.0, 1.0, 1.2])]
    slow = [{"round": i, "step_s": s} for i, s in enumerate([1.5, 1.1, 1.5])]
    result = rounds.compare(fast, slow)
    assert abs(result["ratio"] - 1.5) < 1e-9
    assert abs(result["min"] - 1.1) < 1e-9 and result["verdict"] == "faster in every round"
    crossing = rounds.compare(fast, [{"round": i, "step_s": s}
                                     for i, s in enumerate([1.5, 0.9, 1.5])])
    assert crossing["verdict"] == "spread crosses 1.0: not decided"
