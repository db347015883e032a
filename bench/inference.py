"""Inference speed: raw text in, labels out, for BERT-base at sequence length 128 on 2 threads.

    python bench/inference.py [--rounds=3] [--calls_b1=10] [--calls_b32=2]

Rows, each a long-lived process of its own, measured in turn round after round (so a busy
machine slows every row alike), batch 1 and batch 32:

  bert_tf predict   FullTokenizer + the classifier in a tf.function (finetune's predict path)
  savedmodel        `export --format=savedmodel`, serving_default (tokenizes in the graph)
  savedmodel xla    the same exported with --jit_compile (the forward pass compiled by XLA)
  onnxruntime       `export --format=onnx` + FullTokenizer, 2 intra-op threads
  hf pipeline       transformers.pipeline("text-classification") on PyTorch (peer venv,
                    bench/setup_peers.sh hf; bench/peers/hf_inference.py)

The model is a BERT-base sequence classifier (2 labels) with RANDOM weights (speed does not
depend on them); the inputs are Gutenberg passages of 150 words, so every row is cut to 128
tokens. Prints and writes bench/results/inference.{json,md}: sequences/s (median over rounds,
min-max), latency p50/p99 of single calls pooled over rounds, the worker's CPU milliseconds per
sequence (median over rounds), and each export's wall and CPU seconds and peak resident memory.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402
from create_data import run_measured  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERT_TF_SHARED_DATA", REPO.parent / "shared" / "data"))
VOCAB = SHARED / "vocab" / "bert-base-uncased.txt"
SEQ, THREADS, BATCHES = 128, 2, (1, 32)
HF_PYTHON = Path(os.environ.get("BENCH_VENVS", Path.home() / ".cache/bert_tf/bench-venvs")
                 ) / "hf" / "bin" / "python"
ROWS = ("bert_tf predict", "savedmodel", "savedmodel xla", "onnxruntime", "hf pipeline")
REFERENCE = "hf pipeline"  # the other rows' ratios are to it, round by round


def passages(count=64, words=150) -> list[str]:
    """Consecutive 150-word passages of Emma: over 128 word pieces each."""
    text = (SHARED / "corpora" / "gutenberg" / "austen-emma.txt").read_text().split()
    return [" ".join(text[i * words:(i + 1) * words]) for i in range(1000, 1000 + count)]


# --------------------------------------------------------------------------- the workers


def load_row(row: str, models: Path):
    """A function texts -> labels for one of our rows (run inside its worker process)."""
    common.configure_tf_threads(THREADS)
    import numpy as np
    import tensorflow as tf

    from bert_tf.data.tokenization import FullTokenizer

    tokenizer = FullTokenizer(VOCAB)

    def ids(texts):  # batch tokenization, then [CLS] ... [SEP] rows, as fine-tuning makes them
        flat, splits = tokenizer.tokenize_ids_batch(texts)
        rows = [tokenizer.pack_pair(flat[splits[i]:splits[i + 1]].tolist(), None, SEQ)[0]
                for i in range(len(texts))]
        return {k: np.array([r[k] for r in rows], np.int32) for k in rows[0]}

    if row == "bert_tf predict":
        from bert_tf.tools.export_source import resolve_source

        model = resolve_source(str(models / "checkpoint"), vocab_file=str(VOCAB),
                               labels=["a", "b"]).build_model()
        predict = tf.function(lambda f: tf.argmax(model(f), -1, output_type=tf.int32))
        return lambda texts: predict(ids(texts)).numpy()
    if row.startswith("savedmodel"):
        import tensorflow_text  # noqa: F401

        serve = tf.saved_model.load(str(models / row.replace(" ", "_"))).signatures[
            "serving_default"]
        return lambda texts: serve(text=tf.constant(texts))["label_id"].numpy()
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
    session = onnxruntime.InferenceSession(str(models / "onnx" / "model.onnx"), options,
                                           providers=["CPUExecutionProvider"])

    def run(texts):
        features = ids(texts)
        feed = {"input_word_ids": features["input_ids"], "input_mask": features["input_mask"],
                "input_type_ids": features["segment_ids"]}
        return session.run(["label_ids"], feed)[0]
    return run


def serve_requests(classify, texts) -> None:
    """The worker loop (ours and the HF peer's): warm up each batch size, print `ready`, then
    answer each {"batch_size", "calls"} line on stdin with the calls' latencies and the
    process's CPU seconds in them (all its threads: steadier than latency on a busy machine)."""
    for batch_size in BATCHES:
        for _ in range(2):
            classify(texts[:batch_size])
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        batch = texts[:request["batch_size"]]
        latencies, cpu_start = [], time.process_time()
        for _ in range(request["calls"]):
            start = time.perf_counter()
            classify(batch)
            latencies.append(time.perf_counter() - start)
        common.print_json({"latencies": latencies, "cpu_s": time.process_time() - cpu_start})


# --------------------------------------------------------------------------- the parent


def prepare_models(directory: Path, rows: list[str]) -> dict:
    """A random BERT-base classifier checkpoint and the exports the rows need (savedmodel with
    XLA off/on, onnx), each made with `python -m bert_tf export`; returns each export's wall
    and CPU seconds and peak resident memory."""
    import tensorflow as tf

    from bert_tf.model.checkpoints import save_checkpoint
    from bert_tf.model.config import BertConfig
    from bert_tf.model.modeling import variables_by_name
    from bert_tf.model.tasks import BertForSequenceClassification

    tf.random.set_seed(0)
    config = BertConfig(vocab_size=common.VOCAB_SIZE, **{
        k: v for k, v in common.BERT_BASE.items() if k != "name"})
    model = BertForSequenceClassification(config, num_labels=2)
    save_checkpoint(variables_by_name(model), directory / "checkpoint", step=0)
    config.to_json_file(directory / "checkpoint" / "bert_config.json")
    exports = {}
    for name, extra in (("savedmodel", []), ("savedmodel_xla", ["--jit_compile"]),
                        ("onnx", [])):
        if not any(row.replace(" ", "_").replace("onnxruntime", "onnx") == name for row in rows):
            continue
        fmt = "onnx" if name == "onnx" else "savedmodel"
        wall, cpu, rss, _ = run_measured(
            [sys.executable, "-m", "bert_tf", "export", f"--format={fmt}",
             f"--checkpoint={directory / 'checkpoint'}", f"--vocab_file={VOCAB}",
             f"--max_seq_length={SEQ}", "--labels=a,b", f"--output_dir={directory / name}",
             *extra], env=common.set_thread_env(THREADS))
        exports[name] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss}
    return exports


