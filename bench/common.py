"""Shared benchmark helpers: step timing, a measured matmul peak, BERT pretraining
FLOPs, model FLOPs utilisation, peak RSS and the results writer.

Nothing here imports TensorFlow or PyTorch at module level, so the peer scripts
(which run in their own venvs) use the same timing and FLOPs code as ours.
"""

import argparse
import itertools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# The two configurations every training benchmark measures (issue 8).
BERT_BASE = dict(name="base", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                 intermediate_size=3072)
BERT_SMALL = dict(name="small", num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                  intermediate_size=1024)
BERT_LARGE = dict(name="large", num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                  intermediate_size=4096)
# For smoke runs (gpu_check.sh's CPU fallback), not for figures.
BERT_TINY = dict(name="tiny", num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                 intermediate_size=128)
SHAPES = {c["name"]: c for c in (BERT_BASE, BERT_SMALL, BERT_LARGE, BERT_TINY)}
VOCAB_SIZE = 30522
JSON_MARK = "BENCH_JSON "


def time_step(step, *, warmup=2, repeats=5, steps_per_repeat=1):
    """Times `step()` (which must block until its result exists) after `warmup`
    untimed calls; returns the median and spread of seconds per step over
    `repeats` timed groups of `steps_per_repeat` calls, and the median CPU seconds (all
    threads) per step, which a busy machine inflates much less than wall time."""
    for _ in range(warmup):
        step()
    per_step, cpu_per_step = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(steps_per_repeat):
            step()
        per_step.append((time.perf_counter() - start) / steps_per_repeat)
        cpu_per_step.append((time.process_time() - cpu_start) / steps_per_repeat)
    return {
        "step_s": statistics.median(per_step),
        "cpu_s": statistics.median(cpu_per_step),
        "step_s_min": min(per_step),
        "step_s_max": max(per_step),
        "repeats": repeats,
        "steps_per_repeat": steps_per_repeat,
        "warmup": warmup,
    }


def serve_rounds(step, args, record, reporter=True):
    """Child side of bench/rounds.py's interleaved rounds: warms `step` up, then times
    `args.repeats` groups each time the parent asks, until it says stop.

    Without `args.rounds_dir` (a run by hand) it times once and prints the record instead.
    The parent talks through files in `args.rounds_dir`, so that horovodrun ranks, which get
    no stdin, take part alike: it writes `go-N` for round N (or `stop`); every rank times the
    round (their allreduces keep them in step) and the reporter writes `result-N.json`.

    Args:
      step: the timed call; it must block until its result exists.
      args: add_step_args' namespace plus rounds_dir.
      record: function from a time_step timing to the JSON record to report.
      reporter: whether this process writes the records (rank 0).
    """
    timing_args = dict(repeats=args.repeats, steps_per_repeat=args.steps_per_repeat)
    if not getattr(args, "rounds_dir", None):
        print_json(record(time_step(step, warmup=args.warmup, **timing_args)))
        return
    directory = Path(args.rounds_dir)
    for _ in range(args.warmup):
        step()
    if reporter:
        _write_json(directory / "ready.json", {"peak_rss_mib": peak_rss_mib()})
    for round_index in itertools.count():
        go = directory / f"go-{round_index}"
        while not go.exists():
            if (directory / "stop").exists():
                return
            time.sleep(0.02)
        result = record(time_step(step, warmup=0, **timing_args))
        if reporter:
            _write_json(directory / f"result-{round_index}.json", result)


def report_skip(args, record):
    """A child's row that will not run: printed, or told to bench/rounds.py's parent."""
    if getattr(args, "rounds_dir", None):
        _write_json(Path(args.rounds_dir) / "ready.json", record)
    else:
        print_json(record)


