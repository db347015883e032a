"""Training-step benchmark: bert_tf side by side with Hugging Face transformers
(PyTorch) and TF Model Garden, on the same CPU, config and synthetic batch, in
one run; plus 1 rank x 2 threads vs 2 ranks x 1 thread under Horovod.

Every row is its own process (so peak RSS is per row, and per rank): ours in
the project's .venv, the peers in their benchmark-only venvs made by
bench/setup_peers.sh. The rows of a shape are timed in interleaved rounds
(bench/rounds.py): each process is warmed up once, then every row times --repeats
steps per round, --rounds times; rows report the median and min-max of their
rounds, ratios the ratio of medians with the min-max of the per-round ratios, and
VERDICT lines say whether that spread crosses 1.0. TensorFlow's matmul peak (fp32
and bf16, same threads) is measured at the start and the end, and turns
sequences/s into model FLOPs utilisation (MFU; against the better of the two).

Ours is timed through the training module's own update,
`bert_tf.train.loop.PretrainingState.update` (forward/backward compiled with XLA
when on, then allreduce, clip and the optimizer step) - the code
run_pretraining.py runs - with AdamW, like both peers.

    .venv/bin/python bench/compare_train.py              # everything (about an hour on 2 cores)
    .venv/bin/python bench/compare_train.py --quick      # tiny smoke run (~3 min)

Before and after a change, in the same interleaved rounds: `git worktree add /tmp/old REV`,
then `--baseline /tmp/old` adds that checkout's rows (bert_tf-baseline) and "ours / baseline"
ratios; e.g. `--frameworks bert_tf --only bert_tf:fp32:off,bert_tf-baseline:fp32:off`.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import compare_report as report  # noqa: E402
import rounds  # noqa: E402

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OURS_PYTHON = REPO / ".venv" / "bin" / "python"
HOROVODRUN = REPO / ".venv" / "bin" / "horovodrun"
# framework -> (venv, script, TF_ENABLE_ONEDNN_OPTS for the row; None = TensorFlow's default).
# TF leaves its oneDNN kernels off on CPUs without AVX512_VNNI/BF16/AMX and bert_tf turns them
# on, so Model Garden runs both as its users get it and with oneDNN on.
PEER_SCRIPTS = {
    "hf-torch": ("hf", BENCH / "peers" / "hf_train_step.py", None),
    "modelgarden": ("modelgarden", BENCH / "peers" / "modelgarden_train_step.py", None),
    "modelgarden-onednn": ("modelgarden", BENCH / "peers" / "modelgarden_train_step.py", "1"),
}
OURS, BASELINE, PEAK_DTYPE = report.OURS, report.BASELINE, report.PEAK_DTYPE


# ----------------------------------------------------------------------------- child processes

def measure_peaks(args):
    """Child: TensorFlow's fp32 and bf16 matmul peak at --threads threads."""
    common.configure_tf_threads(args.threads)
    common.print_json({
        "peak_flops": {dtype: common.measure_matmul_peak(dtype, args.peak_size,
                                                         steps_per_repeat=args.steps_per_repeat)
                       for dtype in args.peak_dtypes.split(",")},
        "threads": args.threads, "matmul_size": args.peak_size})


def ours_step(args):
    """Child (also one Horovod rank): times PretrainingState.update on a fixed batch,
    and with --phases each part of it: forward/backward, gradient allreduce,
    and the rest of apply_update (clip + optimizer)."""
    import bert_tf

    bert_tf.use_onednn_by_default()  # before TensorFlow loads, as run_pretraining.py does
    common.configure_tf_threads(args.threads)
    import tensorflow as tf

    from bert_tf.model.config import BertConfig
    from bert_tf.train import distributed
    from bert_tf.train.config import PretrainingConfig
    from bert_tf.train.loop import PretrainingState

    distributed.init()
    rank, num_ranks = distributed.rank(), distributed.size()
    reason = common.skip_reason(
        args, common.measure_matmul_peak(PEAK_DTYPE[args.precision], 1024, repeats=1))
    if reason:
        common.report_skip(args, {**vars(args), "framework": OURS, "skipped": reason})
        return
    shape = {k: v for k, v in common.SHAPES[args.shape].items() if k != "name"}
    bert_config = BertConfig(vocab_size=common.VOCAB_SIZE, hidden_act=args.hidden_act, **shape)
    config = PretrainingConfig(
        bert_config_file="", output_dir="", train_batch_size=args.batch_size,
        max_seq_length=args.seq_length, max_predictions_per_seq=args.masked_positions,
        num_train_steps=10**6, num_warmup_steps=0, learning_rate=1e-4,
        optimizer_type=args.optimizer, precision=args.precision, use_xla=args.xla)
    state = PretrainingState(bert_config, config)
    batch = common.synthetic_batch(args.batch_size, args.seq_length, args.masked_positions,
                                   seed=rank)
    features = {name: tf.constant(value) for name, value in batch.items()}

    def step():
        return state.update([features])["loss"]

    extra = {"loss": float(step())}
    if args.phases:
        extra.update(time_phases(args, state, features, num_ranks))

    def record(timing):
        if args.phases:
            extra["allreduce_share"] = extra["allreduce_s"] / timing["step_s"]
        return common.step_record(
            args, timing, framework=OURS, xla=args.xla, optimizer=args.optimizer, rank=rank,
            num_ranks=num_ranks, step_function="bert_tf.train.loop.PretrainingState.update",
            versions={"tensorflow": tf.__version__}, **extra)
    common.serve_rounds(step, args, record, reporter=rank == 0)