class Worker:
    """One row's process: started once, asked for timed calls round after round."""

    def __init__(self, row: str, models: Path, texts_file: Path):
        if row == "hf pipeline":
            command = [HF_PYTHON, REPO / "bench" / "peers" / "hf_inference.py", texts_file,
                       str(THREADS), str(SEQ)]
        else:
            command = [sys.executable, __file__, "--worker", row, "--models", models,
                       "--texts", texts_file]
        self.row = row
        self.process = subprocess.Popen([str(c) for c in command], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True,
                                        env=common.set_thread_env(THREADS), cwd=REPO)
        self._expect("ready")

    def _expect(self, what: str) -> str:
        for line in self.process.stdout:
            if line.startswith(what):
                return line
        raise RuntimeError(f"{self.row}: worker exited (exit {self.process.wait()}) before "
                           f"saying {what!r}")

    def measure(self, batch_size: int, calls: int) -> dict:
        """{"latencies": seconds of each call, "cpu_s": the worker's CPU seconds in them}."""
        self.process.stdin.write(json.dumps({"batch_size": batch_size, "calls": calls}) + "\n")
        self.process.stdin.flush()
        return json.loads(self._expect(common.JSON_MARK)[len(common.JSON_MARK):])

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def summarise(batch_size: int, rounds: list[dict]) -> dict:
    """Sequences/s (median, min, max, and each round's), single-call latency percentiles and
    CPU milliseconds per sequence (median, and each round's)."""
    rates = [batch_size * len(r["latencies"]) / sum(r["latencies"]) for r in rounds]
    cpu = [1000 * r["cpu_s"] / (batch_size * len(r["latencies"])) for r in rounds]
    pooled = sorted(x for r in rounds for x in r["latencies"])

    def percentile(q):
        return pooled[min(len(pooled) - 1, round(q * (len(pooled) - 1)))]
    return {"sequences_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
            "p50_ms": 1000 * percentile(0.5), "p99_ms": 1000 * percentile(0.99),
            "cpu_ms_per_sequence": statistics.median(cpu), "calls": len(pooled),
            "round_rates": rates, "round_cpu_ms": cpu}