def _write_json(path, payload):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def synthetic_batch(batch_size, seq_length, masked_positions, vocab_size=VOCAB_SIZE, seed=0):
    """One fixed pretraining batch as numpy arrays under Google's feature names,
    the same for every framework: full-length pairs (segment A then B),
    `masked_positions` distinct sorted positions per sequence, random labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (batch_size, seq_length)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq_length), masked_positions,
                                             replace=False) for _ in range(batch_size)]), axis=1)
    return {
        "input_ids": rng.integers(1000, vocab_size, shape, dtype=np.int32),
        "input_mask": np.ones(shape, np.int32),
        "segment_ids": (np.arange(seq_length) >= seq_length // 2).astype(np.int32)
        * np.ones(shape, np.int32),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": rng.integers(1000, vocab_size, positions.shape, dtype=np.int32),
        "masked_lm_weights": np.ones(positions.shape, np.float32),
        "next_sentence_labels": rng.integers(0, 2, batch_size, dtype=np.int32),
    }


def train_flops_per_sequence(shape, seq_length, masked_positions):
    """FLOPs of one training step per sequence for a named shape, by the formula
    bert_tf.tools.estimate and the doctor use (MLM head on the masked positions only).
    Parents call this in the project's venv and pass the figure to every child,
    peers included, so all rows are credited the same FLOPs."""
    from bert_tf.model.config import BertConfig
    from bert_tf.tools.estimate import training_flops_per_sequence

    config = BertConfig(vocab_size=VOCAB_SIZE,
                        **{k: v for k, v in SHAPES[shape].items() if k != "name"})
    return training_flops_per_sequence(config, seq_length, masked_positions)


def mfu(flops_per_sequence, sequences_per_s, peak_flops_per_s):
    """Model FLOPs utilisation: useful model FLOPs achieved over the measured peak."""
    return flops_per_sequence * sequences_per_s / peak_flops_per_s


def peak_rss_mib():
    """Peak resident set size of this process so far, in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peer_python(venv):
    """The interpreter of a benchmark peer venv (bench/setup_peers.sh makes them under
    $BENCH_VENVS, default ~/.cache/bert_tf/bench-venvs)."""
    venvs = Path(os.environ.get("BENCH_VENVS", Path.home() / ".cache" / "bert_tf" / "bench-venvs"))
    return venvs / venv / "bin" / "python"


def set_thread_env(num_threads, env=None):
    """Environment for a child process limited to `num_threads` compute threads
    (OpenMP/oneDNN, MKL, TensorFlow and PyTorch all read one of these)."""
    env = dict(os.environ if env is None else env)
    n = str(num_threads)
    env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, TF_NUM_INTRAOP_THREADS=n,
               TF_NUM_INTEROP_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
    return env


def configure_tf_threads(num_threads):
    """Pins TensorFlow's thread pools; must run before TensorFlow executes anything."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(num_threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def measure_matmul_peak(dtype_name, size=4096, repeats=3, steps_per_repeat=1):
    """Measured matmul FLOP/s of TensorFlow on this machine for one dtype: the
    fastest of `repeats` size x size x size matmuls after a warm-up (a peak is
    the best the machine does; use several steps_per_repeat on a GPU, where one
    matmul takes milliseconds)."""
    import tensorflow as tf

    dtype = tf.as_dtype(dtype_name)
    a = tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y)[0, :8], tf.float32)))
    timing = time_step(lambda: matmul(a, b).numpy(), warmup=1, repeats=repeats,
                       steps_per_repeat=steps_per_repeat)
    return 2 * size**3 / timing["step_s_min"]


def machine_info():
    """What the numbers were measured on, including the load at that moment
    (the machine may be shared)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def add_convergence_args(parser):
    """The arguments every convergence peer (bench/peers/*_convergence.py) takes from
    bench/convergence.py: records, batch, schedule, update rule, evaluation."""
    parser.add_argument("--train_npz", required=True)
    parser.add_argument("--eval_npz", required=True)
    parser.add_argument("--batch_size", type=int, required=True)
    parser.add_argument("--num_train_steps", type=int, required=True)
    parser.add_argument("--num_warmup_steps", type=int, required=True)
    parser.add_argument("--learning_rate", type=float, required=True)
    parser.add_argument("--optimizer_type", choices=("adamw", "lamb"), required=True)
    parser.add_argument("--weight_decay_rate", type=float, default=0.01)
    parser.add_argument("--exclude_from_layer_adaptation", default="LayerNorm,layer_norm,bias",
                        help="comma-separated regexes (lamb); empty: every variable")
    parser.add_argument("--eval_every", type=int, required=True)
    parser.add_argument("--eval_batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--curve_file", default="",
                        help="also rewrite the curve here after every evaluation")
    return parser


