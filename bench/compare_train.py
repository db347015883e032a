"""Training-step benchmark: bert_tf side by side with Hugging Face transformers
(PyTorch) and TF Model Garden, on the same CPU, config and synthetic batch, in
one run; plus 1 rank x 2 threads vs 2 ranks x 1 thread under Horovod.

Every row is its own process (so peak RSS is per row, and per rank): ours in
the project's .venv, the peers in their benchmark-only venvs made by
bench/setup_peers.sh. A measured TensorFlow matmul peak (fp32 and bf16, same
run, same threads) turns sequences/s into model FLOPs utilisation (MFU).

Ours is timed through the training module's own update,
`bert_tf.train.loop.PretrainingState.update` (forward/backward compiled with XLA
when on, then allreduce, clip and the optimizer step) - the code
run_pretraining.py runs - with AdamW, like both peers.

    .venv/bin/python bench/compare_train.py              # everything (~30-40 min on 2 cores)
    .venv/bin/python bench/compare_train.py --quick      # tiny smoke run (~3 min)
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OURS_PYTHON = REPO / ".venv" / "bin" / "python"
HOROVODRUN = REPO / ".venv" / "bin" / "horovodrun"
BENCH_VENVS = Path(os.environ.get("BENCH_VENVS", Path.home() / ".cache/bert_tf/bench-venvs"))
# framework -> (venv, script, TF_ENABLE_ONEDNN_OPTS for the row; None = TensorFlow's default).
# TF leaves its oneDNN kernels off on CPUs without AVX512_VNNI/BF16/AMX and bert_tf turns them
# on, so Model Garden runs both as its users get it and with oneDNN on.
PEER_SCRIPTS = {
    "hf-torch": ("hf", BENCH / "peers" / "hf_train_step.py", None),
    "modelgarden": ("modelgarden", BENCH / "peers" / "modelgarden_train_step.py", None),
    "modelgarden-onednn": ("modelgarden", BENCH / "peers" / "modelgarden_train_step.py", "1"),
}
OURS = "bert_tf"
# Which matmul peak an MFU is measured against.
PEAK_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "amp": "bfloat16"}


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
        common.print_json({**vars(args), "framework": OURS, "skipped": reason})
        return
    shape = {k: v for k, v in common.SHAPES[args.shape].items() if k != "name"}
    bert_config = BertConfig(vocab_size=common.VOCAB_SIZE, **shape)
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

    timing = common.time_step(step, warmup=args.warmup, repeats=args.repeats,
                              steps_per_repeat=args.steps_per_repeat)
    extra = {}
    if args.phases:
        extra = time_phases(args, state, features, num_ranks)
        extra["allreduce_share"] = extra["allreduce_s"] / timing["step_s"]
    common.print_json(common.step_record(
        args, timing, framework=OURS, xla=args.xla, optimizer=args.optimizer, rank=rank,
        num_ranks=num_ranks, step_function="bert_tf.train.loop.PretrainingState.update",
        versions={"tensorflow": tf.__version__}, loss=step(), **extra))


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


def run_row(args, framework, shape, precision, xla, batch_size):
    """One table row in its own process; returns its record (or an error record)."""
    env = common.set_thread_env(args.threads)
    label = f"{framework} {shape} {precision}{' xla' if xla else ''}"
    print(f"[compare_train] {label} ...", file=sys.stderr, flush=True)
    if framework == OURS:
        cmd = [OURS_PYTHON, __file__, "--child", "ours",
               *child_args(args, shape, precision, batch_size, args.threads, xla=xla,
                           optimizer="adamw",
                           phases=shape == args.profile_shape and precision == "fp32" and not xla)]
    else:
        venv, script, onednn = PEER_SCRIPTS[framework]
        env.pop("TF_ENABLE_ONEDNN_OPTS", None)
        if onednn:
            env["TF_ENABLE_ONEDNN_OPTS"] = onednn
        python = BENCH_VENVS / venv / "bin" / "python"
        if not python.exists():
            return {"framework": framework, "shape": shape, "precision": precision, "xla": xla,
                    "error": f"{python} missing: run bash bench/setup_peers.sh"}
        cmd = [python, script, *child_args(args, shape, precision, batch_size, args.threads,
                                           xla=None if framework == "hf-torch" else xla)]
    (record,) = common.run_json(cmd, env=env, timeout=args.row_timeout)[-1:]
    record.update(framework=framework, shape=shape, precision=precision, xla=xla)
    print(f"[compare_train] {label}: {summary(record)}", file=sys.stderr, flush=True)
    return record


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
        print(f"[compare_train] {label}: {summary(record)}", file=sys.stderr, flush=True)
        records.append(record)
    return records


def summary(record):
    if "error" in record:
        return "ERROR " + record["error"].splitlines()[0]
    if "skipped" in record:
        return record["skipped"]
    return f"{record['sequences_per_s']:.3g} seq/s, step {record['step_s']:.3g}s"


def main():
    parser = common.add_step_args(argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("--child", choices=["ours", "peaks"], help=argparse.SUPPRESS)
    parser.add_argument("--xla", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--phases", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--optimizer", choices=["adamw", "lamb"], default="adamw",
                        help=argparse.SUPPRESS)
    parser.add_argument("--shapes", default="base,small", help="comma-separated: base,small")
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
    parser.add_argument("--time_budget_s", type=float, default=None,
                        help="rows that would start after this many seconds are marked not run")
    parser.add_argument("--no_modelgarden_xla", dest="modelgarden_xla", action="store_false")
    parser.add_argument("--only", default="",
                        help="run just these rows, e.g. bert_tf:bf16:off,modelgarden:fp32:on")
    parser.add_argument("--results_name", default="compare_train",
                        help="writes bench/results/NAME.json and NAME.md")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: small shape only, batch 4, one timed step per row")
    # Per row: 1 warm-up + 3 timed steps (BERT-base steps take ~10-30 s here).
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
        args.warmup, args.repeats, args.peak_size = 1, 1, 1024
    run(args)


def planned_rows(args, shapes, xla):
    """(framework, shape, precision, xla) in order of importance: fp32, then bf16, then amp."""
    frameworks = [f for f in args.frameworks.split(",") if f]
    ours_precisions = args.ours_precisions.split(",")
    plan = []
    for shape in shapes:
        for precision in ("fp32", "bf16", "amp"):
            if OURS in frameworks and precision in ours_precisions and not (xla and precision
                                                                           == "amp"):
                plan.append((OURS, shape, precision, xla))
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
    unknown = {f for f in args.frameworks.split(",") if f} - {OURS, *PEER_SCRIPTS}
    if unknown:
        common.fail(f"--frameworks: unknown {sorted(unknown)}; choose from "
                    f"{[OURS, *PEER_SCRIPTS]}")
    started = time.monotonic()
    info = {"machine_at_start": common.machine_info(), "command": sys.argv,
            "results_name": args.results_name}
    peak_flops = measure_peaks_child(args)

    def out_of_time():
        return args.time_budget_s and time.monotonic() - started > args.time_budget_s

    rows, scaling = [], []
    # Most important first (the first shape without XLA, scaling, then XLA, then
    # the other shapes), so a run cut short by --time_budget_s has the main
    # comparison. Results are rewritten after every row.
    stages = [(shapes[0], False), "scaling", (shapes[0], True)]
    stages += [(shape, xla) for shape in shapes[1:] for xla in (False, True)]
    for stage in stages:
        if stage == "scaling":
            if not args.no_scaling and not out_of_time():
                scaling = run_scaling(args)
            save(info, peak_flops, rows, scaling)
            continue
        for framework, shape, precision, xla in planned_rows(args, [stage[0]], stage[1]):
            if out_of_time():
                record = {"framework": framework, "shape": shape, "precision": precision,
                          "xla": xla, "skipped": "not run: --time_budget_s used up"}
            else:
                record = run_row(args, framework, shape, precision, xla, batch_size(args, shape))
            record["batch_size"] = batch_size(args, shape)
            rows.append(record)
            save(info, peak_flops, rows, scaling)
    # The peak again at the end: on a shared machine the better of the two is
    # closer to what the hardware does (MFU is recomputed from it).
    end_peaks = measure_peaks_child(args)
    peak_flops = {dtype: max(flops, end_peaks[dtype]) for dtype, flops in peak_flops.items()}
    print(render(save(info, peak_flops, rows, scaling)))


def measure_peaks_child(args):
    """TensorFlow's best matmul rate per dtype, with its default (Eigen) kernels and with
    oneDNN's, whichever is faster on this CPU."""
    best_flops = {}
    for onednn in ("0", "1"):
        env = common.set_thread_env(args.threads)
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
        (peaks,) = common.run_json([OURS_PYTHON, __file__, "--child", "peaks", "--threads",
                                    str(args.threads), "--peak_size", str(args.peak_size)],
                                   env=env)[-1:]
        if "error" in peaks:
            common.fail(f"matmul peak measurement failed: {peaks['error']}")
        print(f"[compare_train] matmul GFLOP/s with TF_ENABLE_ONEDNN_OPTS={onednn}: "
              f"{ {k: round(v / 1e9, 1) for k, v in peaks['peak_flops'].items()} }",
              file=sys.stderr)
        for dtype, flops in peaks["peak_flops"].items():
            best_flops[dtype] = max(best_flops.get(dtype, 0.0), flops)
    return best_flops


