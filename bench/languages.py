"""Does splitting Japanese and Korean into real words pay? Entity F1 by tokenizer (issue 34).

For each language, the same small architecture (the demo's L2 H128, bert_tf/tools/demo.py) is
pretrained with the demo's recipe (--recipe) on the same text with each tokenizer, then
fine-tuned on NER by cross-validation:
  - today:  Google's split (CJK ideographs one per word, kana/Hangul runs between spaces), cased,
            WordPiece, whole-word masking by `##`;
  - mecab:  MeCab words (ja: fugashi + unidic-lite; ko: python-mecab-ko) then WordPiece,
            whole-word masking by those words;
  - sentencepiece: a unigram SentencePiece model, masking pieces (not whole "words": in
            Japanese those are whole sentences);
  - random: no pretraining (the mecab vocab), the baseline every pretrained row must beat.
Japanese: ../shared/data/corpora/ja prose; NER on the 500 hironsancorpus sentences.
Korean: ../shared/data/corpora/ko prose plus the running text of the KLUE-NER sentences outside
every evaluated test fold (so no test sentence is ever pretrained on); NER on the 4,000 shared
KLUE-NER sentences.

Folds: the sentences in a fixed random order (seed 0) cut into --num_folds folds; for fold k the
test fold is k, dev (best epoch) is fold k+1, training is the rest. Scores are exact span+type
entity micro-F1 over the input's own units, computed here from each run's predictions.tsv
(bert_tf/data/ner.py); the majority baseline (every unit O) scores 0.

Writes bench/results/languages_NAME.{json,md} and asserts nothing; everything else lives in
--work_dir (default ~/.cache/bert_tf/languages/NAME), and a rerun skips finished steps.

    .venv/bin/python bench/languages.py --name=budget --folds=3 --seeds=2 --tokenizers=mecab
    .venv/bin/python bench/languages.py --name=full  # 10 folds x 3 seeds, budget recipe, 5m
    .venv/bin/python bench/languages.py --name=classic --recipe=classic  # 2,000 updates
"""

import argparse
import concurrent.futures
import itertools
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import common
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bert_tf.data import ner  # noqa: E402
from bert_tf.tools import demo  # noqa: E402  the demo's model, recipe and step runner

SHARED = REPO.parent / "shared" / "data"
LANGUAGES = {
    "ja": {"prose": SHARED / "corpora" / "ja" / "debian-reference.ja.txt",
           "ner": SHARED / "ja" / "hironsan-ner-iob2.txt", "splitter": "mecab"},
    "ko": {"prose": SHARED / "corpora" / "ko" / "installation-guide.ko.txt",
           "ner": SHARED / "ko" / "klue-ner-v1.1_dev_first4000.tsv", "splitter": "mecab-ko"},
}
# build_vocab flags per tokenizer (the splitter is the language's); the spec written beside the
# vocab carries them to create_pretraining_data and run_finetuning. All are cased (both scripts
# get --nodo_lower_case too): lower-casing has nothing to fold in kana, kanji or Hangul.
VOCAB_FLAGS = {
    "today": lambda splitter: ["--tokenizer=bert", "--nodo_lower_case", "--max_unique_chars=6000"],
    "mecab": lambda splitter: [f"--tokenizer={splitter}", "--max_unique_chars=6000"],
    "sentencepiece": lambda splitter: ["--tokenizer=sentencepiece"],
}
# Whole-word masking by the splitter's words for today's split (Google's `##` rule) and MeCab;
# none for SentencePiece: its words are the text between spaces, so in Japanese a whole sentence
# is one "word", longer than the masked positions of a sequence, and whole sequences went
# unmasked.
WHOLE_WORD_MASKING = {"today": ["--do_whole_word_mask"], "mecab": ["--do_whole_word_mask"],
                      "sentencepiece": []}
INITS = ("today", "mecab", "sentencepiece", "random")
VOCAB_SIZE = 8000  # the demo's
# Fine-tuning: the peak learning rate bench/pretraining_pays.py (since retired) found for
# tagging with this model (3e-4; bench/README.md, "Pretraining pays?"), more passes over the 400 Japanese sentences
# than over the 3,200 Korean ones (about 250 updates each).
FINETUNING_FLAGS = ("--task_name=ner", "--train_batch_size=16",
                    "--do_train", "--do_eval", "--do_predict",
                    "--ner_lenient_tags", "--nodo_lower_case", "--log_every_n_steps=100")
