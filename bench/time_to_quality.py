"""Time to quality (issue 44): the downstream score a recipe reaches in a wall-clock
pretraining budget, side by side with the classic recipe, each budget change alone, Hugging
Face's run_mlm defaults and random initialisation.

The same architecture (the demo's L2 H128, bert_tf/tools/demo.py), corpus (9 Gutenberg books,
the demo's 8,000-piece vocab) and machine for every row. Rows:
  classic            launch/recipes/demo_classic.flags (NSP, 15% static masking, dropout,
                     LAMB 1e-2 with warmup and poly decay over the budget)
  budget             launch/recipes/demo_budget.flags (docs/budget.md)
  classic+<change>   the classic recipe with one of the budget recipe's changes (ABLATIONS),
                     at --ablation_budgets only (default: the smallest budget)
  budget+<change>    the budget recipe with one of CHANGES, e.g. budget+batch16 against
                     budget (these and classic+<change> of changes beyond ABLATIONS: by
                     --rows only)
  hf_run_mlm         bench/peers/hf_run_mlm.py: transformers' run_mlm.py defaults (its venv,
                     bench/setup_peers.sh hf), converted with `convert hf_to_tf`
  random_init        no pretraining
bert_tf rows train with two Horovod ranks as `make demo` does; --max_train_time is the
budget, counted over the updates (start-up and the final checkpoint are not in it).

Round r pretrains every (row, budget) once with seed r, in an order that rotates by one each
round (bench/rounds.py's reason: the machine's speed drifts), then fine-tunes every checkpoint
with --finetuning_seeds seeds on
  books    the demo's task: which of three unseen books a 24-word passage comes from;
  upos200  UPOS tagging trained on 200 sentences of the shared EWT treebank, scored on 500;
  upos_probe  a linear UPOS classifier on the frozen top layer's word vectors (`probe_syntax
           --nodependency_probes`: 1,500 EWT sentences, scored on the other 577): what
           pretraining put in the representations, where fine-tuning from 200 sentences
           lands every row within 1.6 points of random init (docs/budget.md);
and measures held-out masked-LM loss on one set for all rows (the held-out book, 15% static
masking, no NSP), so that a recipe masking 30% is not scored on its own harder task.
Fine-tuning never overlaps a pretraining run (it would eat the budget).

Writes bench/results/ttq_NAME.{json,md} after every run and asserts nothing. Runs are cached
in --work_dir (default ~/.cache/bert_tf/ttq/NAME): a rerun does only what is missing, so
more rounds can be added later with --rounds.

    .venv/bin/python bench/time_to_quality.py --budgets=150,600 --rounds=1
    make time-to-quality   # the same
    # issue 44's "a third of the time" (docs/budget.md):
    .venv/bin/python bench/time_to_quality.py --name=third --budgets=200 --classic_budgets=600 \
        --rows=classic,budget,random_init --tasks=books,upos_probe --rounds=3 --rescale_embeddings
"""

import argparse
import concurrent.futures
import hashlib
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

from bert_tf.tools import demo  # noqa: E402  the demo's corpus, recipes and book task

HF_PEER = Path(__file__).resolve().parent / "peers" / "hf_run_mlm.py"
CAP_STEPS = 100_000  # every bert_tf row stops at its budget, never at this cap
# Named flag changes: a row `classic+<name>` or `budget+<name>` is that recipe with one.
CHANGES = {
    "mlm_only": {"next_sentence_prediction": "false"},
    "mask30": {"masked_lm_prob": "0.3", "max_predictions_per_seq": "38",
               "dynamic_masking": "true"},
    "no_dropout": {"dropout": "false"},
    "triangle": {"learning_rate": "2e-2", "learning_rate_schedule": "triangle",
                 "num_warmup_steps": "0"},
    "batch16": {"train_batch_size": "16"},
    "lr4e-2": {"learning_rate": "4e-2"},
    "seq64": {"max_seq_length": "64", "max_predictions_per_seq": "19"},
}
# The budget recipe's changes, each on the classic recipe alone: the ablation rows
# (docs/budget.md gives each one's source).
ABLATIONS = ("mlm_only", "mask30", "no_dropout", "triangle")
ROWS = ("classic", "budget", *(f"classic+{a}" for a in ABLATIONS), "hf_run_mlm", "random_init")
# Every row --rows may name, in the report's order.
KNOWN_ROWS = (*ROWS, *(f"{base}+{c}" for base in ("classic", "budget") for c in CHANGES
                       if f"{base}+{c}" not in ROWS))
