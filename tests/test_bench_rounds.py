"""bench/rounds.py: the interleaved rounds every speed comparison is timed in. Rows here are
plain functions returning scripted step times, and the machine's probe is scripted, so each
case is deterministic; what is tested is the bookkeeping that decides which timings count."""

from conftest import bench_module

rounds = bench_module("rounds")


class ScriptedMachine(rounds.SteadyMachine):
    """A SteadyMachine whose probe returns the given seconds in turn (then the last one)."""

    def __init__(self, probes, **kwargs):
        super().__init__(**kwargs)
        self.probes = list(probes)

    def probe_s(self):
        return self.probes.pop(0) if len(self.probes) > 1 else self.probes[0]


def scripted_row(times):
    """A row whose successive calls report the given step seconds."""
    calls = iter(times)
    return lambda round_index: {"step_s": next(calls)}


def test_a_round_whose_probes_disagree_is_timed_again_and_the_retry_is_recorded():
    # Round 1's probes (before a, before b, after): the machine slowed 1.5x after row a.
    machine = ScriptedMachine([1.0, 1.5, 1.5, 1.5])
    rows = {"a": scripted_row([1.0, 1.5]), "b": scripted_row([1.5, 1.5])}
    lines = []
    results = rounds.run_rounds(rows, 1, log=lines.append, steady=machine)
    assert [(r["step_s"], r["retries"]) for r in results["a"] + results["b"]] == [
        (1.5, 1), (1.5, 1)]
    assert "timing it again (1/3)" in lines[0]


def test_a_round_inside_one_slow_phase_counts_as_it_is():
    # Every probe 1.5x slower than the machine can be: one phase, so nothing is timed again.
    machine = ScriptedMachine([1.5])
    rows = {"a": scripted_row([1.5, 1.5]), "b": scripted_row([3.0, 3.0])}
    results = rounds.run_rounds(rows, 2, log=lambda line: None, steady=machine)
    assert [r["retries"] for r in results["a"] + results["b"]] == [0, 0, 0, 0]
    assert rounds.compare(results["a"], results["b"])["ratio"] == 2.0


def test_retries_are_bounded_and_the_last_timing_is_kept():
    machine = ScriptedMachine([1.0, 2.0] * 10, max_retries=2)
    lines = []
    results = rounds.run_rounds({"a": scripted_row([1.0, 2.0, 3.0])}, 1, log=lines.append,
                                steady=machine)
    assert [(r["step_s"], r["retries"]) for r in results["a"]] == [(3.0, 2)]
    changed = [line for line in lines if "speed changed" in line]
    assert len(changed) == 3 and changed[-1].endswith("kept: no retries left")
    assert "timed again because the machine's speed changed during them: 1" in (
        rounds.steady_line([results["a"]]))


def test_compare_gives_the_ratio_of_medians_and_a_verdict_from_the_per_round_ratios():
    fast = [{"round": i, "step_s": s} for i, s in enumerate([1.0, 1.0, 1.2])]
    slow = [{"round": i, "step_s": s} for i, s in enumerate([1.5, 1.1, 1.5])]
    result = rounds.compare(fast, slow)
    assert abs(result["ratio"] - 1.5) < 1e-9
    assert abs(result["min"] - 1.1) < 1e-9 and result["verdict"] == "faster in every round"
    crossing = rounds.compare(fast, [{"round": i, "step_s": s}
                                     for i, s in enumerate([1.5, 0.9, 1.5])])
    assert crossing["verdict"] == "spread crosses 1.0: not decided"
