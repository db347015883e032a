"""Convergence parity: the same small BERT, data, initial weights, batch, schedule and update
rule trained by bert_tf (1 rank, and 2 Horovod ranks with half the per-rank batch), by
Hugging Face BertForPreTraining on PyTorch and by TF Model Garden's BERT; held-out masked-LM
loss/accuracy and NSP accuracy every --eval_every updates, on the same held-out records, for
all of them.

    .venv/bin/python bench/convergence.py                        # `make convergence`
    .venv/bin/python bench/convergence.py --num_train_steps=100  # what fits a busy machine
    .venv/bin/python bench/convergence.py --optimizer_type=lamb --learning_rate=1e-2 \
        --runs=bert_tf,bert_tf_trust_all,hf,hf_trust_all        # LAMB trust ratio, both ways
    .venv/bin/python bench/convergence.py --runs=bert_tf,hf_trainer  # HF's own AdamW

Steps (cached in --work_dir, rerun-safe): Gutenberg books -> format_text -> masked TFRecords
(create_pretraining_data.py, static masks, held-out book apart) -> .npz copies for the peers
(one array format for both; the HF venv has no TensorFlow) -> one initial checkpoint (bert_tf
init, --seed) exported with `convert tf_to_hf` -> the runs ->
bench/results/convergence.{json,md,png}.

Runs (--runs): `bert_tf` = run_pretraining.py, 1 rank; `bert_tf_2rank` = horovodrun -np 2
--gloo, per-rank batch halved (the same updates); `hf` = bench/peers/hf_convergence.py in the
`hf` peer venv, applying bert_tf's update rule (Google's AdamW without bias correction, or
LAMB); `hf_trainer` = the same model stepped by what HF's Trainer applies by default (torch's
bias-corrected AdamW, --optimizer_type=adamw only); `modelgarden` =
bench/peers/modelgarden_convergence.py in the `modelgarden` venv, stepped by Model Garden's own
LAMB or AdamWeightDecay; the `_trust_all` variants give every variable a LAMB trust ratio
(NVIDIA's TensorFlow LAMB; --exclude_from_layer_adaptation=). bert_tf's curve comes from its
checkpoints, each evaluated here on the same held-out arrays the peer evaluates (dropout off).

Targets, printed and never asserted: bert_tf's final held-out MLM loss within 2% of the best
peer's; after warmup its curve never more than 5% above the peer's at the same update; the
2-rank curve on top of the 1-rank one. Data order and dropout masks differ between
frameworks, so the curves agree statistically, not bit for bit. Timings on a shared CPU are
noisy; the budget run is printed.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from bert_tf.tools.demo import EVAL_BOOKS, TRAIN_BOOKS  # noqa: E402  the demo's books

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
GUTENBERG = REPO.parent / "shared" / "data" / "corpora" / "gutenberg"
VOCAB = REPO.parent / "shared" / "data" / "vocab" / "bert-base-uncased.txt"
ALL_RUNS = ("bert_tf", "bert_tf_2rank", "hf", "modelgarden", "hf_trainer", "bert_tf_trust_all",
            "hf_trust_all", "modelgarden_trust_all")
# Peer run name -> (venv, script, extra flags).
PEERS = {
    "hf": ("hf", "hf_convergence.py", ()),
    "hf_trainer": ("hf", "hf_convergence.py", ("--update_rule=hf_trainer",)),
    "modelgarden": ("modelgarden", "modelgarden_convergence.py", ()),
}
SEQ, PRED = 128, 20
EVAL_BATCH = 32  # both sides evaluate the same whole batches of this size


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work_dir", type=Path, default=BENCH / "results" / "convergence")
    p.add_argument("--corpus_dir", type=Path, default=GUTENBERG)
    p.add_argument("--vocab_file", type=Path, default=VOCAB)
    # Defaults: the demo's model, batch and optimizer (bert_tf/tools/demo.py), half its
    # updates: it leaves the unigram plateau by update ~200, and all four runs take ~20 min.
    p.add_argument("--num_layers", type=int, default=2)
    p.add_argument("--hidden_size", type=int, default=128)
    p.add_argument("--num_heads", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=64, help="global sequences per update")
    p.add_argument("--num_train_steps", type=int, default=300)
    p.add_argument("--num_warmup_steps", type=int, default=25)
    p.add_argument("--eval_every", type=int, default=50)
    p.add_argument("--optimizer_type", choices=("adamw", "lamb"), default="lamb")
    p.add_argument("--learning_rate", type=float, default=1e-2)
    p.add_argument("--weight_decay_rate", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.1,
                   help="hidden and attention dropout of the model (Google's 0.1)")
    p.add_argument("--dupe_factor", type=int, default=2)
    p.add_argument("--train_books", default=",".join(TRAIN_BOOKS),
                   help="comma-separated book names in --corpus_dir (default: the demo's); the "
                        "held-out book is always " + ",".join(EVAL_BOOKS))
    p.add_argument("--max_eval_records", type=int, default=1024)
    p.add_argument("--runs", default="bert_tf,bert_tf_2rank,hf,modelgarden",
                   help=f"comma-separated, of {', '.join(ALL_RUNS)}")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--threads", type=int, default=2, help="per run (split between 2 ranks)")
    p.add_argument("--tag", default="", help="suffix of the results files")
    args = p.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    unknown = sorted(set(runs) - set(ALL_RUNS))
    if unknown:
        common.fail(f"--runs: unknown {unknown}; choose from {', '.join(ALL_RUNS)}")
    if any(r.endswith("_trust_all") for r in runs) and args.optimizer_type != "lamb":
        common.fail("--runs: the _trust_all runs are LAMB variants: add --optimizer_type=lamb")
    if "hf_trainer" in runs and args.optimizer_type != "adamw":
        common.fail("--runs: hf_trainer is torch's AdamW (Hugging Face Trainer's default): add "
                    "--optimizer_type=adamw")
    if args.batch_size % 2:
        common.fail(f"--batch_size={args.batch_size} must be even (2 ranks take half each)")
    if set(args.train_books.split(",")) & set(EVAL_BOOKS):
        common.fail(f"--train_books: must not include the held-out {', '.join(EVAL_BOOKS)}")
    args.runs = runs
    return args


def log(message):
    print(f"[convergence {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(cmd, **kwargs):
    """Runs a command (printed), failing the benchmark with its output tail if it fails."""
    log(" ".join(str(c) for c in cmd))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO),
               **kwargs.pop("env", {}))
    proc = subprocess.run([str(c) for c in cmd], cwd=REPO, env=env, capture_output=True,
                          text=True, **kwargs)
    if proc.returncode:
        common.fail(f"exit {proc.returncode}: {' '.join(map(str, cmd))}\n"
                    f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc


# ----------------------------------------------------------------------------- data and weights

def make_records(args):
    """Masked TFRecords (train, held-out) -> their glob patterns; made once per --dupe_factor
    and --train_books."""
    train_books = args.train_books.split(",")
    same_as_demo = train_books == list(TRAIN_BOOKS)
    data = args.work_dir / ("data-" + ("" if same_as_demo else f"{len(train_books)}books-")
                            + f"dupe{args.dupe_factor}")
    patterns = {split: str(data / f"{split}-*.tfrecord") for split in ("train", "eval")}
    if (data / "done").exists():
        return patterns
    for split, books, dupe in (("train", train_books, args.dupe_factor),
                               ("eval", EVAL_BOOKS, 1)):
        missing = [b for b in books if not (args.corpus_dir / f"{b}.txt").exists()]
        if missing:
            common.fail(f"--corpus_dir={args.corpus_dir}: missing {missing}")
        text = data / "text" / split
        run([sys.executable, "-m", "bert_tf", "format_text", "--num_shards=2",
             "--input_files=" + ",".join(str(args.corpus_dir / f"{b}.txt") for b in books),
             f"--output_dir={text}"])
        run([sys.executable, "create_pretraining_data.py", f"--input_file={text}/part-*.txt",
             f"--output_file={data}/{split}-{{shard:05d}}.tfrecord",
             f"--vocab_file={args.vocab_file}", "--do_lower_case", f"--max_seq_length={SEQ}",
             f"--max_predictions_per_seq={PRED}", f"--dupe_factor={dupe}", "--num_workers=2",
             f"--random_seed={args.seed}", "--noprogress"])
    (data / "done").write_text("")
    return patterns


def records_to_npz(pattern, path, limit=None):
    """All (or the first `limit`) records of `pattern` as int32/float32 arrays in an .npz."""
    if path.exists():
        return path
    import numpy as np

    from bert_tf.data import input_pipeline
    # Batches of EVAL_BATCH drop at most EVAL_BATCH - 1 records (drop_remainder).
    dataset = input_pipeline.pretraining_dataset(pattern, EVAL_BATCH, SEQ, PRED,
                                                 is_training=False)
    batches = [{k: v.numpy() for k, v in b.items()} for b in dataset]
    arrays = {k: np.concatenate([b[k] for b in batches])[:limit] for k in batches[0]}
    np.savez(path.with_suffix(".tmp.npz"), **arrays)
    os.replace(path.with_suffix(".tmp.npz"), path)
    return path


def bert_config(args):
    return {"vocab_size": sum(1 for _ in open(args.vocab_file, encoding="utf-8")),
            "hidden_size": args.hidden_size, "num_hidden_layers": args.num_layers,
            "num_attention_heads": args.num_heads, "intermediate_size": 4 * args.hidden_size,
            "max_position_embeddings": 512, "hidden_dropout_prob": args.dropout,
            "attention_probs_dropout_prob": args.dropout}


def make_initial_weights(args, shape_dir):
    """bert_tf's initialisation (seeded) as a Google-format checkpoint and its HF export."""
    init_dir, hf_dir = shape_dir / "init", shape_dir / "hf_init"
    config_file = shape_dir / "bert_config.json"
    if (hf_dir / "config.json").exists():
        return config_file, str(init_dir / "model.ckpt-0"), hf_dir
    import tensorflow as tf

    from bert_tf.model import checkpoints, convert, modeling
    from bert_tf.model.config import BertConfig
    shape_dir.mkdir(parents=True, exist_ok=True)
    config = BertConfig.from_dict(bert_config(args))
    config.to_json_file(str(config_file))
    tf.random.set_seed(args.seed)
    model = modeling.BertForPreTraining(config)
    prefix = checkpoints.save_checkpoint(modeling.variables_by_name(model), init_dir, 0)
    convert.tf_to_hf(prefix, str(hf_dir), str(config_file))
    return config_file, prefix, hf_dir


