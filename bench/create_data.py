"""create_pretraining_data throughput: ours at 1 and 2 workers on the formatted Gutenberg corpus,
and TF Model Garden's official/nlp/data/create_pretraining_data.py (Google's algorithm, pure
Python) on the same formatted input (the whole corpus, or its first --reference_lines lines), run
in its own venv.

Prints instances/s, input MB/s, CPU seconds and peak RSS per run, and the per-process ratio
(ours at 1 worker on the same input vs the reference). Wall figures are noisy on a shared box;
instances per CPU-second are steadier.

    python bench/create_data.py [--reference_python PATH] [--reference_lines N] [--repeats 3]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import markdown_table, print_json, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = Path("/root/.cache/bert_tf/bench-venvs/modelgarden/bin/python")
REFERENCE_SETUP = (f"flock {DEFAULT_REFERENCE.parents[2]}/.modelgarden.lock sh -c 'python3.11 -m "
                   f"venv {DEFAULT_REFERENCE.parents[1]} && {DEFAULT_REFERENCE.parent}/pip "
                   "install tf-models-official==2.20.0'")


def run_measured(cmd, env=None):
    """Runs cmd; returns (wall seconds, CPU seconds, peak RSS MiB of the largest process, stdout)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        output = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(map(str, cmd))} failed:\n{output[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, output


def count_records(paths):
    import tensorflow as tf

    return sum(1 for p in paths for _ in tf.data.TFRecordDataset(str(p)))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(REPO.parent / "shared/data/corpora/gutenberg"),
                        help="directory of raw .txt books")
    parser.add_argument("--vocab_file",
                        default=str(REPO.parent / "shared/data/vocab/bert-base-uncased.txt"))
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of ours at 1 and 2 workers on the whole corpus, alternated; "
                             "the median wall time is reported (single runs vary ~1.5x here)")
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--reference_python", default=str(DEFAULT_REFERENCE),
                        help=f"python of a venv with tf-models-official; make it with: "
                             f"{REFERENCE_SETUP}")
    parser.add_argument("--reference_lines", type=int, default=0,
                        help="lines of the formatted corpus given to both for the per-process "
                             "comparison; 0 = the whole corpus (the reference takes ~6 min)")
    args = parser.parse_args()
    if not Path(args.reference_python).exists():
        raise SystemExit(f"error: no Model Garden venv at {args.reference_python}; create it "
                         f"with: {REFERENCE_SETUP}")
    from bert_tf.data.files import expand_patterns
    from bert_tf.data.format_text import format_files

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        format_files(expand_patterns(f"{args.corpus}/*.txt"), tmp / "text", args.num_shards)
        shards = sorted((tmp / "text").glob("part-*.txt"))
        corpus_mb = sum(p.stat().st_size for p in shards) / 1e6
        lines = shards[0].read_text(encoding="utf-8").split("\n")
        tiny, tiny2 = tmp / "tiny.txt", tmp / "tiny2.txt"
        tiny.write_text("\n".join(lines[:40]) + "\n", encoding="utf-8")
        tiny2.write_text("\n".join(lines[40:80]) + "\n", encoding="utf-8")
        if args.reference_lines:  # a quick run: both on the first lines only
            same_input = [tmp / "subset.txt"]
            same_input[0].write_text("\n".join(lines[:args.reference_lines]) + "\n",
                                     encoding="utf-8")
            same_input_mb = same_input[0].stat().st_size / 1e6
        else:
            same_input, same_input_mb = shards, corpus_mb
        common_flags = [f"--vocab_file={args.vocab_file}", "--do_lower_case=true",
                        f"--dupe_factor={args.dupe_factor}", "--max_seq_length=128",
                        "--max_predictions_per_seq=20"]

        def ours(name, inputs, mb, workers):
            out = tmp / name
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            wall, cpu, rss, output = run_measured(
                [sys.executable, REPO / "create_pretraining_data.py",
                 f"--input_file={','.join(map(str, inputs))}",
                 f"--output_file={out}/part-{{shard}}.tfrecord", f"--num_workers={workers}",
                 "--noprogress", *common_flags], env)
            instances = int(re.search(r"instances: (\d+)", output).group(1))
            return dict(run=name, implementation="bert_tf", workers=workers, input_mb=mb,
                        instances=instances, wall_s=wall, cpu_s=cpu, peak_rss_mib=rss)

        def reference(name, inputs, mb):
            out = tmp / f"{name}.tfrecord"
            wall, cpu, rss, _ = run_measured(
                [args.reference_python, "-m", "official.nlp.data.create_pretraining_data",
                 f"--input_file={','.join(map(str, inputs))}", f"--output_file={out}",
                 *common_flags], env)
            return dict(run=name, implementation="Model Garden 2.20.0", workers=1,
                        input_mb=mb, instances=count_records([out]), wall_s=wall,
                        cpu_s=cpu, peak_rss_mib=rss)

        # Start-up (interpreter, TensorFlow, vocab) measured on 40 lines and subtracted below.
        results.append(reference("reference_startup", [tiny], 0.0))
        results.append(reference("reference_same_input", same_input, same_input_mb))
        results.append(ours("ours_startup", [tiny], 0.0, 1))
        results.append(ours("ours_same_input", same_input, same_input_mb, 1))
        # Two tiny inputs, so that 2 workers really start (one input runs in-process).
        results.append(ours("ours_startup_2w", [tiny, tiny2], 0.0, 2))
        runs = {1: [], 2: []}
        for _ in range(args.repeats):
            for workers, runs_of in runs.items():
                runs_of.append(ours(f"ours_full_{workers}w", shards, corpus_mb, workers))
        for runs_of in runs.values():
            median = sorted(runs_of, key=lambda r: r["wall_s"])[len(runs_of) // 2]
            results.append({**median, "wall_s_all": [r["wall_s"] for r in runs_of]})
    for r in results:
        r["instances_per_s"] = r["instances"] / r["wall_s"]  # start-up included
        r["instances_per_cpu_s"] = r["instances"] / r["cpu_s"]
        r["input_mb_per_s"] = r["input_mb"] / r["wall_s"]
        rows.append([r["run"], r["implementation"], r["workers"], r["input_mb"], r["instances"],
                     r["wall_s"], r["instances_per_s"], r["instances_per_cpu_s"],
                     r["input_mb_per_s"], r["peak_rss_mib"]])
        print_json(r)
    by_run = {r["run"]: r for r in results}

    def net_rate(run, startup, seconds):
        return (by_run[run]["instances"] - by_run[startup]["instances"]) / max(
            by_run[run][seconds] - by_run[startup][seconds], 1e-9)

    ratios = {
        "per_process_vs_reference_wall": by_run["ours_same_input"]["instances_per_s"]
        / by_run["reference_same_input"]["instances_per_s"],
        "per_process_vs_reference_cpu": by_run["ours_same_input"]["instances_per_cpu_s"]
        / by_run["reference_same_input"]["instances_per_cpu_s"],
        "per_process_vs_reference_cpu_net_of_startup":
            net_rate("ours_same_input", "ours_startup", "cpu_s")
            / net_rate("reference_same_input", "reference_startup", "cpu_s"),
        "per_process_vs_reference_wall_net_of_startup":
            net_rate("ours_same_input", "ours_startup", "wall_s")
            / net_rate("reference_same_input", "reference_startup", "wall_s"),
        "two_workers_vs_one": by_run["ours_full_2w"]["instances_per_s"]
        / by_run["ours_full_1w"]["instances_per_s"],
        "two_workers_vs_one_net_of_startup": net_rate("ours_full_2w", "ours_startup_2w", "wall_s")
        / net_rate("ours_full_1w", "ours_startup", "wall_s"),
    }
    table = markdown_table(
        ["run", "implementation", "workers", "input MB", "instances", "wall s", "instances/s",
         "instances/CPU-s", "input MB/s", "peak RSS MiB"], rows)
    summary = "\n".join(f"{k}: {v:.2f}x" for k, v in ratios.items())
    input_text = (f"the first {args.reference_lines} lines of" if args.reference_lines
                  else "all of")
    note = (f"dupe_factor={args.dupe_factor}, max_seq_length=128; reference and ours_same_input use "
            f"{input_text} the formatted corpus ({same_input_mb:.2f} MB); "
            "wall times include interpreter and TensorFlow start-up (the *_startup runs on 40 "
            "lines measure it: net-of-startup rates subtract them); ours_full_* are the median of "
            f"{args.repeats} alternated runs; peak RSS is the largest single process.")
    print(f"{table}\n\n{summary}\n\n{note}")
    write_results("create_data", {"results": results, "ratios": ratios, "note": note},
                  f"# create_pretraining_data throughput\n\n{table}\n\n{summary}\n\n{note}")


if __name__ == "__main__":
    main()