EPOCHS = {"ja": 10, "ko": 1.25}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="full")
    parser.add_argument("--languages", default="ja,ko")
    parser.add_argument("--num_folds", type=int, default=10)
    parser.add_argument("--folds", type=int, default=10, help="evaluate the first FOLDS folds")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--recipe", default="budget", choices=tuple(demo.RECIPES),
                        help="the demo's pretraining recipe (launch/recipes/demo_*.flags); "
                             "use one --name per recipe: their records differ")
    parser.add_argument("--max_train_time", default="5m",
                        help="--recipe=budget: the pretraining budget (the demo's)")
    parser.add_argument("--num_train_steps", type=int, default=0,
                        help="pretraining updates of 64 sequences (0: the recipe's; budget: "
                             "a cap)")
    parser.add_argument("--max_seq_length", type=int, default=128,
                        help="pretraining and fine-tuning sequence length (word pieces)")
    parser.add_argument("--tokenizers", default="mecab,today,sentencepiece",
                        help="pretrain these (random init comes with mecab)")
    parser.add_argument("--finetuning_learning_rate", type=float, default=3e-4,
                        help="NER peak learning rate (3e-4: see FINETUNING_FLAGS)")
    parser.add_argument("--finetuning_epochs", type=float, default=0,
                        help="NER epochs for every language (default: EPOCHS, about 250 updates)")
    common.add_init_args(parser)
    parser.add_argument("--parallel_finetuning", type=int, default=1)
    parser.add_argument("--work_dir", default="")
    args = parser.parse_args()
    args.languages = [lang for lang in args.languages.split(",") if lang]
    args.tokenizers = [t for t in args.tokenizers.split(",") if t]
    if set(args.tokenizers) - set(VOCAB_FLAGS):
        common.fail(f"--tokenizers: choose from {', '.join(VOCAB_FLAGS)}")
    if not 1 <= args.folds <= args.num_folds or args.num_folds < 3:
        common.fail("--folds must be in 1..--num_folds, and --num_folds >= 3")
    args.work_dir = Path(args.work_dir or Path.home() / ".cache" / "bert_tf" / "languages"
                         / args.name)
    return args


def folds(sentences, num_folds):
    """Sentence indexes of each fold: a fixed random order (seed 0) cut into num_folds."""
    order = np.random.default_rng(0).permutation(len(sentences))
    return [sorted(part.tolist()) for part in np.array_split(order, num_folds)]


def write_fold_dirs(sentences, parts, args, root: Path):
    """root/foldK/{train,dev,test}.EXT in the input's own format, for the evaluated folds."""
    suffix = ".tsv" if sentences[0].lines[0].startswith("## ") else ".txt"
    for k in range(args.folds):
        dev_fold = (k + 1) % args.num_folds
        split = {"test": parts[k], "dev": parts[dev_fold],
                 "train": [i for j, part in enumerate(parts) if j not in (k, dev_fold)
                           for i in part]}
        directory = root / f"fold{k}"
        directory.mkdir(parents=True, exist_ok=True)
        for name, indexes in split.items():
            ner.write_sentences([sentences[i] for i in indexes], str(directory / f"{name}{suffix}"))


def pretraining_text(lang, sentences, parts, args, work: Path) -> Path:
    """format_text output of the prose (Korean: plus the NER sentences outside every evaluated
    test fold, ten to a document)."""
    out = work / "corpus"
    if out.exists():
        return out
    inputs = [str(LANGUAGES[lang]["prose"])]
    if lang == "ko":
        tested = {i for part in parts[:args.folds] for i in part}
        kept = [s.text for i, s in enumerate(sentences) if i not in tested]
        extra = work / "klue-unlabelled.txt"
        extra.write_text("\n\n".join("\n".join(kept[i:i + 10]) for i in range(0, len(kept), 10))
                         + "\n", encoding="utf-8")
        inputs.append(str(extra))
    demo.run_step(f"{lang} text", [sys.executable, "-m", "bert_tf", "format_text",
                                   f"--input_files={','.join(inputs)}",
                                   f"--output_dir={out}", "--num_shards=10"])
    return out


