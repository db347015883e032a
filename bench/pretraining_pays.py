"""Does pretraining pay? Downstream accuracy against pretraining budget (issue 28).

One architecture per run: the demo's corpus and recipe (bert_tf/tools/demo.py: 9 Gutenberg books,
LAMB 1e-2, 64 sequences per update, seq 128), pretrained once to the largest budget with a
checkpoint at every budget point (multiples of the demo's 38,400 sequences; the learning-rate
schedule is the longest run's, so a point is "sequences seen", not a shorter run). Every
checkpoint and random initialisation of the same architecture are then fine-tuned, with 3 seeds
each, on:
  - books:   the demo's task, which of three unseen books a 24-word passage comes from;
  - upos200: UPOS tagging trained on the first 200 sentences of the shared EWT test treebank
             (low resource), scored on its last 500 (bench/finetune.py's split);
  - upos:    the same with all 1,577 training sentences.
Fine-tuning runs start as soon as their checkpoint exists, beside the pretraining.

Writes bench/results/pays_NAME.{json,md} and pays_NAME.png after every finished run and asserts
nothing. Everything it makes lives in --work_dir (default ~/.cache/bert_tf/pays/NAME): a rerun
skips the pretraining steps and fine-tuning runs already done.

    .venv/bin/python bench/pretraining_pays.py --name=l2h128 --budgets=0.25,0.5,1,2,4
    .venv/bin/python bench/pretraining_pays.py --name=l4h256 --num_layers=4 --hidden_size=256 \
        --num_heads=4 --budgets=0.5,1,2 --tasks=upos200,books
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from finetune import EWT, split_ewt  # noqa: E402  bench/finetune.py's EWT split

from bert_tf.tools import demo  # noqa: E402  the demo's corpus, recipe and book task

DEMO_SEQUENCES = 38_400  # the demo: 600 updates of 64 sequences
UPOS_FLAGS = ("--task_name=pos", "--max_seq_length=64", "--train_batch_size=16", "--do_train",
              "--do_eval")
# 200 sentences need more passes than 1,577 for the same number of updates (about 125 each).
TASKS = {
    "books": demo.FINETUNING_FLAGS,
    "upos200": (*UPOS_FLAGS, "--num_train_epochs=10"),
    "upos": (*UPOS_FLAGS, "--num_train_epochs=2"),
}
# Peak fine-tuning learning rates. UPOS: 3e-4, not bench/finetune.py's 1e-4 (made for MiniLM):
# at 1e-4 the demo's model tags 2.6 points worse than random init on upos200, at 3e-4 and 1e-3
# 2.2 points better (bench/README.md, "Pretraining pays?"). Books: 5e-4 suits the demo's L2 H128;
# L4 H256 needs --finetuning_learning_rate=1e-4 (at 5e-4 its runs collapse to the majority class).
LEARNING_RATES = {"books": demo.FINETUNING_LEARNING_RATE, "upos200": 3e-4, "upos": 3e-4}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="l2h128", help="results stem: pays_NAME")
    parser.add_argument("--num_layers", type=int, default=demo.MODEL["num_hidden_layers"])
    parser.add_argument("--hidden_size", type=int, default=demo.MODEL["hidden_size"])
    parser.add_argument("--num_heads", type=int, default=demo.MODEL["num_attention_heads"])
    parser.add_argument("--budgets", default="0.25,0.5,1,2,4,8",
                        help="pretraining budgets in units of the demo's 38,400 sequences")
    parser.add_argument("--tasks", default="upos200,books,upos")
    parser.add_argument("--vocab_file", default="",
                        help="pretrain with this vocab instead of one learned from the books "
                             "(e.g. Google's uncased, the demo's before issue 28)")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                        help="pretraining precision (the curves in bench/README.md: fp32; the "
                             "demo picks bf16 on CPUs with native bfloat16 matmuls)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--finetuning_learning_rate", type=float, default=None,
                        help="every task's peak learning rate (default: LEARNING_RATES)")
    parser.add_argument("--parallel_finetuning", type=int, default=1,
                        help="fine-tuning runs at once beside the pretraining (1 thread each)")
    parser.add_argument("--work_dir", default="")
    args = parser.parse_args()
    args.budgets = sorted(float(b) for b in args.budgets.split(","))
    args.tasks = [t for t in args.tasks.split(",") if t]
    unknown = set(args.tasks) - set(TASKS)
    if unknown:
        common.fail(f"--tasks: unknown {sorted(unknown)}; choose from {sorted(TASKS)}")
    steps = [b * DEMO_SEQUENCES / 64 for b in args.budgets]
    if any(s != int(s) or s < 1 for s in steps):
        common.fail("--budgets: each must be a whole number of 64-sequence updates")
    args.work_dir = Path(args.work_dir or Path.home() / ".cache" / "bert_tf" / "pays" / args.name)
    return args


def prepare(args):
    """Corpus, WordPiece vocab, TFRecords, model config and the downstream data (once)."""
    work = args.work_dir
    if not (work / "ready").exists():
        for stale in ("corpus", "data", "finetune"):  # a stopped earlier attempt's
            shutil.rmtree(work / stale, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        books = demo.fetch_corpus(os.path.join(Path.home(), ".cache", "bert_tf", "demo"))
        data = demo.prepare_pretraining_data(str(work), books, demo.DemoConfig.dupe_factor,
                                             recipe(args), args.vocab_file or None)
        demo.write_book_task(books, str(work / "finetune" / "books"))
        split_ewt(EWT, work / "finetune" / "upos", 1577)
        split_ewt(EWT, work / "finetune" / "upos200", 200)
        # Same 500 dev sentences for both UPOS tasks.
        (work / "finetune" / "upos200" / "en_ewt-dev.conllu").write_bytes(
            (work / "finetune" / "upos" / "en_ewt-dev.conllu").read_bytes())
        (work / "data.json").write_text(json.dumps(data))
        (work / "ready").touch()
    data = json.loads((work / "data.json").read_text())
    config_file = demo.write_model_config(str(work), data["vocab"], num_hidden_layers=args.num_layers,
                                          hidden_size=args.hidden_size,
                                          num_attention_heads=args.num_heads,
                                          intermediate_size=4 * args.hidden_size)
    return data, config_file


def recipe(args) -> dict:
    """The demo's classic recipe to the largest budget at --max_seq_length and
    --max_predictions_per_seq."""
    flags_of = demo.recipe_flags("classic", updates(args.budgets[-1]))
    flags_of.update(max_seq_length=str(args.max_seq_length),
                    max_predictions_per_seq=str(args.max_predictions_per_seq))
    return flags_of


def updates(budget):
    """Updates of 64 sequences (the demo's) in `budget` x 38,400 sequences."""
    return int(budget * DEMO_SEQUENCES / 64)


def checkpoint(args, budget):
    """The pretraining checkpoint (prefix) after `budget`."""
    return args.work_dir / "model" / f"model.ckpt-{updates(budget)}"


def checkpoint_ready(args, budget):
    return budget == 0 or Path(f"{checkpoint(args, budget)}.index").exists()


def start_pretraining(args, data, config_file, log):
    """Starts the pretraining to the largest budget (resumes a stopped one), its output to
    `log`; returns the process, or None when its last checkpoint exists."""
    flagfile = demo.write_recipe(str(args.work_dir), config_file, data["vocab"],
                                 data["records"], str(args.work_dir / "model"), recipe(args),
                                 save_every=updates(args.budgets[0]), keep_all=True,
                                 precision=args.precision)
    if checkpoint_ready(args, args.budgets[-1]):
        return None
    return subprocess.Popen(demo.pretraining_command(flagfile), cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT,
                            env=demo.step_env(**demo.PRETRAINING_THREADS))


def finetune_all(args, data, config_file, pretraining):
    """Fine-tunes every (task, budget, seed) as soon as its checkpoint exists, beside the
    pretraining; returns {(task, budget): [dev accuracy per seed]}."""
    pending = [(task, budget, seed) for budget in [0.0, *args.budgets] for task in args.tasks
               for seed in range(1, args.seeds + 1)]
    runs = {}
    with concurrent.futures.ThreadPoolExecutor(args.parallel_finetuning) as pool:
        futures = {}
        while pending or futures:
            for job in [j for j in pending if checkpoint_ready(args, j[1])]:
                if len(futures) < args.parallel_finetuning:
                    pending.remove(job)
                    futures[pool.submit(finetune, args, config_file, data["vocab"], *job)] = job
            if pretraining and pretraining.poll() is not None and not futures and pending:
                common.fail(f"pretraining stopped before its last checkpoint: see "
                            f"{args.work_dir / 'pretraining.log'}")
            if not futures:
                time.sleep(10)
                continue
            done, _ = concurrent.futures.wait(futures, timeout=10,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                task, budget, _ = futures.pop(future)
                runs.setdefault((task, budget), []).append(future.result())
                write(args, runs)
    return runs


def finetune(args, config_file, vocab, task, budget, seed):
    """One run_finetuning.py process (1 thread); its dev accuracy (cached in the work dir)."""
    init = "" if budget == 0 else str(checkpoint(args, budget))
    learning_rate = args.finetuning_learning_rate or LEARNING_RATES[task]
    out = args.work_dir / "finetune" / "runs" / f"{task}-lr{learning_rate:g}-b{budget:g}-s{seed}"
    result = out / "eval_results.json"
    if not result.exists():
        cmd = [sys.executable, "run_finetuning.py", *TASKS[task],
               f"--learning_rate={learning_rate}",
               f"--data_dir={args.work_dir / 'finetune' / task}",
               f"--bert_config_file={config_file}", f"--vocab_file={vocab}",
               f"--init_checkpoint={init}", f"--output_dir={out}", f"--seed={seed}",
               "--log_every_n_steps=50"]
        proc = subprocess.run(cmd, cwd=REPO, env=common.set_thread_env(1), capture_output=True,
                              text=True)
        if proc.returncode:
            raise RuntimeError(f"{task} budget {budget} seed {seed} failed:\n{proc.stderr[-2000:]}")
    return json.loads(result.read_text())["accuracy"]


def embedding_spread(checkpoint, records):
    """How alike the word-piece embeddings are, by how often the piece occurs in the
    pretraining inputs: mean norm and mean pairwise cosine (over up to 2,000 pieces) per band.
    Pieces a run rarely sees are pushed the same way by every softmax gradient."""
    import numpy as np
    import tensorflow as tf

    embeddings = tf.train.load_checkpoint(checkpoint).get_tensor(
        "bert/embeddings/word_embeddings")
    counts = np.zeros(len(embeddings), np.int64)
    spec = {"input_ids": tf.io.VarLenFeature(tf.int64)}
    for batch in tf.data.TFRecordDataset(tf.io.gfile.glob(records)).batch(1024).map(
            lambda r: tf.io.parse_example(r, spec)):
        np.add.at(counts, batch["input_ids"].values.numpy(), 1)
    rng = np.random.default_rng(0)
    bands = {}
    for name, low, high in (("unseen", 0, 1), ("1-9", 1, 10), ("10-999", 10, 1000),
                            (">=1000", 1000, None)):
        ids = np.nonzero((counts >= low) & (counts < (high or np.inf)))[0]
        if len(ids) < 2:
            continue
        vectors = embeddings[rng.choice(ids, min(2000, len(ids)), replace=False)]
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        n = len(unit)
        bands[name] = {"pieces": int(len(ids)),
                       "mean_norm": float(np.linalg.norm(vectors, axis=1).mean()),
                       "mean_pairwise_cosine": float(((unit @ unit.T).sum() - n) / (n * n - n))}
    return bands


def summarise(args, runs):
    """Per task and budget: mean, min, max over seeds, and the gain over random init."""
    rows = []
    for task in args.tasks:
        base = runs.get((task, 0.0), [])
        for budget in [0.0, *args.budgets]:
            accs = runs.get((task, budget), [])
            if not accs:
                continue
            mean = statistics.mean(accs)
            gain = mean - statistics.mean(base) if base and budget else None
            rows.append({"task": task, "budget": budget, "sequences": int(budget * DEMO_SEQUENCES),
                         "seeds": len(accs), "mean": mean, "min": min(accs), "max": max(accs),
                         "gain_over_random": gain,
                         "pays": bool(gain and base and min(accs) > max(base))})
    return rows


def verdicts(args, rows):
    """Per task: the smallest budget at which every seed beats every random-init seed."""
    lines = []
    for task in args.tasks:
        paying = [r for r in rows if r["task"] == task and r["pays"]]
        trained = [r for r in rows if r["task"] == task and r["budget"] > 0]
        if paying:
            first = paying[0]
            lines.append(f"{task}: pretraining pays from {first['sequences']:,} sequences "
                         f"({first['budget']:g} x the demo's): "
                         f"{100 * first['gain_over_random']:+.1f} points over random init")
        elif trained:
            last = trained[-1]
            lines.append(f"{task}: not above random init's seed range up to "
                         f"{last['sequences']:,} sequences "
                         f"({100 * last['gain_over_random']:+.1f} points there)")
    return lines


def markdown(args, rows):
    table = common.markdown_table(
        ["task", "budget (x 38,400 seq)", "seeds", "mean %", "min %", "max %", "gain (points)",
         "every seed above every random-init seed"],
        [[r["task"], r["budget"], r["seeds"], 100 * r["mean"], 100 * r["min"], 100 * r["max"],
          None if r["gain_over_random"] is None else 100 * r["gain_over_random"],
          "" if r["budget"] == 0 else ("yes" if r["pays"] else "no")] for r in rows])
    return (f"# Pretraining pays? L{args.num_layers} H{args.hidden_size} A{args.num_heads}, "
            f"demo recipe, budget 0 = random init\n\n{table}\n\n"
            + "\n".join(f"- {line}" for line in verdicts(args, rows)))


def plot(args, rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.tasks), figsize=(5 * len(args.tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], args.tasks, strict=True):
        points = [r for r in rows if r["task"] == task]
        base = [r for r in points if r["budget"] == 0]
        trained = [r for r in points if r["budget"] > 0]
        if base:
            ax.axhspan(100 * base[0]["min"], 100 * base[0]["max"], color="gray", alpha=0.3,
                       label="random init (seed range)")
        if trained:
            xs = [r["sequences"] for r in trained]
            ax.errorbar(xs, [100 * r["mean"] for r in trained],
                        yerr=[[100 * (r["mean"] - r["min"]) for r in trained],
                              [100 * (r["max"] - r["mean"]) for r in trained]],
                        marker="o", capsize=3, label="pretrained (mean, seed range)")
            ax.set_xscale("log")
        ax.set(title=task, xlabel="pretraining sequences", ylabel="dev accuracy %")
        if points:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(args, runs, spread=None):
    rows = summarise(args, runs)
    record = {"machine": common.machine_info(), "embedding_spread": spread,
              "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "runs": [{"task": t, "budget": b, "accuracies": a} for (t, b), a in runs.items()],
              "rows": rows}
    text = markdown(args, rows)
    if spread:
        text += "\n\nWord-piece embeddings of the last checkpoint, by occurrences in the "\
                "pretraining inputs:\n\n" + common.markdown_table(
                    ["occurrences", "pieces", "mean norm", "mean pairwise cosine"],
                    [[band, v["pieces"], v["mean_norm"], v["mean_pairwise_cosine"]]
                     for band, v in spread.items()])
    paths = common.write_results(f"pays_{args.name}", record, text)
    plot(args, rows, common.RESULTS_DIR / f"pays_{args.name}.png")
    return paths


def main():
    args = parse_args()
    if not EWT.exists():
        common.fail(f"{EWT} not found (the shared data belongs beside the repository)")
    started = time.time()
    data, config_file = prepare(args)
    with open(args.work_dir / "pretraining.log", "a") as log:
        pretraining = start_pretraining(args, data, config_file, log)
        try:
            runs = finetune_all(args, data, config_file, pretraining)
        except BaseException:
            if pretraining:
                pretraining.terminate()  # it saves a checkpoint; a rerun resumes
            raise
        finally:
            if pretraining:
                pretraining.wait()
    last = checkpoint(args, args.budgets[-1])
    paths = write(args, runs, embedding_spread(str(last), data["records"]["train"]))
    print(paths[1].read_text())
    print(f"{time.time() - started:.0f} s; results: " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