def against(results: list[dict], reference: str) -> list[list]:
    """Each row against `reference` in the same rounds: the median and range over rounds of
    its sequences/s over the reference's, and of the reference's CPU per sequence over its
    (both > 1 where the row is the faster)."""
    by_key = {(r["row"], r["batch_size"]): r for r in results}
    table = []
    for r in results:
        ref = by_key[reference, r["batch_size"]]
        speed = [a / b for a, b in zip(r["round_rates"], ref["round_rates"], strict=True)]
        cpu = [b / a for a, b in zip(r["round_cpu_ms"], ref["round_cpu_ms"], strict=True)]
        table.append([r["row"], r["batch_size"], statistics.median(speed),
                      f"{min(speed):.2f}-{max(speed):.2f}", statistics.median(cpu),
                      f"{min(cpu):.2f}-{max(cpu):.2f}"])
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls_b1", type=int, default=10)
    parser.add_argument("--calls_b32", type=int, default=2)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--models", help=argparse.SUPPRESS)
    parser.add_argument("--texts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        texts = json.loads(Path(args.texts).read_text())
        serve_requests(load_row(args.worker, Path(args.models)), texts)
        return
    rows = args.rows.split(",")
    if "hf pipeline" in rows and not HF_PYTHON.exists():
        common.fail(f"{HF_PYTHON} missing: run bench/setup_peers.sh hf (or --rows without it)")
    calls = {1: args.calls_b1, 32: args.calls_b32}
    with tempfile.TemporaryDirectory() as tmp:
        models, texts_file = Path(tmp), Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(passages()))
        exports = prepare_models(models, rows)
        workers = [Worker(row, models, texts_file) for row in rows]
        timings = {(row, b): [] for row in rows for b in BATCHES}
        for _ in range(args.rounds):
            for batch_size in BATCHES:
                for worker in workers:
                    timings[worker.row, batch_size].append(
                        worker.measure(batch_size, calls[batch_size]))
        for worker in workers:
            worker.close()
    report(rows, timings, exports, args)


def report(rows, timings, exports, args) -> None:
    results = [{"row": row, "batch_size": b, **summarise(b, timings[row, b])}
               for b in BATCHES for row in rows]
    table = common.markdown_table(
        ["row", "batch", "sequences/s (median)", "min-max", "p50 ms", "p99 ms",
         "CPU ms/sequence", "calls"],
        [[r["row"], r["batch_size"], r["sequences_per_s"], f"{r['min']:.3g}-{r['max']:.3g}",
          r["p50_ms"], r["p99_ms"], r["cpu_ms_per_sequence"], r["calls"]] for r in results])
    if REFERENCE in rows:
        table += "\n\n" + common.markdown_table(
            ["row", "batch", f"speed / {REFERENCE} (median of rounds)", "min-max",
             f"CPU per sequence, {REFERENCE} / row", "min-max"], against(results, REFERENCE))
    table += "\n\n" + common.markdown_table(
        ["export", "wall s", "CPU s", "peak RSS MiB"],
        [[name, e["wall_s"], e["cpu_s"], e["peak_rss_mib"]] for name, e in exports.items()])
    print(table)
    common.write_results("inference", {"machine": common.machine_info(), "args": vars(args),
                                       "results": results, "exports": exports}, table)


if __name__ == "__main__":
    main()