def prepare(lang, tokenizer, corpus: Path, args, work: Path) -> dict:
    """Vocab (+ spec), TFRecords (9 shards train, 1 eval) and bert_config.json of one
    tokenizer; returns their paths."""
    out = work / tokenizer
    out.mkdir(parents=True, exist_ok=True)
    vocab = out / "vocab.txt"
    shards = sorted(str(p) for p in corpus.glob("part-*.txt"))
    if not vocab.exists():
        demo.run_step(f"{lang} {tokenizer} vocab", [
            sys.executable, "-m", "bert_tf", "build_vocab",
            f"--input_files={','.join(shards[:-1])}", f"--vocab_file={vocab}",
            f"--vocab_size={VOCAB_SIZE}", *VOCAB_FLAGS[tokenizer](LANGUAGES[lang]["splitter"])],
            log_file=out / "vocab.log")
    records = {}
    # eval dupe 2: Korean's last shard holds 50 packed sequences of 128 at 1, fewer than the
    # 2 ranks x --eval_batch_size=32 that run_pretraining needs
    for split, files, dupe in (("train", shards[:-1], 2), ("eval", shards[-1:], 2)):
        records[split] = str(out / "data" / f"{split}-*.tfrecord")
        if not list((out / "data").glob(f"{split}-*.tfrecord")):
            demo.run_step(f"{lang} {tokenizer} {split} records", [
                sys.executable, "create_pretraining_data.py", f"--input_file={','.join(files)}",
                f"--output_file={out / 'data' / (split + '-{shard:05d}.tfrecord')}",
                f"--vocab_file={vocab}", *demo.data_flags(recipe(args, tokenizer)),
                "--nodo_lower_case", *data_masking_flags(args, tokenizer),
                f"--dupe_factor={dupe}",
                "--random_seed=12345", "--noprogress"], log_file=out / f"{split}-records.log")
    return {"dir": out, "vocab": str(vocab), "records": records,
            "config": demo.write_model_config(str(out), str(vocab))}


def recipe(args, tokenizer) -> dict:
    """The demo's --recipe for --num_train_steps at --max_seq_length, its masked positions per
    piece in proportion; whole words masked as WHOLE_WORD_MASKING says (--dynamic_masking:
    by run_pretraining.py, else in the records)."""
    flags_of = demo.recipe_flags(args.recipe, args.num_train_steps)
    per_piece = int(flags_of["max_predictions_per_seq"]) / int(flags_of["max_seq_length"])
    flags_of.update(max_seq_length=str(args.max_seq_length),
                    max_predictions_per_seq=str(max(1, round(per_piece * args.max_seq_length))))
    if flags_of["dynamic_masking"] == "true" and WHOLE_WORD_MASKING[tokenizer]:
        flags_of["do_whole_word_mask"] = "true"
    return flags_of


def data_masking_flags(args, tokenizer) -> list:
    """create_pretraining_data's whole-word flag: only for records masked when written."""
    dynamic = recipe(args, tokenizer)["dynamic_masking"] == "true"
    return [] if dynamic else WHOLE_WORD_MASKING[tokenizer]


def pretrain(lang, tokenizer, model: dict, args) -> str:
    """The demo's --recipe (2 Horovod ranks; budget: for --max_train_time); the directory of
    its checkpoint."""
    model_dir = model["dir"] / "model"
    if not (model_dir / "train_summary.json").exists():
        shutil.rmtree(model_dir, ignore_errors=True)  # a stopped run's: start again
        flags_of = recipe(args, tokenizer)
        flagfile = demo.write_recipe(
            str(model["dir"]), model["config"], model["vocab"], model["records"],
            str(model_dir), flags_of, save_every=int(flags_of["num_train_steps"]),
            precision=demo.pretraining_precision("auto", demo.cpu_flags()),
            max_train_time=args.max_train_time if args.recipe == "budget" else "")
        demo.run_step(f"{lang} {tokenizer} pretraining", demo.pretraining_command(flagfile),
                      log_file=model["dir"] / "pretraining.log", env=demo.PRETRAINING_THREADS)
    return str(model_dir)