def add_init_args(parser):
    """run_finetuning's options for loading a pretrained checkpoint, for the benches that
    fine-tune one (docs/budget.md, "Fine-tuning a budget checkpoint")."""
    parser.add_argument("--rescale_embeddings", action="store_true",
                        help="pretrained inits: run_finetuning --rescale_embeddings")
    parser.add_argument("--reinit_top_layers", type=int, default=0,
                        help="pretrained inits: run_finetuning --reinit_top_layers")


def init_flags(args, checkpoint) -> list:
    """run_finetuning's flags for `checkpoint` ('' for random init, which takes none)."""
    if not checkpoint:
        return ["--init_checkpoint="]
    return [f"--init_checkpoint={checkpoint}", f"--reinit_top_layers={args.reinit_top_layers}",
            f"--{'' if args.rescale_embeddings else 'no'}rescale_embeddings"]


def init_suffix(args) -> str:
    """What add_init_args changed, for a pretrained run's directory name ('' for nothing)."""
    return ("-rescaled" * args.rescale_embeddings
            + (f"-reinit{args.reinit_top_layers}" if args.reinit_top_layers else ""))


def add_step_args(parser):
    """The command-line arguments every training-step benchmark child takes."""
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--batch_size", type=int, default=8, help="sequences per step per rank")
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--masked_positions", type=int, default=20)
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16", "amp"], default="fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps_per_repeat", type=int, default=1)
    parser.add_argument("--max_step_s", type=float, default=600.0,
                        help="skip the row if a step is estimated to take longer than this")
    parser.add_argument("--train_flops_per_sequence", type=float, default=None,
                        help="model FLOPs of one step per sequence (the parent passes it)")
    # Set by bench/rounds.py on the row processes it keeps alive between rounds.
    parser.add_argument("--rounds_dir", default=None, help=argparse.SUPPRESS)
    return parser


def skip_reason(args, matmul_flops_per_s):
    """Why a row would take too long to measure, from its FLOPs and the
    framework's own matmul rate for its dtype on this CPU; None if it fits."""
    estimate = args.batch_size * args.train_flops_per_sequence / matmul_flops_per_s
    if estimate <= args.max_step_s:
        return None
    return (f"skipped: this framework's {args.precision} matmul runs at "
            f"{matmul_flops_per_s / 1e9:.2f} GFLOP/s here, so one step would take ~{estimate:.0f}s "
            f"(over --max_step_s={args.max_step_s:.0f})")


def step_record(args, timing, **extra):
    """The result record of a training-step child: timing, throughput, FLOPs, RSS."""
    seq_per_s = args.batch_size / timing["step_s"]
    record = {
        "shape": args.shape, "batch_size": args.batch_size, "seq_length": args.seq_length,
        "masked_positions": args.masked_positions, "precision": args.precision,
        "threads": args.threads, **timing, "sequences_per_s": seq_per_s,
        "train_flops_per_sequence": args.train_flops_per_sequence,
        "peak_rss_mib": peak_rss_mib(),
    }
    record.update(extra)
    return record


def print_json(record):
    """The one line a benchmark child process prints for its parent to parse."""
    print(JSON_MARK + json.dumps(record), flush=True)


def run_json(cmd, *, env=None, timeout=1800, cwd=None):
    """Runs a benchmark child and returns the records it printed with
    print_json; on failure returns one record with the error and output tail."""
    try:
        proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"error": f"timed out after {timeout}s: {' '.join(map(str, cmd))}"}]
    # horovodrun prefixes each rank's lines ("[1]<stdout>:"), so look inside lines.
    records = [json.loads(line.split(JSON_MARK, 1)[1]) for line in proc.stdout.splitlines()
               if JSON_MARK in line]
    if proc.returncode != 0 or not records:
        tail = (proc.stdout[-1500:] + "\n" + proc.stderr[-3000:]).strip()
        records.append({"error": f"exit {proc.returncode}: {' '.join(map(str, cmd))}\n{tail}"})
    return records