def batch_size(args, shape):
    return args.base_batch_size if shape == "base" else args.small_batch_size


def save(info, peak_flops, rows, scaling):
    """Writes the results so far (a cut-short run still leaves its rows)."""
    from bert_tf.tools import estimate

    info["machine_at_end"] = common.machine_info()
    for r in rows:
        if "sequences_per_s" in r:
            r["mfu"] = common.mfu(r["train_flops_per_sequence"], r["sequences_per_s"],
                                  peak_flops[PEAK_DTYPE[r["precision"]]])
    payload = {"info": info, "peak_flops": peak_flops, "rows": rows, "scaling": scaling,
               "ratios": ratios(rows), "targets": targets(rows, scaling),
               "flops_formula": estimate.training_flops_per_sequence.__doc__}
    common.write_results(info["results_name"], payload, render(payload))
    return payload


def measured(rows, shape, framework=None, precision=None, peers=False):
    return [r for r in rows if "sequences_per_s" in r and r["shape"] == shape
            and (framework is None or r["framework"] == framework)
            and (precision is None or r["precision"] == precision)
            and (r["framework"] != OURS if peers else True)]


def best(rows):
    return max(rows, key=lambda r: r["sequences_per_s"]) if rows else None


def row_label(r):
    return f"{r['framework']} {r['precision']}{' +XLA' if r.get('xla') else ''}"


