"""Training throughput of the real update (bert_tf.train.loop.PretrainingState:
forward/backward, Horovod allreduce, clipping, LAMB step) in sequences/s for
BERT-base and a small config at fp32 / bf16, with and without XLA, on 1 rank
and on 2 ranks (horovodrun --gloo), all in one run:

    .venv/bin/python bench/train_step.py [--shapes base,small] [--batch_size 8]

Each measurement is a child process (2 ranks: one thread each, so both rank
layouts use the machine's 2 cores). Results go to bench/results/train_step.{json,md}.
The machine may be shared: the load average at start is recorded.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

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
    timing = common.time_step(lambda: state.update([features]), warmup=args.warmup,
                              repeats=args.repeats, steps_per_repeat=args.steps_per_repeat)
    ranks = distributed.size()
    record = common.step_record(args, timing, xla=args.xla, ranks=ranks)
    record["sequences_per_s"] *= ranks  # over all ranks
    if distributed.rank() == 0:
        common.print_json(record)


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


def parent(args) -> None:
    machine = common.machine_info()
    records = []
    for shape in args.shapes.split(","):
        for precision in ("fp32", "bf16"):
            for xla in (False, True):
                for ranks in (1, 2):
                    cmd, env = child_command(args, shape, precision, xla, ranks)
                    print(f"{shape} {precision} xla={xla} ranks={ranks} ...", flush=True)
                    result = common.run_json(cmd, env=env, timeout=args.timeout)
                    for record in result:
                        record.update(shape=shape, precision=precision, xla=xla, ranks=ranks)
                        print("   ", record.get("sequences_per_s", record.get("error")), flush=True)
                    records += result
    rows = [(r["shape"], r["precision"], "yes" if r["xla"] else "no", r["ranks"],
             r.get("batch_size"), r.get("sequences_per_s"), r.get("step_s"),
             r.get("error", "").splitlines()[0] if "error" in r else None) for r in records]
    table = common.markdown_table(
        ["config", "precision", "XLA", "ranks", "batch/rank", "sequences/s (all ranks)",
         "update s", "error"], rows)
    header = (f"Training update throughput, seq {args.seq_length}, {args.masked_positions} "
              f"masked, LAMB, on {machine['cpu']} ({machine['cpu_count']} cores, load "
              f"{machine['load_average'][0]:.1f} at start; shared machine).\n\n")
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
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