def finetune(lang, init, fold, seed, model, checkpoint, args) -> dict:
    """One run_finetuning.py process (1 thread) on one fold; the test fold's entity F1 from its
    predictions.tsv and the boundaries inside pieces from its log."""
    work = args.work_dir / lang
    if checkpoint:
        init += common.init_suffix(args)
    out = work / "runs" / f"{init}-fold{fold}-s{seed}"
    result = out / "test_scores.json"
    if not result.exists():
        cmd = [sys.executable, "run_finetuning.py", *FINETUNING_FLAGS,
               f"--max_seq_length={args.max_seq_length}",
               f"--num_train_epochs={args.finetuning_epochs or EPOCHS[lang]}",
               f"--learning_rate={args.finetuning_learning_rate}",
               f"--data_dir={work / 'folds' / f'fold{fold}'}",
               f"--bert_config_file={model['config']}", f"--vocab_file={model['vocab']}",
               *common.init_flags(args, checkpoint), f"--output_dir={out}", f"--seed={seed}"]
        proc = subprocess.run(cmd, cwd=REPO, env=common.set_thread_env(1), capture_output=True,
                              text=True)
        if proc.returncode:
            raise RuntimeError(f"{lang} {init} fold {fold} seed {seed}:\n{proc.stderr[-3000:]}")
        scores = score_predictions(out / "predictions.tsv")
        cut = [line for line in (proc.stdout + proc.stderr).splitlines()
               if "test: " in line and "boundary inside" in line]
        scores["boundary_inside_log"] = cut[-1].split("test: ", 1)[1] if cut else ""
        result.write_text(json.dumps(scores))
    return json.loads(result.read_text())


def score_predictions(path: Path) -> dict:
    """Entity F1 of a predictions.tsv (unit, gold, predicted; blank line between sentences)."""
    gold, predicted = [], []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        rows = [line.split("\t") for line in block.split("\n") if line]
        if rows:
            gold.append([row[-2] for row in rows])
            predicted.append([row[-1] for row in rows])
    return ner.entity_f1(gold, predicted)


def summarise(results: dict) -> list[dict]:
    """Per (language, init): mean and sd of F1 over folds x seeds, and the paired difference
    (same fold and seed) against today's split and against random init."""
    rows = []
    for (lang, init), runs in sorted(results.items()):
        f1 = [runs[key]["f1"] for key in sorted(runs)]
        row = {"language": lang, "init": init, "runs": len(f1),
               "mean": statistics.mean(f1), "sd": statistics.stdev(f1) if len(f1) > 1 else None}
        for other in ("today", "random"):
            base = results.get((lang, other), {})
            pairs = [runs[k]["f1"] - base[k]["f1"] for k in sorted(runs) if k in base]
            if other != init and pairs:
                row[f"vs_{other}"] = statistics.mean(pairs)
                row[f"vs_{other}_sd"] = statistics.stdev(pairs) if len(pairs) > 1 else None
                row[f"vs_{other}_wins"] = f"{sum(p > 0 for p in pairs)}/{len(pairs)}"
        rows.append(row)
    return rows


def boundary_counts(args) -> list[dict]:
    """Per language and tokenizer (its vocab), over every NER sentence: gold entities with a
    boundary inside a piece (no tagging can get them exactly right), and pieces per character."""
    from bert_tf.data.tokenization import load_tokenizer

    rows = []
    for lang in args.languages:
        sentences = ner.read_ner_file(str(LANGUAGES[lang]["ner"]), lenient=True)
        for tokenizer in args.tokenizers:
            vocab = args.work_dir / lang / tokenizer / "vocab.txt"
            if not vocab.exists():
                continue
            tokenize = load_tokenizer(str(vocab), do_lower_case=False).tokenize_with_offsets
            pieces = [tokenize(s.text) for s in sentences]
            cut = sum(ner.align(s, p).boundaries_inside for s, p in zip(sentences, pieces,
                                                                        strict=True))
            rows.append({"language": lang, "tokenizer": tokenizer,
                         "entities": sum(len(ner.entities(s.tags)) for s in sentences),
                         "boundary_inside_piece": cut,
                         "pieces_per_char": sum(map(len, pieces))
                         / sum(len(s.text) for s in sentences)})
    return rows


