"""Horovod against tf.distribute.MultiWorkerMirroredStrategy (collective ops over gRPC, the
alternative practitioners weigh before choosing Horovod): the same bert_tf update, model,
batch and global batch on 2 ranks of this machine, sequences/s and the time of the
gradients' allreduce alone.

    .venv/bin/python bench/horovod_vs_multiworker.py [--shape tiny] [--batch_size 4]

Horovod: `horovodrun -np 2 -H localhost:2 --gloo`, bert_tf's own update
(bert_tf.train.loop.PretrainingState). MultiWorkerMirroredStrategy: two processes with a
TF_CONFIG naming two workers on 127.0.0.1, the RING implementation; the same update with its
one collective, bert_tf.train.distributed.allreduce_sum, replaced in this benchmark only by
the collective op the strategy issues (CollectiveReduceV2, ring, over the strategy's gRPC
cluster) on the same tensors packed into one (a benchmark of the alternative, not a second
training path). One thread per rank; fp32; seq 128, 20 masked.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402

VENV_BIN = Path(sys.executable).parent
SEQ, PREDICTIONS = 128, 20


def use_strategy_collective(distributed, strategy):
    """Points bert_tf.train.distributed at the collective op the strategy itself issues
    (CollectiveReduceV2 with the RING hint, over the gRPC cluster the strategy started), its
    gradients packed into one tensor as the strategy packs them. Only in this process.
    strategy.run cannot be called from inside bert_tf's own tf.function update."""
    import itertools

    import tensorflow as tf
    from tensorflow.python.ops import collective_ops

    instance_keys = itertools.count(1)
    size = strategy.num_replicas_in_sync

    def allreduce_sum(tensors, fp16_compression=False):
        del fp16_compression  # fp32 in both runs
        flat = tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)
        summed = collective_ops.all_reduce_v2(
            flat, group_size=size, group_key=1, instance_key=next(instance_keys),
            merge_op="Add", final_op="Id", communication_hint="ring")
        parts = tf.split(summed, [tf.size(t) for t in tensors])
        return [tf.reshape(p, tf.shape(t)) for p, t in zip(parts, tensors, strict=True)]

    distributed.allreduce_sum = allreduce_sum
    distributed.size = lambda: size
    distributed.rank = lambda: strategy.cluster_resolver.task_id


def child(args) -> None:
    common.configure_tf_threads(1)
    import tensorflow as tf

    from bert_tf.train import distributed

    if args.child == "mwms":
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING)
        use_strategy_collective(distributed, tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=options))
    else:
        distributed.init()
    record = common.time_update_and_allreduce(distributed, args.shape, args.batch_size,
                                              args.repeats, SEQ, PREDICTIONS)
    if distributed.rank() == 0:
        common.print_json(record)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_mwms(child_args, env, timeout=1800):
    """Two workers, each its own process; rank 0's record."""
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    with tempfile.TemporaryDirectory() as logs:
        for index in range(2):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            log = open(Path(logs) / f"worker{index}.log", "w")  # noqa: SIM115 (closed below)
            procs.append((subprocess.Popen(
                [sys.executable, HERE, *child_args], stdout=log, stderr=subprocess.STDOUT,
                env={**env, "TF_CONFIG": json.dumps(tf_config)}, cwd=REPO), log))
        try:
            for proc, _ in procs:
                proc.wait(timeout=timeout)
        finally:
            for proc, log in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
        text = (Path(logs) / "worker0.log").read_text()
    records = [json.loads(line.split(common.JSON_MARK, 1)[1]) for line in text.splitlines()
               if common.JSON_MARK in line]
    if not records or any(p.returncode for p, _ in procs):
        return {"error": text[-3000:]}
    return records[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("horovod", "mwms"), help=argparse.SUPPRESS)
    parser.add_argument("--shape", choices=sorted(common.SHAPES), default="tiny")
    parser.add_argument("--batch_size", type=int, default=4, help="sequences per rank")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.child:
        return child(args)
    child_args = ["--shape", args.shape, "--batch_size", str(args.batch_size),
                  "--repeats", str(args.repeats)]
    env = {**common.set_thread_env(1), "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    results = {
        "Horovod (Gloo)": common.run_json(
            [VENV_BIN / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo",
             sys.executable, HERE, "--child", "horovod", *child_args], env=env)[0],
        "MultiWorkerMirroredStrategy (RING, gRPC)": run_mwms(
            ["--child", "mwms", *child_args], env),
    }
    print(f"2 ranks on this machine, BERT-{args.shape} (vocab {common.VOCAB_SIZE}), batch "
          f"{args.batch_size} x {SEQ} per rank, fp32, 1 thread per rank; "
          f"load {os.getloadavg()[0]:.1f}")
    print("| framework | update s | sequences/s (2 ranks) | allreduce of the gradients s |")
    print("|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | failed: {r['error'][-300:]!r} | | |")
        else:
            print(f"| {name} | {r['update_s']:.3f} | {r['sequences_per_s']:.1f} | "
                  f"{r['allreduce_s']:.4f} |")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
