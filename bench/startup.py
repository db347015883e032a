"""What a short pretraining process costs from start to exit: run_pretraining.py on the tests'
tiny model (L2 H64, seq 64) for a few updates, one rank, one thread, timed whole (Python and
TensorFlow start, tracing, the first call's graph optimisation, the updates, the checkpoint).
Every multi-process test and every resumed or preempted job pays it. Rows are timed in
interleaved rounds (bench/rounds.py): seconds per process, median (min-max).

    .venv/bin/python bench/startup.py [--baseline /tmp/old] [--rounds 3] [--updates 4]

--baseline times an earlier checkout (its run_pretraining.py and bert_tf) in the same rounds
and prints "ours / baseline". Records come from ../shared/data/corpora/sample_text.txt, made once.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import rounds  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
TINY_BERT = ('{"vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 2, '
             '"num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 64}')


def make_records(directory: Path) -> tuple[Path, Path]:
    """Pretraining records at seq 64 and the tiny bert_config, in `directory`."""
    config, records = directory / "bert_config.json", directory / "train.tfrecord"
    config.write_text(TINY_BERT)
    subprocess.run([sys.executable, REPO / "create_pretraining_data.py",
                    f"--input_file={SHARED / 'corpora' / 'sample_text.txt'}",
                    f"--output_file={records}",
                    f"--vocab_file={SHARED / 'vocab' / 'bert-base-uncased.txt'}",
                    "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=2",
                    "--noprogress"], check=True, capture_output=True,
                   env=common.set_thread_env(1))
    return config, records


def process_row(checkout: Path, config: Path, records: Path, output: Path, updates: int):
    """measure(round_index) for rounds.run_rounds: one whole run_pretraining.py process."""
    env = {**common.set_thread_env(1), "PYTHONPATH": str(checkout)}
    command = [sys.executable, checkout / "run_pretraining.py", "--do_train",
               f"--bert_config_file={config}", f"--input_files={records}",
               "--train_batch_size=8", "--max_seq_length=64", "--max_predictions_per_seq=10",
               f"--num_train_steps={updates}", "--num_warmup_steps=0",
               f"--save_checkpoints_steps={updates}", f"--log_every_n_steps={updates}"]

    def measure(round_index):
        run_dir = output / f"round{round_index}"
        start = time.perf_counter()
        proc = subprocess.run([*command, f"--output_dir={run_dir}"], env=env,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise rounds.RowError(f"{checkout}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        return {"step_s": seconds}
    return measure


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="an earlier checkout to time beside ours")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=4)
    args = parser.parse_args()
    if args.baseline and not (args.baseline / "run_pretraining.py").is_file():
        common.fail(f"--baseline {args.baseline}: no run_pretraining.py there; give a checkout "
                    "of bert_tf (git worktree add /tmp/old <commit>)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config, records = make_records(tmp)
        checkouts = {"bert_tf": REPO, **({"baseline": args.baseline.resolve()}
                                         if args.baseline else {})}
        rows = {name: process_row(path, config, records, tmp / name, args.updates)
                for name, path in checkouts.items()}
        results = rounds.run_rounds(rows, args.rounds)
    table = []
    for name, records in results.items():
        seconds = rounds.row_summary(records, 1)["step_s"]
        table.append([name, f"{seconds['median']:.2f} ({seconds['min']:.2f}-"
                            f"{seconds['max']:.2f})"])
    print(common.markdown_table(["checkout", "s per process, median (min-max)"], table))
    print(rounds.steady_line(results.values()))
    if args.baseline:
        print(rounds.verdict_line("startup: bert_tf / baseline",
                                  rounds.compare(results["bert_tf"], results["baseline"])))


if __name__ == "__main__":
    main()