# The held-out set every row is scored on.
EVAL_RECIPE = {"max_seq_length": "128", "max_predictions_per_seq": "20", "masked_lm_prob": "0.15",
               "dynamic_masking": "false", "next_sentence_prediction": "false"}
UPOS_FLAGS = ("--task_name=pos", "--max_seq_length=64", "--train_batch_size=16", "--do_train",
              "--do_eval", "--num_train_epochs=10")
# Fine-tuning flags per task; upos_probe fine-tunes nothing (upos_probe()).
TASKS = {"books": demo.FINETUNING_FLAGS, "upos200": UPOS_FLAGS, "upos_probe": ()}
# UPOS at 3e-4, not bench/finetune.py's 1e-4 (made for MiniLM): at 1e-4 the demo's model
# tagged 2.6 points worse than random init on upos200, at 3e-4 2.2 points better
# (bench/README.md, "Pretraining pays?"; bench/pretraining_pays.py, retired after 3b7f86a).
LEARNING_RATES = {"books": demo.FINETUNING_LEARNING_RATE, "upos200": 3e-4}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="l2h128", help="results stem: ttq_NAME")
    parser.add_argument("--budgets", default="150,300,600,1200",
                        help="pretraining budgets, seconds of updates")
    parser.add_argument("--ablation_budgets", default="",
                        help="budgets of the classic+<change> rows (default: the smallest)")
    parser.add_argument("--classic_budgets", default="",
                        help="budgets of the classic row (default: --budgets), e.g. 600 with "
                             "--budgets=200 asks whether a third of the time reaches it")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--rounds", type=int, default=1, help="pretraining seeds 1..N")
    parser.add_argument("--finetuning_seeds", type=int, default=3)
    common.add_init_args(parser)
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                        help="bert_tf rows' precision (auto: the demo's choice for this CPU)")
    parser.add_argument("--work_dir", default="")
    args = parser.parse_args()
    args.budgets = sorted(int(b) for b in args.budgets.split(","))
    args.ablation_budgets = sorted(int(b) for b in args.ablation_budgets.split(",") if b) \
        or args.budgets[:1]
    args.classic_budgets = sorted(int(b) for b in args.classic_budgets.split(",") if b) \
        or args.budgets
    args.rows = [r for r in args.rows.split(",") if r]
    args.tasks = [t for t in args.tasks.split(",") if t]
    for flag, chosen, known in (("rows", args.rows, KNOWN_ROWS), ("tasks", args.tasks, TASKS)):
        if set(chosen) - set(known):
            common.fail(f"--{flag}: unknown {sorted(set(chosen) - set(known))}; "
                        f"choose from {', '.join(known)}")
    args.work_dir = Path(args.work_dir or Path.home() / ".cache" / "bert_tf" / "ttq" / args.name)
    from bert_tf.tools.doctor_training import cpu_flags

    args.precision = demo.pretraining_precision(args.precision, cpu_flags())
    return args


def row_recipe(row) -> dict:
    """run_pretraining flags of a bert_tf row, its schedule over the time budget."""
    base, _, change = row.partition("+")
    recipe = demo.recipe_flags(base, CAP_STEPS)
    recipe.update(CHANGES.get(change, {}))
    return recipe


def data_key(recipe) -> str:
    """Which TFRecords a recipe trains on: a digest of create_pretraining_data's flags."""
    return hashlib.sha256(" ".join(demo.data_flags(recipe)).encode()).hexdigest()[:10]


