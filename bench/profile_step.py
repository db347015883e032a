"""Where a training step's time goes: one forward/backward pass of bert_tf or of Model Garden,
traced with TensorFlow's profiler and summed by op type, with wall and CPU seconds.

    .venv/bin/python bench/profile_step.py --precision=bf16
    ~/.cache/bert_tf/bench-venvs/modelgarden/bin/python bench/profile_step.py \
        --framework=modelgarden --precision=bf16

CPU seconds / wall seconds is the step's parallelism (at most --threads): unlike wall time it
stays meaningful on a busy machine, where the per-op milliseconds are inflated alike for every
op. Prints one BENCH_JSON record: wall_s, cpu_s, and ms per step for the top --top op types of
the executor's thread (oneDNN kernels show as _Mkl*; Model Garden's dense layers as _MklEinsum).
With --xla: the compiled pass's thunks by HLO name (dots named after their TF op, MatMul or
BatchMatMulV3; fusions by their kind, e.g. dropout's random bits as concatenate_bitcast_fusion).
"""

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))


def bert_tf_pass(tf, args, batch):
    """bert_tf's forward/backward, as TrainState.gradients computes it (no allreduce)."""
    from bert_tf.model import modeling
    from bert_tf.model.config import BertConfig
    from bert_tf.train.precision import compute_dtype, configure_xla_matmuls, has_gpu

    configure_xla_matmuls(args.precision, args.xla, has_gpu())  # as TrainState does
    shape = {k: v for k, v in common.SHAPES[args.shape].items() if k != "name"}
    config = BertConfig(vocab_size=common.VOCAB_SIZE, hidden_act=args.hidden_act, **shape)
    model = modeling.BertForPreTraining(config, compute_dtype(args.precision))
    params = list(modeling.variables_by_name(model).values())
    features = {name: tf.constant(value) for name, value in batch.items()}
    seed = tf.constant([1, 2], tf.int64)

    @tf.function(jit_compile=args.xla)
    def forward_backward():
        with tf.GradientTape() as tape:
            loss = modeling.pretraining_loss(model(features, training=True, dropout_seed=seed),
                                             features)["loss"]
        return [tf.convert_to_tensor(g) for g in tape.gradient(loss, params)]
    return forward_backward


def modelgarden_pass(tf, args, batch):
    """Model Garden's forward/backward: its BertPretrainerV2 and MaskedLMTask loss."""
    import tf_keras
    from modelgarden_train_step import FEATURE_NAMES, build_model
    from official.nlp.data import pretrain_dataloader
    from official.nlp.tasks import masked_lm

    if args.precision == "bf16":
        tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = build_model(tf_keras, {**common.SHAPES[args.shape], "vocab_size": common.VOCAB_SIZE})
    task = masked_lm.MaskedLMTask(masked_lm.MaskedLMConfig(
        train_data=pretrain_dataloader.BertPretrainDataConfig(
            seq_length=args.seq_length, max_predictions_per_seq=args.masked_positions,
            use_next_sentence_label=True)))
    metrics = task.build_metrics(training=True)
    inputs = {FEATURE_NAMES.get(name, name): tf.constant(value) for name, value in batch.items()}

    @tf.function(jit_compile=args.xla)
    def forward_backward():
        with tf.GradientTape() as tape:
            loss = task.build_losses(labels=inputs, model_outputs=model(inputs, training=True),
                                     metrics=metrics)
        grads = tape.gradient(loss, model.trainable_variables)
        return [tf.convert_to_tensor(g) for g in grads if g is not None]
    return forward_backward


def read_trace(trace_dir):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    (path,) = glob.glob(os.path.join(trace_dir, "plugins/profile/*/*.xplane.pb"))
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def xla_milliseconds(trace_dir, steps):
    """ms per step of the XLA-compiled pass's thunks (XLA_FLAGS=--xla_cpu_enable_xprof_traceme),
    by HLO name without its number (`fusion.12` -> `fusion`), on every thread: each event's self
    time (its nested events subtracted), so envelopes (the executor, `call`) count only their own
    work; waits for other threads are left out."""
    waits = {"BlockUntilReady", "SlinkyThreadPool::Await"}
    space = read_trace(trace_dir)
    totals = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            open_events = []  # (end, name) of the events enclosing the current one
            for event in sorted(line.events, key=lambda e: e.offset_ps):
                while open_events and open_events[-1][0] <= event.offset_ps:
                    open_events.pop()
                name = re.sub(r"[._]\d+", "", plane.event_metadata[event.metadata_id].name)
                if open_events:
                    totals[open_events[-1][1]] -= event.duration_ps / 1e9 / steps
                totals[name] += event.duration_ps / 1e9 / steps
                open_events.append((event.offset_ps + event.duration_ps, name))
    return collections.Counter({k: v for k, v in totals.items() if k not in waits})


def op_milliseconds(trace_dir, steps):
    """ms per step of each op type on TensorFlow's executor thread(s), from the xplane file."""
    space = read_trace(trace_dir)
    totals = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                op_type = plane.event_metadata[event.metadata_id].name.split(":")[-1]
                if op_type != "Process":  # the executor's envelope around the ops
                    totals[op_type] += event.duration_ps / 1e9 / steps
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--framework", choices=["bert_tf", "modelgarden"], default="bert_tf")
    parser.add_argument("--shape", choices=sorted(common.SHAPES), default="base")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--hidden_act", default="gelu", help="bert_tf's activation")
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--masked_positions", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")  # both frameworks with oneDNN
    if args.xla:  # XLA's thunks in the trace
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_cpu_enable_xprof_traceme=true")
    common.configure_tf_threads(args.threads)
    import tensorflow as tf

    batch = common.synthetic_batch(args.batch_size, args.seq_length, args.masked_positions)
    build = bert_tf_pass if args.framework == "bert_tf" else modelgarden_pass
    forward_backward = build(tf, args, batch)
    for _ in range(2):  # trace and warm up
        forward_backward()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        forward_backward()
    wall, cpu = (time.perf_counter() - wall) / args.steps, (time.process_time() - cpu) / args.steps
    with tempfile.TemporaryDirectory() as trace_dir:
        tf.profiler.experimental.start(trace_dir)
        for _ in range(args.steps):
            forward_backward()
        tf.profiler.experimental.stop()
        ops = (xla_milliseconds if args.xla else op_milliseconds)(trace_dir, args.steps)
    common.print_json({**vars(args), "tensorflow": tf.__version__, "wall_s": wall, "cpu_s": cpu,
                       "parallelism": cpu / wall, "op_ms_total": sum(ops.values()),
                       "op_ms": dict(ops.most_common(args.top))})


if __name__ == "__main__":
    main()