def time_phases(args, state, features, num_ranks):
    """Seconds per call of each part of an update, timed apart (each blocks)."""
    import tensorflow as tf

    from bert_tf.train import distributed

    totals = tf.constant([float(args.masked_positions * args.batch_size * num_ranks),
                          float(args.batch_size * num_ranks)])

    grads, metric_sums = state.gradients(features, totals)

    @tf.function  # grads as an argument: Horovod names its op after graph tensors
    def allreduce_gradients(gradients):
        return tf.add_n([tf.reduce_sum(g) for g in distributed.allreduce_sum(gradients)])

    def forward_backward():
        return state.gradients(features, totals)[1].numpy()

    def apply_update():
        return state.apply_update(grads, metric_sums)["grad_norm"].numpy()

    kwargs = dict(warmup=1, repeats=args.repeats)
    result = {"fwd_bwd_s": common.time_step(forward_backward, **kwargs)["step_s"],
              "allreduce_s": common.time_step(lambda: allreduce_gradients(grads).numpy(),
                                              **kwargs)["step_s"],
              "apply_update_s": common.time_step(apply_update, **kwargs)["step_s"]}
    result["optimizer_s"] = max(result["apply_update_s"] - result["allreduce_s"], 0.0)
    return result


# ----------------------------------------------------------------------------- the parent

def child_args(args, shape, precision, batch_size, threads, **extra):
    argv = ["--shape", shape, "--precision", precision, "--batch_size", batch_size,
            "--threads", threads, "--seq_length", args.seq_length,
            "--masked_positions", args.masked_positions, "--warmup", args.warmup,
            "--repeats", args.repeats, "--max_step_s", args.max_step_s,
            "--train_flops_per_sequence",
            common.train_flops_per_sequence(shape, args.seq_length, args.masked_positions)]
    for flag, value in extra.items():
        if value is True:
            argv.append(f"--{flag}")
        elif value not in (False, None):
            argv += [f"--{flag}", value]
    return [str(a) for a in argv]


def row_command(args, framework, shape, precision, xla):
    """(command, environment) of one row's child process, or (None, error message)."""
    env = common.set_thread_env(args.threads)
    batch = batch_size(args, shape)
    if framework in (OURS, BASELINE):
        if framework == BASELINE:  # its bert_tf package first on the path, our venv's the rest
            env["PYTHONPATH"] = str(args.baseline)
        return [OURS_PYTHON, __file__, "--child", "ours", "--hidden_act", args.hidden_act,
                *child_args(args, shape, precision, batch, args.threads, xla=xla,
                            optimizer="adamw",
                            phases=shape == args.profile_shape and precision == "fp32"
                            and not xla)], env
    venv, script, onednn = PEER_SCRIPTS[framework]
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)
    if onednn:
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
    python = common.peer_python(venv)
    if not python.exists():
        return None, f"{python} missing: run bash bench/setup_peers.sh"
    return [python, script, *child_args(args, shape, precision, batch, args.threads,
                                        xla=None if framework == "hf-torch" else xla)], env