def prepare(args):
    """Corpus, vocab, the TFRecords of every recipe, the model config, the held-out set and
    the downstream data (each once); returns {"vocab", "config_file", "records": {key: ...},
    "eval_records", "train_text"}."""
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    books = demo.fetch_corpus(os.path.join(Path.home(), ".cache", "bert_tf", "demo"))
    recipes = [EVAL_RECIPE] + [row_recipe(r) for r in args.rows
                                    if r not in ("hf_run_mlm", "random_init")]
    vocab, records = None, {}
    for recipe in recipes:
        key = data_key(recipe)
        out = work / "data" / key
        if not (out / "ready.json").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            made = demo.prepare_pretraining_data(str(out), books, demo.DemoConfig.dupe_factor,
                                                 recipe, vocab)
            (out / "ready.json").write_text(json.dumps(made))
        made = json.loads((out / "ready.json").read_text())
        vocab = vocab or made["vocab"]
        records[key] = made
    finetune_dir = work / "finetune"
    if not (finetune_dir / "ready").exists():
        shutil.rmtree(finetune_dir, ignore_errors=True)
        demo.write_book_task(books, str(finetune_dir / "books"))
        split_ewt(EWT, finetune_dir / "upos200", 200)
        (finetune_dir / "ready").touch()
    eval_made = records[data_key(EVAL_RECIPE)]
    return {"vocab": vocab, "config_file": demo.write_model_config(str(work), vocab),
            "records": records, "eval_records": eval_made["records"]["eval"],
            "train_text": eval_made["texts"]["train"] + "/part-*.txt"}


def run_dir(args, row, budget, seed) -> Path:
    return args.work_dir / "runs" / f"{row}-{budget}s-seed{seed}"


