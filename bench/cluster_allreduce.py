"""The estimate's communication model against a measured 2 nodes x 2 ranks run on the
simulated cluster (tests/cluster.py: network namespaces on one machine, root only), with
the link between the nodes shaped by `tc ... tbf rate` (a token bucket on each node's
egress):

    sudo .venv/bin/python bench/cluster_allreduce.py [--rates 100,50,25] [--calibrate 100]

At each link rate, Horovod (Gloo) on 2 x 2 ranks measures (a) the grouped allreduce of the
model's gradients alone and (b) bert_tf's whole update (forward, backward, allreduce, LAMB).
The unshaped run gives the compute part (update minus allreduce); the allreduce's achieved
share of the line rate is taken at --calibrate only; every other rate is then predicted as
compute + bert_tf.tools.performance.allreduce_seconds and compared with the measured update.
The model is BERT-tiny with the full 30,522-word vocabulary (its 16 MB of fp32 gradients make
the link matter at these rates), batch 4 x 128 tokens per rank, fp32, one thread per rank.

Network: only addresses inside the namespaces this script creates (10.213.77.0/24), torn
down on exit, also on failure.
"""

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(REPO / "tests"))
import common  # noqa: E402

BATCH, SEQ, PREDICTIONS = 4, 128, 20


def child(args) -> None:
    """Every rank: times the gradients' allreduce alone and the whole update."""
    common.configure_tf_threads(1)
    from bert_tf.train import distributed

    distributed.init()
    record = common.time_update_and_allreduce(distributed, "tiny", BATCH, args.repeats, SEQ,
                                              PREDICTIONS)
    if distributed.rank() == 0:
        common.print_json(record)


def measure(cluster, rate_mbit, repeats):
    cluster.shape_egress(rate_mbit)
    records = common.run_json_on_cluster(cluster, HERE, ["--child", "--repeats", str(repeats)])
    failed = [r["error"] for r in records if "error" in r]
    if failed:
        raise RuntimeError(f"2x2 run at {rate_mbit} Mbit/s failed: {failed[0]}")
    return records[0]


def predicted_allreduce(size_bytes, rate_mbit, efficiency):
    """bert_tf's model for this cluster: a ring of 4 ranks paced by the shaped TCP link,
    at the calibrated share of its rate."""
    from bert_tf.tools import performance
    from bert_tf.tools.hardware import GPUS

    cpu_node = dataclasses.replace(GPUS["t4"], name="cpu-rank", nvlink_gb_s=10.0)  # loopback
    cluster = performance.Cluster(cpu_node, 2, 2, network_gbps=rate_mbit / 1000, rdma=False)
    saved = performance.LINK_EFFICIENCY["tcp"]
    performance.LINK_EFFICIENCY["tcp"] = efficiency
    try:
        return performance.allreduce_seconds(size_bytes, cluster)
    finally:
        performance.LINK_EFFICIENCY["tcp"] = saved


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rates", default="100,50,25", help="shaped link rates, Mbit/s")
    parser.add_argument("--calibrate", type=float, default=100,
                        help="the rate whose measured allreduce sets the link efficiency")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        return child(args)
    from cluster import Cluster

    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as root, \
            Cluster(Path(root) / "nodes", {"nodeA": {}, "nodeB": {}}) as cluster:
        results = {rate: measure(cluster, rate, args.repeats) for rate in [None, *rates]}
    base = results[None]
    compute = base["update_s"] - base["allreduce_s"]
    size = base["gradient_bytes"]
    ring_bytes = 2 * 3 / 4 * size
    calibration = results[args.calibrate]
    efficiency = ring_bytes / calibration["allreduce_s"] / (args.calibrate * 1e6 / 8)
    print(f"2 nodes x 2 ranks, {size / 1e6:.1f} MB of fp32 gradients; unshaped: update "
          f"{base['update_s']:.3f} s, allreduce {base['allreduce_s']:.3f} s -> compute "
          f"{compute:.3f} s; link efficiency {efficiency:.2f} (from {args.calibrate:g} Mbit/s)")
    print("| link Mbit/s | allreduce measured s | achieved / line rate | update measured s "
          "| update predicted s | error |")
    print("|---|---|---|---|---|---|")
    for rate in rates:
        r = results[rate]
        achieved = ring_bytes / r["allreduce_s"] / (rate * 1e6 / 8)
        predicted = compute + predicted_allreduce(size, rate, efficiency)
        note = " (calibration)" if rate == args.calibrate else ""
        print(f"| {rate:g}{note} | {r['allreduce_s']:.2f} | {achieved:.2f} | "
              f"{r['update_s']:.2f} | {predicted:.2f} | "
              f"{100 * (predicted / r['update_s'] - 1):+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
