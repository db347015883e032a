"""Training throughput of the real update (bert_tf.train.loop.PretrainingState:
forward/backward, Horovod allreduce, clipping, LAMB step) in sequences/s for
BERT-base and a small config at fp32 / bf16, with and without XLA, on 1 rank
and on 2 ranks (horovodrun --gloo), all in one run:

    .venv/bin/python bench/train_step.py [--shapes base,small] [--batch_size 8]

Each row is a child process (2 ranks: one thread each, so both rank layouts use the
machine's 2 cores), warmed up once; a shape's rows are then timed in interleaved rounds
(bench/rounds.py), all of them alive at once (BERT-base: about 3 GB per process). Results go to bench/results/train_step.{json,md}.
The machine may be shared: the load average at start is recorded.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import rounds  # noqa: E402

HERE = Path(__file__).resolve()
VENV_BIN = Path(sys.executable).parent


def child(args) -> None:
    """One measurement (every rank runs this; rank 0 prints the record)."""
    import bert_tf

    bert_tf.use_onednn_by_default()  # before TensorFlow loads, as run_pretraining.py does
    common.configure_tf_threads(args.threads)
    import tensorflow as tf

    from bert_tf.model.config import BertConfig
    from bert_tf.train import distributed
    from bert_tf.train.config import PretrainingConfig
    from bert_tf.train.loop import PretrainingState

    distributed.init()
    shape = {k: v for k, v in common.SHAPES[args.shape].items() if k != "name"}
    bert_config = BertConfig(vocab_size=common.VOCAB_SIZE, **shape)
    with tempfile.TemporaryDirectory() as tmp:
        config = PretrainingConfig(
            bert_config_file="unused", output_dir=tmp, input_files="unused", do_train=True,
            train_batch_size=args.batch_size, max_seq_length=args.seq_length,
            max_predictions_per_seq=args.masked_positions, num_train_steps=1000,
            num_warmup_steps=10, learning_rate=1e-4, precision=args.precision, use_xla=args.xla)
        state = PretrainingState(bert_config, config)
    distributed.broadcast_variables(list(state.checkpoint_variables().values()))
    batch = common.synthetic_batch(args.batch_size, args.seq_length, args.masked_positions,
                                   seed=distributed.rank())
    features = {k: tf.constant(v) for k, v in batch.items()}
    ranks = distributed.size()

    def record(timing):
        result = common.step_record(args, timing, xla=args.xla, ranks=ranks)
        result["sequences_per_s"] *= ranks  # over all ranks
        return result
    common.serve_rounds(lambda: state.update([features]), args, record,
                        reporter=distributed.rank() == 0)


def child_command(args, shape, precision, xla, ranks):
    threads = 2 // ranks
    cmd = [sys.executable, HERE, "--child", "--shape", shape, "--precision", precision,
           "--batch_size", args.batch_size if shape == "base" else args.small_batch_size,
           "--seq_length", args.seq_length, "--masked_positions", args.masked_positions,
           "--threads", threads, "--warmup", args.warmup, "--repeats", args.repeats,
           "--train_flops_per_sequence",
           common.train_flops_per_sequence(shape, args.seq_length, args.masked_positions)]
    if xla:
        cmd.append("--xla")
    if ranks > 1:
        cmd = [VENV_BIN / "horovodrun", "-np", ranks, "-H", f"localhost:{ranks}", "--gloo", *cmd]
    return cmd, common.set_thread_env(threads)


def run_shape(args, shape):
    """The shape's rows (precision x XLA x ranks), each process warmed up once, then timed in
    interleaved rounds (bench/rounds.py); returns one record per row."""
    specs = []
    for precision in ("fp32", "bf16"):
        for xla in (False, True):
            for ranks in (1, 2):
                row = {"shape": shape, "precision": precision, "xla": xla, "ranks": ranks}
                specs.append((f"{shape} {precision} XLA {'on' if xla else 'off'} {ranks} rank(s)",
                              row, *child_command(args, shape, precision, xla, ranks)))
    rounds.run_processes(specs, args.rounds, args.timeout)
    for _, row, _, _ in specs:
        row["summary"] = rounds.row_summary(row["rounds"], 1)
        if row["summary"]:  # sequences/s over all ranks, from the median step
            row["sequences_per_s"] = row["rounds"][0]["batch_size"] * row["ranks"] / row[
                "summary"]["step_s"]["median"]
    return [row for _, row, _, _ in specs]


def parent(args) -> None:
    machine = common.machine_info()
    records = []
    for shape in args.shapes.split(","):  # one shape's processes alive at a time
        records += run_shape(args, shape)
    rows = [(r["shape"], r["precision"], "yes" if r["xla"] else "no", r["ranks"],
             r.get("sequences_per_s"),
             r["summary"] and "{median:.3g} ({min:.3g}-{max:.3g})".format(**r["summary"]["step_s"]),
             r.get("error", "").splitlines()[0] if "error" in r else None) for r in records]
    table = common.markdown_table(
        ["config", "precision", "XLA", "ranks", "sequences/s (all ranks, median)",
         "update s median (min-max)", "error"], rows)
    header = (f"Training update throughput, seq {args.seq_length}, {args.masked_positions} "
              f"masked, LAMB, on {machine['cpu']} ({machine['cpu_count']} cores, load "
              f"{machine['load_average'][0]:.1f} at start; shared machine), {args.rounds} "
              "interleaved rounds per shape.\n\n")
    paths = common.write_results("train_step", {"machine": machine, "records": records},
                                 header + table)
    print(header + table)
    print("wrote", *paths)


def main() -> None:
    parser = common.add_step_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--child", action="store_true", help="run one measurement")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--shapes", default="base,small")
    parser.add_argument("--small_batch_size", type=int, default=32)
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
