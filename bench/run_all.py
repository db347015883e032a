"""Runs every benchmark in one go (`make bench`): makes the peer venvs, then the
training-step comparison (bench/compare_train.py, with its scaling part), the
data-creation comparison (bench/create_data.py) and our update's throughput matrix
(bench/train_step.py), and writes bench/results/summary.md from their Markdown results.

    .venv/bin/python bench/run_all.py           # full run (about an hour on 2 busy cores)
    .venv/bin/python bench/run_all.py --quick   # smoke run of every part (minutes)
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

BENCH = Path(__file__).resolve().parent
PARTS = {"compare_train": BENCH / "compare_train.py", "create_data": BENCH / "create_data.py",
         "train_step": BENCH / "train_step.py", "wikipedia": BENCH / "wikipedia.py"}
# What --quick passes to each part for a smoke run.
QUICK_ARGS = {"compare_train": ["--quick"],
              "create_data": ["--dupe_factor", "1", "--reference_lines", "500", "--repeats", "1"],
              "train_step": ["--shapes", "small", "--small_batch_size", "4", "--warmup", "1",
                             "--repeats", "1", "--rounds", "2"],
              "wikipedia": ["--repeat", "1"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run of every part")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated subset of: {', '.join(PARTS)}")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        common.fail(f"--parts: unknown {', '.join(unknown)}; choose from {', '.join(PARTS)}")

    if subprocess.run(["bash", str(BENCH / "setup_peers.sh")]).returncode != 0:
        common.fail("bench/setup_peers.sh failed (see above); the peer rows need its venvs")
    failed = []
    for name in parts:
        script = PARTS[name]
        if not script.exists():
            print(f"[run_all] {name}: {script} does not exist yet, skipped", file=sys.stderr)
            failed.append(name)
            continue
        for stale in common.RESULTS_DIR.glob(f"{name}.*"):  # never report an old run's figures
            stale.unlink()
        cmd = [sys.executable, str(script), *(QUICK_ARGS[name] if args.quick else [])]
        print(f"[run_all] {' '.join(cmd)}", file=sys.stderr, flush=True)
        if subprocess.run(cmd).returncode != 0:
            failed.append(name)

    sections = [f"# bert_tf benchmarks\n\nRun at {common.machine_info()['time_utc']} with "
                f"`{' '.join(sys.argv)}`.\n"]
    for name in PARTS:  # a part not run now keeps its last results, marked as such
        result = common.RESULTS_DIR / f"{name}.md"
        if result.exists():
            earlier = "" if name in parts else (
                f"_{name}: from an earlier run, written "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(result.stat().st_mtime))}_\n\n")
            sections.append(earlier + result.read_text())
    paths = common.write_results("summary", {"parts": parts, "failed": failed},
                                 "\n\n".join(sections))
    print(f"[run_all] wrote {paths[1]}", file=sys.stderr)
    if failed:
        common.fail(f"these parts failed or are missing: {', '.join(failed)}")


if __name__ == "__main__":
    main()