def run_json_on_cluster(cluster, script, child_args, *, timeout=1800):
    """`script child_args` as 2 nodes x 2 Horovod ranks (Gloo) on tests/cluster.py's
    simulated cluster, launched from nodeA over its interface only; the records of
    run_json (tests/ must be on sys.path, as the cluster is)."""
    from cluster import INTERFACE

    venv_bin = Path(sys.executable).parent
    env = {**set_thread_env(1), "PATH": f"{venv_bin}:{cluster.path_env()}",
           "PYTHONPATH": str(Path(script).resolve().parents[1]), "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = cluster.command("nodeA", [
        venv_bin / "horovodrun", "-np", "4", "-H", "nodeA:2,nodeB:2", "--gloo",
        "--network-interfaces", INTERFACE, "--ssh-identity-file", cluster.key,
        sys.executable, script, *child_args], cwd=Path(script).resolve().parents[1])
    return run_json(cmd, env=env, timeout=timeout)


def markdown_table(headers, rows):
    """A Markdown table; None cells print as '-'."""
    def cell(value):
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(stem, payload, markdown):
    """Writes bench/results/STEM.json and STEM.md (each via a temporary file and
    rename, so a crash never leaves half a result) and returns their paths."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, text in ((".json", json.dumps(payload, indent=2, default=str)), (".md", markdown)):
        path = RESULTS_DIR / f"{stem}{suffix}"
        tmp = path.with_suffix(suffix + ".tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, path)
        paths.append(path)
    return paths


def fail(message):
    """Benchmark CLI error: message to stderr, non-zero exit."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def time_update_and_allreduce(distributed, shape, batch_size, repeats, seq_length=128,
                              masked_positions=20):
    """On every rank of a started job: seconds of one bert_tf update (PretrainingState:
    forward, backward, allreduce, LAMB; fp32, no accumulation) on a synthetic batch, and of
    the allreduce of its gradients alone (bert_tf.train.distributed.allreduce_sum, which
    the caller may have pointed elsewhere). Returns a record with the gradient bytes."""
    import tensorflow as tf

    from bert_tf.model.config import BertConfig
    from bert_tf.train.config import PretrainingConfig
    from bert_tf.train.loop import PretrainingState

    tf.random.set_seed(1)  # the same initial weights on every rank
    dims = {k: v for k, v in SHAPES[shape].items() if k != "name"}
    with tempfile.TemporaryDirectory() as tmp:
        config = PretrainingConfig(
            bert_config_file="unused", output_dir=tmp, input_files="unused", do_train=True,
            train_batch_size=batch_size, max_seq_length=seq_length,
            max_predictions_per_seq=masked_positions, num_train_steps=1000,
            num_warmup_steps=10, learning_rate=1e-4)
        state = PretrainingState(BertConfig(vocab_size=VOCAB_SIZE, **dims), config)
    variables = list(state.trained.values())  # what the allreduce carries
    zeros = [tf.zeros_like(v) for v in variables]
    allreduce = time_step(lambda: distributed.allreduce_sum(zeros)[0].numpy(), warmup=2,
                          repeats=repeats)
    batch = synthetic_batch(batch_size, seq_length, masked_positions, seed=distributed.rank())
    features = {k: tf.constant(v) for k, v in batch.items()}
    update = time_step(lambda: state.update([features]), warmup=2, repeats=repeats)
    return {"ranks": distributed.size(), "allreduce_s": allreduce["step_s"],
            "update_s": update["step_s"], "update_range_s": [update["step_s_min"],
                                                              update["step_s_max"]],
            "gradient_bytes": sum(4 * v.shape.num_elements() for v in variables),
            "sequences_per_s": distributed.size() * batch_size / update["step_s"]}