def run_shape(args, shape):
    """Every planned row of one shape, timed in interleaved rounds (bench/rounds.py): each row's
    process is started and warmed up once, one row at a time, then all of them take turns.
    Returns the rows: their settings, the record of each round, and errors or skips."""
    plan = planned_rows(args, [shape], False) + planned_rows(args, [shape], True)
    specs = []
    for framework, _, precision, xla in plan:
        row = {"framework": framework, "shape": shape, "precision": precision, "xla": xla,
               "batch_size": batch_size(args, shape)}
        specs.append((f"{shape} {report.row_label(row)}", row,
                      *row_command(args, framework, shape, precision, xla)))
    rounds.run_processes(specs, args.rounds, args.row_timeout)
    return [row for _, row, _, _ in specs]


def run_scaling(args):
    """1 rank x N threads vs N ranks x 1 thread, same global batch, under horovodrun."""
    records = []
    for num_ranks in (1, args.threads):
        threads = args.threads // num_ranks
        batch = args.scaling_batch // num_ranks
        cmd = [HOROVODRUN, "-np", num_ranks, "-H", f"localhost:{num_ranks}", "--gloo",
               OURS_PYTHON, __file__, "--child", "ours",
               *child_args(args, args.scaling_shape, "fp32", batch, threads, phases=True,
                           optimizer="adamw")]
        label = f"scaling {num_ranks} rank(s) x {threads} thread(s)"
        print(f"[compare_train] {label} ...", file=sys.stderr, flush=True)
        ranks = common.run_json(cmd, env=common.set_thread_env(threads), timeout=args.row_timeout)
        errors = [r["error"] for r in ranks if "error" in r]
        ok = [r for r in ranks if "error" not in r]
        record = {"num_ranks": num_ranks, "threads_per_rank": threads, "batch_per_rank": batch,
                  "global_batch": args.scaling_batch, "shape": args.scaling_shape}
        if errors or len(ok) != num_ranks:
            record["error"] = "; ".join(errors) or f"{len(ok)} of {num_ranks} ranks reported"
        else:
            slowest = max(ok, key=lambda r: r["step_s"])
            record.update(step_s=slowest["step_s"],
                          sequences_per_s=args.scaling_batch / slowest["step_s"],
                          allreduce_share=max(r["allreduce_share"] for r in ok),
                          fwd_bwd_s=slowest["fwd_bwd_s"], allreduce_s=slowest["allreduce_s"],
                          optimizer_s=slowest["optimizer_s"],
                          peak_rss_mib_per_rank=[r["peak_rss_mib"] for r in ok])
        outcome = record.get("error", "").splitlines()[:1] or [f"{record['sequences_per_s']:.3g} seq/s"]
        print(f"[compare_train] {label}: {outcome[0]}", file=sys.stderr, flush=True)
        records.append(record)
    return records