def ratios(rows):
    """ours/peer sequences/s: best vs best, and per precision (best XLA setting of each)."""
    out = {}
    for shape in sorted({r["shape"] for r in rows}):
        ours = best(measured(rows, shape, OURS))
        if not ours:
            continue
        entry = {}
        peer = best(measured(rows, shape, peers=True))
        if peer:
            entry["ours_best_over_best_peer"] = {
                "ratio": ours["sequences_per_s"] / peer["sequences_per_s"],
                "ours": row_label(ours), "peer": row_label(peer)}
        for precision in ("fp32", "bf16"):
            mine = best(measured(rows, shape, OURS, precision))
            for framework in PEER_SCRIPTS:
                theirs = best(measured(rows, shape, framework, precision))
                if mine and theirs:
                    entry[f"{precision} ours/{framework}"] = (
                        mine["sequences_per_s"] / theirs["sequences_per_s"])
        out[shape] = entry
    return out


def targets(rows, scaling):
    """The four targets of issue 8, each with its measured value, for BERT-base
    (or the first shape measured, in a run without it)."""
    shape = "base" if measured(rows, "base", OURS) else next(
        (r["shape"] for r in rows if r["framework"] == OURS and "sequences_per_s" in r), None)
    ours = measured(rows, shape, OURS)
    peer = best(measured(rows, shape, peers=True))
    fp32, bf16 = best(measured(rows, shape, OURS, "fp32")), best(measured(rows, shape, OURS,
                                                                          "bf16"))
    result = {}
    if ours and peer:
        value = best(ours)["sequences_per_s"] / peer["sequences_per_s"]
        result[f"ours best >= 1.3x best peer ({shape})"] = {"value": value, "met": value >= 1.3}
    if fp32 and bf16:
        value = bf16["sequences_per_s"] / fp32["sequences_per_s"]
        result[f"ours bf16 >= 2x fp32 ({shape})"] = {"value": value, "met": value >= 2.0}
    if ours:
        top = max(ours, key=lambda r: r["mfu"])
        result[f"ours MFU >= 50% of measured peak ({shape}, {row_label(top)})"] = {
            "value": top["mfu"], "met": top["mfu"] >= 0.5}
    ok = [s for s in scaling if "sequences_per_s" in s]
    if len(ok) == 2:
        value = ok[1]["sequences_per_s"] / ok[0]["sequences_per_s"]
        result["2 ranks x 1 thread within 10% of 1 x 2 (seq/s ratio)"] = {
            "value": value, "met": value >= 0.9}
    return result


