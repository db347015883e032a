"""Horovod against tf.distribute.MultiWorkerMirroredStrategy (collective ops over gRPC, the
alternative practitioners weigh before choosing Horovod): the same bert_tf update, model,
batch and global batch, sequences/s and the time of the gradients' allreduce alone, on
2 ranks of this machine or on 2 nodes x 2 ranks of the simulated cluster (tests/cluster.py:
network namespaces on this machine, root only), its link optionally shaped by `tc tbf`.

    .venv/bin/python bench/horovod_vs_multiworker.py [--shape tiny] [--batch_size 4]
    sudo .venv/bin/python bench/horovod_vs_multiworker.py --nodes 2 [--rates 0,100]

Horovod: `horovodrun --gloo` (-H localhost:2, or nodeA:2,nodeB:2 over the cluster's
interface), bert_tf's own update (bert_tf.train.loop.PretrainingState).
MultiWorkerMirroredStrategy: one process per worker with a TF_CONFIG naming every worker
(127.0.0.1, or the nodes' addresses inside the cluster's namespaces), the RING
implementation; the same update with its collectives (bert_tf.train.distributed's
allreduce_sum and allreduce_mean) replaced in this benchmark only by the collective op the
strategy issues (CollectiveReduceV2, ring, over the strategy's gRPC cluster) on the
same tensors packed into one (a benchmark of the alternative, not a second training path).
One thread per rank; fp32; seq 128, 20 masked.

Network: loopback, or only addresses inside the namespaces the cluster creates (its private
10.213.77.0/24), torn down on exit, also on failure.
"""

import argparse
import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402

VENV_BIN = Path(sys.executable).parent
SEQ, PREDICTIONS = 128, 20
HOROVOD, MWMS = "Horovod (Gloo)", "MultiWorkerMirroredStrategy (RING, gRPC)"
CLUSTER_PORT = 24560


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

    def allreduce_mean(tensors, fp16_compression=False):
        return [t / size for t in allreduce_sum(tensors, fp16_compression)]

    distributed.allreduce_sum = allreduce_sum
    distributed.allreduce_mean = allreduce_mean
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


def wait_all(procs, timeout):
    """Waits until every process has exited, or one failed (the others would wait for it
    in a collective forever), or `timeout` seconds passed; kills whatever still runs."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c for c in codes if c is not None):
                break
            time.sleep(1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def run_mwms(workers, child_args, env, timeout=1800):
    """One process per worker: `workers` lists (address, launcher) pairs, a launcher
    turning a command into the one that runs it on the worker's node. Rank 0's record."""
    # gRPC honours proxy settings; the workers must talk to each other directly.
    env = {k: v for k, v in env.items() if "proxy" not in k.lower()}
    addresses = [address for address, _ in workers]
    procs = []
    with tempfile.TemporaryDirectory() as logs:
        try:
            for index, (_, launcher) in enumerate(workers):
                tf_config = {"cluster": {"worker": addresses},
                             "task": {"type": "worker", "index": index}}
                with open(Path(logs) / f"worker{index}.log", "w") as log:
                    procs.append(subprocess.Popen(
                        [str(c) for c in launcher([sys.executable, HERE, *child_args])],
                        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                        env={**env, "TF_CONFIG": json.dumps(tf_config)}))
        finally:
            wait_all(procs, timeout)
        text = (Path(logs) / "worker0.log").read_text()
    records = [json.loads(line.split(common.JSON_MARK, 1)[1]) for line in text.splitlines()
               if common.JSON_MARK in line]
    if not records or any(p.returncode for p in procs):
        return {"error": text[-3000:]}
    return records[0]


def measure_local(child_args, env):
    """2 ranks on this machine under each framework."""
    workers = [(f"127.0.0.1:{port}", lambda args: args) for port in free_ports(2)]
    return {
        HOROVOD: common.run_json(
            [VENV_BIN / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo",
             sys.executable, HERE, "--child", "horovod", *child_args], env=env)[0],
        MWMS: run_mwms(workers, ["--child", "mwms", *child_args], env),
    }


def measure_cluster(cluster, child_args, env):
    """2 nodes x 2 ranks under each framework; the strategy's workers listen on fixed
    ports of the nodes' own addresses (fresh namespaces: nothing else listens there)."""
    workers = [(f"{node.address}:{CLUSTER_PORT + slot}",
                functools.partial(cluster.command, node.name, cwd=REPO))
               for node in cluster.nodes.values() for slot in range(2)]
    return {
        HOROVOD: common.run_json_on_cluster(cluster, HERE, ["--child", "horovod",
                                                            *child_args])[0],
        MWMS: run_mwms(workers, ["--child", "mwms", *child_args], env),
    }


def measure_all(args, child_args, env):
    """{(placement, link): {framework: record}}; the cluster is torn down on return."""
    if args.nodes == 1:
        return {("1 x 2", "loopback"): measure_local(child_args, env)}
    sys.path.insert(0, str(REPO / "tests"))
    from cluster import Cluster

    results = {}
    with tempfile.TemporaryDirectory() as root, \
            Cluster(Path(root) / "nodes", {"nodeA": {}, "nodeB": {}}) as cluster:
        for rate in args.rates:
            cluster.shape_egress(rate or None)
            link = f"{rate:g} Mbit/s" if rate else "unshaped"
            results[("2 x 2", link)] = measure_cluster(cluster, child_args, env)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("horovod", "mwms"), help=argparse.SUPPRESS)
    parser.add_argument("--shape", choices=sorted(common.SHAPES), default="tiny")
    parser.add_argument("--batch_size", type=int, default=4, help="sequences per rank")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1,
                        help="1: 2 ranks here; 2: 2 nodes x 2 ranks on the simulated cluster")
    parser.add_argument("--rates", default="0",
                        help="with --nodes 2: link rates between the nodes, Mbit/s (0: unshaped)")
    args = parser.parse_args()
    if args.child:
        return child(args)
    args.rates = [float(r) for r in args.rates.split(",")]
    child_args = ["--shape", args.shape, "--batch_size", str(args.batch_size),
                  "--repeats", str(args.repeats)]
    env = {**common.set_thread_env(1), "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    results = measure_all(args, child_args, env)
    print(f"BERT-{args.shape} (vocab {common.VOCAB_SIZE}), batch {args.batch_size} x {SEQ} per "
          f"rank, fp32, 1 thread per rank; load {os.getloadavg()[0]:.1f}")
    print("| nodes x ranks | link | framework | update s | sequences/s | "
          "allreduce of the gradients s |")
    print("|---|---|---|---|---|---|")
    for (placement, link), by_framework in results.items():
        for name, r in by_framework.items():
            if "error" in r:
                print(f"| {placement} | {link} | {name} | failed: {r['error'][-300:]!r} | | |")
            else:
                print(f"| {placement} | {link} | {name} | {r['update_s']:.3f} | "
                      f"{r['sequences_per_s']:.1f} | {r['allreduce_s']:.4f} |")
    return 0 if all("error" not in r for rs in results.values() for r in rs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