def main():
    parser = common.add_step_args(argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("--child", choices=["ours", "peaks"], help=argparse.SUPPRESS)
    parser.add_argument("--xla", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--optimizer", choices=["adamw", "lamb"], default="adamw",
                        help=argparse.SUPPRESS)
    parser.add_argument("--shapes", default="base,small", help="comma-separated: base,small")
    parser.add_argument("--hidden_act", default="gelu",
                        help="our rows' activation: gelu (erf) or gelu_new (tanh, Model Garden's)")
    parser.add_argument("--base_batch_size", type=int, default=4)
    parser.add_argument("--small_batch_size", type=int, default=16)
    parser.add_argument("--frameworks", default=f"{OURS},hf-torch,modelgarden,modelgarden-onednn")
    parser.add_argument("--ours_precisions", default="fp32,bf16",
                        help="add amp to include TF's auto mixed precision rewrite")
    parser.add_argument("--profile_shape", default="base",
                        help="shape whose ours fp32 row also times its phases")
    parser.add_argument("--scaling_shape", default="small")
    parser.add_argument("--scaling_batch", type=int, default=16, help="global batch for scaling")
    parser.add_argument("--no_scaling", action="store_true")
    parser.add_argument("--peak_size", type=int, default=4096)
    parser.add_argument("--peak_dtypes", default="float32,bfloat16", help=argparse.SUPPRESS)
    parser.add_argument("--row_timeout", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds: each row is timed once per round")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout of an earlier bert_tf (git worktree add DIR REV): adds "
                             "its rows as bert_tf-baseline, our precisions and XLA settings")
    parser.add_argument("--no_modelgarden_xla", dest="modelgarden_xla", action="store_false")
    parser.add_argument("--only", default="",
                        help="run just these rows, e.g. bert_tf:bf16:off,modelgarden:fp32:on")
    parser.add_argument("--results_name", default="compare_train",
                        help="writes bench/results/NAME.json and NAME.md")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: small shape only, batch 4, one timed step per row")
    # Per row: 1 warm-up step, then per round the median of 3 timed steps.
    parser.set_defaults(max_step_s=120.0, warmup=1, repeats=3)
    args = parser.parse_args()
    if args.child == "ours":
        if args.train_flops_per_sequence is None:  # run by hand or by gpu_check.sh
            args.train_flops_per_sequence = common.train_flops_per_sequence(
                args.shape, args.seq_length, args.masked_positions)
        return ours_step(args)
    if args.child == "peaks":
        return measure_peaks(args)
    if args.quick:
        args.shapes, args.small_batch_size, args.scaling_batch = "small", 4, 4
        args.scaling_shape = args.profile_shape = "small"
        args.warmup, args.repeats, args.rounds, args.peak_size = 1, 1, 2, 1024
    run(args)


def planned_rows(args, shapes, xla):
    """(framework, shape, precision, xla) in order of importance: fp32, then bf16, then amp."""
    frameworks = [f for f in args.frameworks.split(",") if f]
    ours_precisions = args.ours_precisions.split(",")
    plan = []
    for shape in shapes:
        for precision in ("fp32", "bf16", "amp"):
            for ours in (OURS, BASELINE):
                if ours in frameworks and precision in ours_precisions and not (
                        xla and precision == "amp"):
                    plan.append((ours, shape, precision, xla))
            if precision == "amp":
                continue
            if "hf-torch" in frameworks and not xla:
                plan.append(("hf-torch", shape, precision, xla))
            for garden in ("modelgarden", "modelgarden-onednn"):
                if garden in frameworks and (args.modelgarden_xla or not xla):
                    plan.append((garden, shape, precision, xla))
    if args.only:
        wanted = set(args.only.split(","))
        plan = [row for row in plan if f"{row[0]}:{row[2]}:{'on' if row[3] else 'off'}" in wanted]
    return plan


def run(args):
    if not OURS_PYTHON.exists():
        common.fail(f"{OURS_PYTHON} missing: run `make venv` first")
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for shape in shapes:
        if shape not in common.SHAPES:
            common.fail(f"--shapes: unknown shape {shape!r}; choose from {sorted(common.SHAPES)}")
    if args.baseline:
        if not (args.baseline / "bert_tf" / "__init__.py").is_file():
            common.fail(f"--baseline {args.baseline}: no bert_tf/__init__.py there; give a "
                        "checkout of the repository, e.g. `git worktree add /tmp/old REV`")
        args.baseline = args.baseline.resolve()
        args.frameworks += f",{BASELINE}"
    unknown = {f for f in args.frameworks.split(",") if f} - {OURS, BASELINE, *PEER_SCRIPTS}
    if unknown:
        common.fail(f"--frameworks: unknown {sorted(unknown)}; choose from "
                    f"{[OURS, *PEER_SCRIPTS]}")
    info = {"machine_at_start": common.machine_info(), "command": sys.argv,
            "results_name": args.results_name, "rounds": args.rounds}
    peaks = {"start": rounds.measure_peaks(OURS_PYTHON, args.threads, args.peak_size)}
    print("[compare_train] " + rounds.peaks_line("start", peaks["start"]), file=sys.stderr)
    scaling = [] if args.no_scaling else run_scaling(args)
    rows = []
    for shape in shapes:  # results are rewritten after each shape
        rows += run_shape(args, shape)
        save(info, peaks, rows, scaling)
    peaks["end"] = rounds.measure_peaks(OURS_PYTHON, args.threads, args.peak_size)
    print("[compare_train] " + rounds.peaks_line("end", peaks["end"]), file=sys.stderr)
    print(report.render(save(info, peaks, rows, scaling)))


def batch_size(args, shape):
    return args.base_batch_size if shape == "base" else args.small_batch_size


def save(info, peaks, rows, scaling):
    """Writes the results so far (a cut-short run still leaves its rows); returns them."""
    from bert_tf.tools import estimate

    info["machine_at_end"] = common.machine_info()
    payload = report.payload(info, peaks, rows, scaling)
    payload["flops_formula"] = estimate.training_flops_per_sequence.__doc__
    common.write_results(info["results_name"], payload, report.render(payload))
    return payload


if __name__ == "__main__":
    main()