def render(payload):
    peaks = payload["peak_flops"]
    info = payload["info"]
    lines = [
        "# Training step: bert_tf vs Hugging Face (PyTorch) vs TF Model Garden", "",
        f"Machine: {info['machine_at_start']['cpu']}, {info['machine_at_start']['cpu_count']} "
        f"CPUs; load average at start {info['machine_at_start']['load_average']}, at end "
        f"{info['machine_at_end']['load_average']} (a shared machine: noisy numbers).",
        f"Measured TF matmul peak (best of start and end of the run): fp32 "
        f"{peaks['float32'] / 1e9:.1f} GFLOP/s, bf16 {peaks['bfloat16'] / 1e9:.1f} GFLOP/s; "
        "under a varying load a row can beat it (MFU > 100%). "
        "MFU = train FLOPs/sequence x sequences/s / "
        "peak of the row's precision (bf16 peak for bf16 rows, also for the peers). "
        "Train FLOPs = 3 x forward matmul FLOPs (formula in bench/common.py).", "",
    ]
    headers = ["shape", "framework", "precision", "XLA", "batch", "step s", "seq/s", "MFU",
               "peak RSS MiB", "note"]
    table = []
    for r in payload["rows"]:
        note = r.get("error", "").splitlines()[0][:80] if "error" in r else r.get("skipped", "")
        table.append([r["shape"], r["framework"], r["precision"], "on" if r["xla"] else "off",
                      r.get("batch_size"), r.get("step_s"), r.get("sequences_per_s"),
                      f"{r['mfu']:.1%}" if "mfu" in r else None, r.get("peak_rss_mib"), note])
    lines += [common.markdown_table(headers, table), ""]
    profiled = [r for r in payload["rows"] if "fwd_bwd_s" in r]
    for r in profiled:
        lines.append(f"Where ours' time goes ({r['shape']} {r['precision']}, per update, parts "
                     f"timed apart): forward+backward {r['fwd_bwd_s']:.3g}s, allreduce "
                     f"{r['allreduce_s']:.3g}s, clip+optimizer {r['optimizer_s']:.3g}s; whole "
                     f"update {r['step_s']:.3g}s.")
    lines += ["", "## Ratios (sequences/s, ours / peer)", ""]
    for shape, entry in payload["ratios"].items():
        for name, value in entry.items():
            if isinstance(value, dict):
                lines.append(f"- {shape}: {name}: {value['ratio']:.2f} "
                             f"({value['ours']} vs {value['peer']})")
            else:
                lines.append(f"- {shape}: {name}: {value:.2f}")
    if payload["scaling"]:
        lines += ["", "## Scaling under horovodrun --gloo (ours, fp32, same global batch)", ""]
        table = [[s["num_ranks"], s["threads_per_rank"], s["batch_per_rank"], s.get("step_s"),
                  s.get("sequences_per_s"),
                  f"{s['allreduce_share']:.1%}" if "allreduce_share" in s else None,
                  " / ".join(f"{m:.0f}" for m in s.get("peak_rss_mib_per_rank", [])),
                  s.get("error", "")[:80]]
                 for s in payload["scaling"]]
        lines.append(common.markdown_table(
            ["ranks", "threads/rank", "batch/rank", "step s", "seq/s", "allreduce share",
             "peak RSS MiB per rank", "note"], table))
    lines += ["", "## Targets", ""]
    for name, t in payload["targets"].items():
        lines.append(f"- {name}: {t['value']:.2f} -> {'met' if t['met'] else 'MISSED'}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