# ----------------------------------------------------------------------------- the runs

def optimizer_flags(args, trust_all):
    flags = [f"--optimizer_type={args.optimizer_type}", f"--learning_rate={args.learning_rate}",
             f"--weight_decay_rate={args.weight_decay_rate}",
             f"--num_train_steps={args.num_train_steps}",
             f"--num_warmup_steps={args.num_warmup_steps}"]
    if trust_all:
        flags.append("--exclude_from_layer_adaptation=")
    return flags


def run_bert_tf(name, args, config_file, init_checkpoint, patterns):
    """run_pretraining.py on 1 or 2 ranks, a checkpoint every --eval_every updates."""
    out = args.work_dir / "runs" / f"{name}-{args.tag or 'default'}"
    ranks = 2 if name == "bert_tf_2rank" else 1
    flags = [f"--bert_config_file={config_file}", f"--init_checkpoint={init_checkpoint}",
             f"--input_files={patterns['train']}", f"--output_dir={out}",
             f"--train_batch_size={args.batch_size // ranks}", f"--max_seq_length={SEQ}",
             f"--max_predictions_per_seq={PRED}", f"--save_checkpoints_steps={args.eval_every}",
             "--keep_checkpoint_max=1000", "--log_every_n_steps=10", "--do_train",
             f"--seed={args.seed}", *optimizer_flags(args, name.endswith("_trust_all"))]
    threads = str(max(1, args.threads // ranks))
    env = {"OMP_NUM_THREADS": threads, "TF_NUM_INTRAOP_THREADS": threads,
           "TF_NUM_INTEROP_THREADS": "1"}
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    start = time.time()
    if ranks == 1:
        run([sys.executable, "run_pretraining.py", *flags], env=env)
    else:
        horovodrun = Path(sys.executable).parent / "horovodrun"
        run([horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable,
             "run_pretraining.py", *flags], env=env)
    return out, time.time() - start


def evaluate_checkpoints(out, config_file, init_checkpoint, eval_npz):
    """[{step, metrics}] for the initial weights and every checkpoint in `out`, evaluated by
    bert_tf's model and pretraining_loss on the held-out arrays (dropout off)."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.model import checkpoints, modeling
    from bert_tf.model.config import BertConfig
    model = modeling.BertForPreTraining(BertConfig.from_json_file(str(config_file)))
    variables = modeling.variables_by_name(model)
    data = dict(np.load(eval_npz))

    @tf.function(autograph=False)
    def sums_of(features):
        sums = modeling.pretraining_loss(model(features, training=False), features)
        return tf.stack([sums[name] for name in modeling.METRIC_SUMS])

    def evaluate(prefix):
        checkpoints.restore(prefix, variables, require_all=True)
        totals = np.zeros(len(modeling.METRIC_SUMS))
        for start in range(0, len(data["input_ids"]) - EVAL_BATCH + 1, EVAL_BATCH):
            totals += sums_of({k: tf.constant(v[start:start + EVAL_BATCH])
                               for k, v in data.items()}).numpy()
        metrics = modeling.metrics_from_sums(totals.tolist())
        return {k: metrics[k] for k in ("masked_lm_loss", "masked_lm_accuracy",
                                        "next_sentence_loss", "next_sentence_accuracy")}

    prefixes = sorted(glob.glob(str(out / "model.ckpt-*.index")),
                      key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    prefixes = [init_checkpoint] + [p[:-len(".index")] for p in prefixes]
    return [{"step": int(p.rsplit("-", 1)[1]), **evaluate(p)} for p in prefixes]


def run_peer(name, args, weights, train_npz, eval_npz):
    """A peer script in its venv; `weights` = {"hf_dir", "config_file", "init_checkpoint"}."""
    venv, script, extra = PEERS[name.removesuffix("_trust_all")]
    python = common.peer_python(venv)
    if not python.exists():
        run(["bash", BENCH / "setup_peers.sh", venv])
    if venv == "hf":
        extra = (f"--hf_dir={weights['hf_dir']}", *extra)
    else:
        extra = (f"--bert_config_file={weights['config_file']}",
                 f"--init_checkpoint={weights['init_checkpoint']}", *extra)
    curve_file = args.work_dir / "runs" / f"{name}-{args.tag or 'default'}.json"
    cmd = [python, BENCH / "peers" / script, *extra,
           f"--train_npz={train_npz}", f"--eval_npz={eval_npz}",
           f"--batch_size={args.batch_size}", f"--eval_every={args.eval_every}",
           f"--seed={args.seed}", f"--threads={args.threads}", f"--eval_batch_size={EVAL_BATCH}",
           f"--curve_file={curve_file}",
           *optimizer_flags(args, name.endswith("_trust_all"))]
    (args.work_dir / "runs").mkdir(parents=True, exist_ok=True)
    log(" ".join(map(str, cmd)))
    start = time.time()
    records = common.run_json(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads),
                                            TF_CPP_MIN_LOG_LEVEL="2"),
                              timeout=24 * 3600)
    if "error" in records[-1]:
        common.fail(f"{name}: {records[-1]['error']}")
    return records[0]["curve"], time.time() - start


# ----------------------------------------------------------------------------- summary

def compare(curve, reference, warmup):
    """(final relative difference, worst relative excess after warmup) of held-out MLM loss."""
    ref = {p["step"]: p["masked_lm_loss"] for p in reference}
    pairs = [(p["masked_lm_loss"], ref[p["step"]]) for p in curve if p["step"] in ref]
    final = pairs[-1][0] / pairs[-1][1] - 1.0
    after = [ours / peer - 1.0 for (ours, peer), p in zip(pairs, curve, strict=False)
             if p["step"] >= warmup]
    return final, max(after) if after else None


def summary(args, results):
    """Markdown table of the final figures and the parity targets."""
    rows = []
    for name, r in results.items():
        last = r["curve"][-1]
        rows.append([name, last["step"], last["masked_lm_loss"], last["masked_lm_accuracy"],
                     last["next_sentence_accuracy"], round(r["seconds"])])
    table = common.markdown_table(
        ["run", "updates", "held-out MLM loss", "MLM acc", "NSP acc", "wall s"], rows)
    lines = [table, ""]
    peers = [n for n in results if not n.startswith("bert_tf")]
    for ours in [n for n in results if n.startswith("bert_tf")]:
        same = [p for p in peers if p.endswith("_trust_all") == ours.endswith("_trust_all")]
        if same:
            best = min(same, key=lambda p: results[p]["curve"][-1]["masked_lm_loss"])
            final, worst = compare(results[ours]["curve"], results[best]["curve"],
                                   args.num_warmup_steps)
            lines.append(f"- {ours} vs {best}: final held-out MLM loss {final:+.1%} (target "
                         f"<= +2%: {'met' if final <= 0.02 else 'NOT met'}); worst after "
                         f"warmup {worst:+.1%} (target <= +5%: "
                         f"{'met' if worst is not None and worst <= 0.05 else 'NOT met'})")
    if {"bert_tf", "bert_tf_2rank"} <= set(results):
        final, worst = compare(results["bert_tf_2rank"]["curve"], results["bert_tf"]["curve"], 0)
        lines.append(f"- bert_tf_2rank vs bert_tf: final {final:+.1%}, largest gap {worst:+.1%}")
    return "\n".join(lines)


def plot(args, results, baseline, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, key, title in zip(axes, ("masked_lm_loss", "masked_lm_accuracy",
                                     "next_sentence_accuracy"),
                              ("held-out masked-LM loss", "held-out masked-LM accuracy",
                               "held-out NSP accuracy"), strict=True):
        for name, r in results.items():
            ax.plot([p["step"] for p in r["curve"]], [p[key] for p in r["curve"]], marker="o",
                    markersize=3, label=name)
        if key in baseline:
            ax.axhline(baseline[key], color="grey", linestyle="--", label="unigram baseline")
        ax.set_xlabel("update")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"L{args.num_layers} H{args.hidden_size} A{args.num_heads}, batch "
                 f"{args.batch_size}, {args.optimizer_type} lr {args.learning_rate}, warmup "
                 f"{args.num_warmup_steps}, {args.num_train_steps} updates")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def unigram_baseline(train_npz, eval_npz):
    """Held-out MLM accuracy/loss of always predicting the training unigram distribution."""
    import collections
    import math

    import numpy as np
    counts = []
    for path in (train_npz, eval_npz):
        data = np.load(path)
        ids = data["masked_lm_ids"][data["masked_lm_weights"] > 0]
        counts.append(collections.Counter(ids.tolist()))
    train, held = counts
    total_train, total_eval = sum(train.values()), sum(held.values())
    top = max(train, key=train.get)
    vocab = len(set(train) | set(held))
    loss = -sum(n * math.log((train[i] + 1) / (total_train + vocab)) for i, n in held.items())
    return {"masked_lm_accuracy": held[top] / total_eval, "masked_lm_loss": loss / total_eval}


def main(argv=None):
    args = parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    patterns = make_records(args)
    data_dir = Path(patterns["train"]).parent
    train_npz = records_to_npz(patterns["train"], data_dir / "train.npz")
    eval_npz = records_to_npz(patterns["eval"], data_dir / f"eval-{args.max_eval_records}.npz",
                              args.max_eval_records)
    shape_dir = args.work_dir / (f"L{args.num_layers}_H{args.hidden_size}_A{args.num_heads}"
                                 + (f"_dropout{args.dropout:g}" if args.dropout != 0.1 else ""))
    config_file, init_checkpoint, hf_dir = make_initial_weights(args, shape_dir)
    weights = {"hf_dir": hf_dir, "config_file": config_file, "init_checkpoint": init_checkpoint}
    results = {}
    for name in args.runs:
        if not name.startswith("bert_tf"):
            curve, seconds = run_peer(name, args, weights, train_npz, eval_npz)
        else:
            out, seconds = run_bert_tf(name, args, config_file, init_checkpoint, patterns)
            curve = evaluate_checkpoints(out, config_file, init_checkpoint, eval_npz)
        results[name] = {"curve": curve, "seconds": seconds}
        log(f"{name}: {json.dumps(curve[-1])} ({seconds:.0f} s)")
    baseline = unigram_baseline(train_npz, eval_npz)
    held_out = len(__import__("numpy").load(eval_npz)["input_ids"]) // EVAL_BATCH * EVAL_BATCH
    stem = "convergence" + (f"-{args.tag}" if args.tag else "")
    text = summary(args, results)
    budget = (f"Budget run: {args.num_train_steps} updates x {args.batch_size} sequences, "
              f"L{args.num_layers} H{args.hidden_size} A{args.num_heads}, seq {SEQ}, "
              f"{args.optimizer_type} lr {args.learning_rate} warmup {args.num_warmup_steps}, "
              f"eval every {args.eval_every} on {held_out} held-out records; "
              f"{time.time() - started:.0f} s in all. Unigram baseline: MLM accuracy "
              f"{baseline['masked_lm_accuracy']:.3f}, loss {baseline['masked_lm_loss']:.2f}.")
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = common.RESULTS_DIR / f"{stem}.png"
    plot(args, results, baseline, png)
    paths = common.write_results(stem, {"args": {k: str(v) for k, v in vars(args).items()},
                                        "baseline": baseline, "results": results,
                                        "machine": common.machine_info()},
                                 f"# Convergence\n\n{budget}\n\n{text}\n")
    print(f"\n{budget}\n\n{text}\n\nwrote {', '.join(map(str, [*paths, png]))}")


if __name__ == "__main__":
    main()