def markdown(args, rows, results, cuts=()) -> str:
    def pct(value):
        return None if value is None else 100 * value

    table = common.markdown_table(
        ["language", "init", "runs", "entity F1 % mean", "sd", "- today (paired)", "sd",
         "wins", "- random (paired)", "sd", "wins"],
        [[r["language"], r["init"], r["runs"], pct(r["mean"]), pct(r["sd"]),
          pct(r.get("vs_today")), pct(r.get("vs_today_sd")), r.get("vs_today_wins"),
          pct(r.get("vs_random")), pct(r.get("vs_random_sd")), r.get("vs_random_wins")]
         for r in rows])
    text = (f"# NER entity F1 by tokenizer: {args.folds} of {args.num_folds} folds x "
            f"{args.seeds} seed(s), the demo's {args.recipe} recipe ("
            + (f"{args.max_train_time} of updates" if args.recipe == "budget" else
               f"{recipe(args, 'mecab')['num_train_steps']} updates") + ") of 64 sequences of "
            f"{args.max_seq_length} pieces, L2 H128 (the demo's model); majority baseline (all O) "
            f"F1 = 0\n\nCommand: `{' '.join(['.venv/bin/python', *sys.argv])}`\n\n{table}\n")
    if cuts:
        text += "\nEvery NER sentence through each tokenizer:\n\n" + common.markdown_table(
            ["language", "tokenizer", "gold entities", "with a boundary inside a piece", "%",
             "pieces per character"],
            [[c["language"], c["tokenizer"], c["entities"], c["boundary_inside_piece"],
              100 * c["boundary_inside_piece"] / c["entities"], c["pieces_per_char"]]
             for c in cuts]) + "\n"
    return text


def pretrain_language(lang, args) -> dict:
    """The fold directories, text and every tokenizer's model of one language, pretrained in
    turn; {init: (model, checkpoint)}, random init with the mecab model and no checkpoint."""
    work = args.work_dir / lang
    work.mkdir(parents=True, exist_ok=True)
    sentences = ner.read_ner_file(str(LANGUAGES[lang]["ner"]), lenient=True)
    parts = folds(sentences, args.num_folds)
    write_fold_dirs(sentences, parts, args, work / "folds")
    corpus = pretraining_text(lang, sentences, parts, args, work)
    inits = {}
    for tokenizer in args.tokenizers:
        model = prepare(lang, tokenizer, corpus, args, work)
        inits[tokenizer] = (model, pretrain(lang, tokenizer, model, args))
        if tokenizer == "mecab":
            inits["random"] = (model, "")
    return inits


def main():
    args = parse_args()
    results = {}
    # Every pretraining first: a fine-tuning run beside one would take a time budget's CPU.
    inits = {lang: pretrain_language(lang, args) for lang in args.languages}
    runs = list(itertools.product(range(args.folds), range(1, args.seeds + 1)))
    with concurrent.futures.ThreadPoolExecutor(args.parallel_finetuning) as pool:
        jobs = {(lang, init, *run): pool.submit(finetune, lang, init, *run, model, checkpoint,
                                                args)
                for lang, models in inits.items()
                for init, (model, checkpoint) in models.items() for run in runs}
        for (lang, init, fold, seed), future in jobs.items():
            results.setdefault((lang, init), {})[f"{fold}-{seed}"] = future.result()
            rows = summarise(results)
            record = {"machine": common.machine_info(), "argv": sys.argv,
                      "runs": {f"{lang}/{init}": runs for (lang, init), runs in results.items()},
                      "rows": rows}
            paths = common.write_results(f"languages_{args.name}", record,
                                         markdown(args, rows, results))
        cuts = boundary_counts(args)
        record["boundaries"] = cuts
        paths = common.write_results(f"languages_{args.name}", record,
                                     markdown(args, rows, results, cuts))
    print(paths[1].read_text())


if __name__ == "__main__":
    main()