def pretrain(args, prepared, row, budget, seed) -> dict:
    """One pretraining run (cached); {"checkpoint", "updates", "train_seconds", ...}."""
    out = run_dir(args, row, budget, seed)
    done = out / "pretrained.json"
    if done.exists():
        return json.loads(done.read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    result = (pretrain_hf if row == "hf_run_mlm" else pretrain_bert_tf)(
        args, prepared, row, budget, seed, out)
    result["held_out"] = held_out_eval(prepared, result["checkpoint"], out / "held_out")
    done.write_text(json.dumps(result))
    return result


def pretrain_bert_tf(args, prepared, row, budget, seed, out) -> dict:
    recipe = {**row_recipe(row), "seed": str(seed)}
    records = prepared["records"][data_key(recipe)]["records"]
    flagfile = demo.write_recipe(str(out), prepared["config_file"], prepared["vocab"], records,
                                 str(out / "model"), recipe, save_every=CAP_STEPS,
                                 precision=args.precision, max_train_time=f"{budget}s")
    logged(demo.pretraining_command(flagfile), out / "pretraining.log",
           demo.step_env(**demo.PRETRAINING_THREADS))
    summary = json.loads((out / "model" / "train_summary.json").read_text())
    return {"checkpoint": str(out / "model"), "updates": summary["global_step"],
            "train_seconds": summary["train_seconds"],
            "sequences": summary["global_step"] * summary["sequences_per_update"]}


def pretrain_hf(args, prepared, row, budget, seed, out) -> dict:
    python = common.peer_python("hf")
    if not python.exists():
        raise RuntimeError(f"{python} not found: run bench/setup_peers.sh hf")
    lines = logged([python, HF_PEER, f"--train_files={prepared['train_text']}",
                    f"--vocab_file={prepared['vocab']}",
                    f"--bert_config_file={prepared['config_file']}",
                    f"--max_train_time={budget}", f"--seed={seed}", f"--output_dir={out / 'hf'}"],
                   out / "pretraining.log", common.set_thread_env(2))
    record = json.loads(next(line for line in reversed(lines) if common.JSON_MARK in line)
                        .split(common.JSON_MARK, 1)[1])
    logged([sys.executable, "-m", "bert_tf", "convert", "hf_to_tf", f"--hf_dir={out / 'hf'}",
            f"--output_dir={out / 'model'}"], out / "convert.log", demo.step_env())
    return {"checkpoint": str(out / "model"), **record}


def held_out_eval(prepared, checkpoint, out) -> dict:
    """Masked-LM loss and accuracy on the shared held-out set (run_pretraining.py, eval only)."""
    logged([sys.executable, "run_pretraining.py", f"--bert_config_file={prepared['config_file']}",
            f"--init_checkpoint={checkpoint}", f"--eval_files={prepared['eval_records']}",
            f"--output_dir={out}", "--nodo_train", "--do_eval", "--eval_batch_size=32",
            "--max_eval_steps=1000", *(f"--{k}={v}" for k, v in EVAL_RECIPE.items())],
           out.with_suffix(".log"), demo.step_env(**demo.thread_env(2)))
    results = json.loads((out / "eval_results.json").read_text())
    return {k: results[k] for k in ("masked_lm_loss", "masked_lm_accuracy")}


def logged(cmd, log_path, env) -> list:
    """Runs `cmd` from the repository, its output to `log_path`; its lines. Fails loudly."""
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run([str(c) for c in cmd], cwd=REPO, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    if proc.returncode:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(map(str, cmd))} (see {log_path})")
    return log_path.read_text(errors="replace").splitlines()


def finetune(args, prepared, task, checkpoint, name, seed) -> float:
    """One run_finetuning.py process (1 thread, cached by its flags); its dev accuracy."""
    if task == "upos_probe":
        return upos_probe(args, prepared, checkpoint, name, seed)
    flags_of = [*TASKS[task], f"--learning_rate={LEARNING_RATES[task]}"]
    digest = hashlib.sha256(" ".join(flags_of).encode()).hexdigest()[:6]
    if checkpoint:
        name += common.init_suffix(args)
    out = args.work_dir / "finetune" / "runs" / f"{task}-{digest}-{name}-ft{seed}"
    result = out / "eval_results.json"
    if not result.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        logged([sys.executable, "run_finetuning.py", *flags_of,
                f"--data_dir={args.work_dir / 'finetune' / task}",
                f"--bert_config_file={prepared['config_file']}",
                f"--vocab_file={prepared['vocab']}", *common.init_flags(args, checkpoint),
                f"--output_dir={out}", f"--seed={seed}", "--log_every_n_steps=50"],
               out / "log.txt", common.set_thread_env(1))
    return json.loads(result.read_text())["accuracy"]


def upos_probe(args, prepared, checkpoint, name, seed) -> float:
    """probe_syntax's UPOS accuracy from the top layer (1 thread, cached). The model is
    frozen, so --rescale_embeddings and --reinit_top_layers do not apply, and the probe
    (full-batch Adam from zeros) gives a checkpoint one score whatever `seed`: one run each.
    Random init (`checkpoint` empty) is the probe's own control: the same architecture drawn
    with `seed` (probe_syntax needs some checkpoint to start from; its weights are unused)."""
    out = args.work_dir / "finetune" / "runs" / (f"upos_probe-{name}" if checkpoint
                                                 else f"upos_probe-{name}-seed{seed}")
    result = out / "probes.json"
    if not result.exists():
        model = checkpoint or next(map(str, args.work_dir.glob("runs/*/model")), None)
        if model is None:
            common.fail("--tasks=upos_probe: random init's probe starts from a pretrained "
                        "checkpoint's files (not its weights); add a pretrained row to --rows")
        logged([sys.executable, "-m", "bert_tf", "probe_syntax", f"--init_checkpoint={model}",
                f"--bert_config_file={prepared['config_file']}",
                f"--vocab_file={prepared['vocab']}", f"--train_conllu={EWT}",
                "--nodependency_probes", "--random_init" if not checkpoint else "--norandom_init",
                f"--seed={seed}", f"--output_dir={out}"],
               out.with_suffix(".log"), common.set_thread_env(1))
    accuracy = json.loads(result.read_text())["upos_accuracy"]
    return accuracy["trained" if checkpoint else "random_init"][-1]


def budgets_of(args, row):
    """The budgets a row pretrains for."""
    if row.startswith("classic+"):
        return args.ablation_budgets
    return args.classic_budgets if row == "classic" else args.budgets


def runs_of_round(args, seed):
    """(row, budget) pairs of round `seed`, rotated by one per round."""
    pairs = [(row, budget) for row in args.rows if row != "random_init"
             for budget in budgets_of(args, row)]
    shift = (seed - 1) % len(pairs) if pairs else 0
    return pairs[shift:] + pairs[:shift]


def finetune_round(args, prepared, pretrained, seed):
    """Every task x fine-tuning seed of round `seed`'s checkpoints (`pretrained`: {(row,
    budget): result}) and of random init (round 1), two at a time; {(row, budget): {task:
    [accuracy]}}. The probe scores a checkpoint once (upos_probe()), random init once a seed."""
    jobs = [(key, task, result["checkpoint"], f"{key[0]}-{key[1]}s-seed{result['seed']}", ft)
            for key, result in pretrained.items() for task in args.tasks
            for ft in range(1, 2 if task == "upos_probe" else args.finetuning_seeds + 1)]
    if "random_init" in args.rows and seed == 1:  # no pretraining seed: once
        jobs += [(("random_init", 0), task, "", "random_init", ft) for task in args.tasks
                 for ft in range(1, args.finetuning_seeds + 1)]
    scores = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {pool.submit(finetune, args, prepared, task, ckpt, name, ft): (key, task)
                   for key, task, ckpt, name, ft in jobs}
        for future, (key, task) in futures.items():
            scores.setdefault(key, {}).setdefault(task, []).append(future.result())
    return scores


def spread(values, form=".3f"):
    """'median (min-max)' of `values`."""
    return (f"{statistics.median(values):{form}} ({min(values):{form}}-{max(values):{form}})"
            if values else "-")


def summarise(args, rounds):
    """Rows of the report: per (row, budget) over the rounds done."""
    table = {}
    for record in rounds:
        for key, result in record["pretrained"].items():
            entry = table.setdefault(key, {"updates": [], "loss": [], "tasks": {}})
            entry["updates"].append(result["updates"])
            entry["loss"].append(result["held_out"]["masked_lm_loss"])
        for key, tasks in record["finetuned"].items():
            entry = table.setdefault(key, {"updates": [], "loss": [], "tasks": {}})
            for task, accuracies in tasks.items():
                entry["tasks"].setdefault(task, []).extend(accuracies)
    return table


def paired_gain(rounds, key, reference, task):
    """Per (round, fine-tuning seed): accuracy of `key` minus `reference`'s, the same seeds."""
    gains = []
    for record in rounds:
        mine = record["finetuned"].get(key, {}).get(task)
        theirs = record["finetuned"].get(reference, {}).get(task)
        if mine and theirs:
            gains += [a - b for a, b in zip(mine, theirs, strict=True)]
    return gains


def markdown(args, rounds):
    table = summarise(args, rounds)
    order = sorted(table, key=lambda k: (k[1], KNOWN_ROWS.index(k[0])))
    headers = ["row", "budget (s)", "updates", "held-out MLM loss"]
    headers += [f"{t} accuracy" for t in args.tasks]
    headers += [f"{t} vs classic (paired)" for t in args.tasks]
    lines = []
    for key in order:
        entry = table[key]
        cells = [key[0], key[1] or "-", spread(entry["updates"], ".0f"), spread(entry["loss"])]
        cells += [spread(entry["tasks"][t]) if t in entry["tasks"] else "-" for t in args.tasks]
        for task in args.tasks:
            gains = paired_gain(rounds, key, ("classic", key[1]), task) \
                if key[0] not in ("classic", "random_init") else []
            cells.append(f"{100 * statistics.median(gains):+.1f} ({100 * min(gains):+.1f} to "
                         f"{100 * max(gains):+.1f})" if gains else "-")
        lines.append(cells)
    return (f"# Time to quality, demo model L2 H128, {args.precision}, "
            f"{common.machine_info()['cpu']}\n\n"
            "Median (min-max) over pretraining rounds x fine-tuning seeds; paired: the same "
            "round and fine-tuning seed, in accuracy points.\n\n"
            + common.markdown_table(headers, lines) + "\n\n"
            + "\n".join(f"- {v}" for v in verdicts(args, rounds, table)))


def verdicts(args, rounds, table):
    """Per task: the smallest budget at which the budget recipe's median reaches the classic
    recipe's at its largest budget, and whether it beats hf_run_mlm at every budget."""
    lines = []
    top = args.classic_budgets[-1]
    for task in args.tasks:
        classic = table.get(("classic", top), {}).get("tasks", {}).get(task)
        if not classic:
            continue
        target = statistics.median(classic)
        reached = [b for b in args.budgets
                   if task in table.get(("budget", b), {}).get("tasks", {})
                   and statistics.median(table[("budget", b)]["tasks"][task]) >= target]
        lines.append(f"{task}: the budget recipe reaches classic's {top} s median ({target:.3f}) "
                     + (f"at {reached[0]} s ({top / reached[0]:.1f}x less time)" if reached
                        else "at no budget measured"))
        for budget in (b for b in args.budgets if b < top):
            gains = paired_gain(rounds, ("budget", budget), ("classic", top), task)
            if gains:
                ahead = sum(g >= 0 for g in gains)
                lines.append(f"{task}: budget {budget} s vs classic {top} s, paired: "
                             f"{100 * statistics.median(gains):+.1f} points ({100 * min(gains):+.1f}"
                             f" to {100 * max(gains):+.1f}), level or ahead in {ahead} of "
                             f"{len(gains)}")
        hf = [b for b in args.budgets if task in table.get(("hf_run_mlm", b), {}).get("tasks", {})
              and task in table.get(("budget", b), {}).get("tasks", {})]
        behind = [b for b in hf if statistics.median(table[("budget", b)]["tasks"][task])
                  <= statistics.median(table[("hf_run_mlm", b)]["tasks"][task])]
        if hf:
            lines.append(f"{task}: budget recipe ahead of hf_run_mlm at "
                         f"{len(hf) - len(behind)} of {len(hf)} budgets"
                         + (f" (not at {behind} s)" if behind else ""))
    return lines


def write(args, rounds):
    record = {"machine": common.machine_info(),
              "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "rounds": [{"seed": r["seed"],
                          "pretrained": [{"row": k[0], "budget": k[1], **v}
                                         for k, v in r["pretrained"].items()],
                          "finetuned": [{"row": k[0], "budget": k[1], "accuracies": v}
                                        for k, v in r["finetuned"].items()]} for r in rounds]}
    return common.write_results(f"ttq_{args.name}", record, markdown(args, rounds))


def main():
    args = parse_args()
    if not EWT.exists():
        common.fail(f"{EWT} not found (the shared data belongs beside the repository)")
    started = time.time()
    prepared = prepare(args)
    rounds = []
    for seed in range(1, args.rounds + 1):
        pretrained = {}
        for row, budget in runs_of_round(args, seed):
            print(f"[ttq] round {seed}: {row} for {budget} s", file=sys.stderr, flush=True)
            pretrained[(row, budget)] = {**pretrain(args, prepared, row, budget, seed),
                                         "seed": seed}
        rounds.append({"seed": seed, "pretrained": pretrained, "finetuned": {}})
        rounds[-1]["finetuned"] = finetune_round(args, prepared, pretrained, seed)
        paths = write(args, rounds)
    print(paths[1].read_text())
    print(f"{time.time() - started:.0f} s; results: " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
