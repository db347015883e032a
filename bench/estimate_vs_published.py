"""The estimate's throughput against every row of NVIDIA's published BERT-large pretraining
performance tables for TensorFlow (DeepLearningExamples at 729963dd, 2024-04-04):

  TF1: TensorFlow/LanguageModeling/BERT/README.md, "Training performance" (lines 788-934)
  TF2: TensorFlow2/LanguageModeling/BERT/README.md, "Pre-training training performance"
       (lines 714-778)

    .venv/bin/python bench/estimate_vs_published.py            # markdown table + summary
    .venv/bin/python bench/estimate_vs_published.py --fit      # refit performance.py's constants
    .venv/bin/python bench/estimate_vs_published.py --holdout=TF2  # fit on TF1, check on TF2
    .venv/bin/python bench/estimate_vs_published.py --time_to_train  # whole runs, held out
    .venv/bin/python bench/estimate_vs_published.py --gpus     # each GPU preset's coverage

Every row is predicted from the GPU preset, the node's links and the row's own settings
(sequence length, per-GPU batch, accumulation, precision; XLA on as both scripts run it;
fp16 allreduce under mixed precision as both scripts' Horovod compression does). "Mixed
precision" rows are --precision=fp16, FP32/TF32 rows --precision=fp32 (TF32 on A100).
"""

import argparse
import dataclasses
import math
import sys

from bert_tf.tools import model_size, performance
from bert_tf.tools.hardware import GPUS


@dataclasses.dataclass(frozen=True)
class System:
    gpu: str
    network_gbps: float  # per node
    label: str


# NVIDIA DGX datasheets: DGX-1 4 x 100 Gb/s EDR InfiniBand, DGX-2/2H 8 x 100 Gb/s,
# DGX A100 8 x 200 Gb/s HDR; all NVLink/NVSwitch inside the node, GPUDirect RDMA across.
SYSTEMS = {
    "dgx1-16": System("v100-16gb", 400, "DGX-1 V100 16GB"),
    "dgx1-32": System("v100-32gb", 400, "DGX-1 V100 32GB"),
    "dgx2": System("v100-32gb", 800, "DGX-2 V100 32GB"),
    "dgx2h": System("v100-32gb-dgx2h", 800, "DGX-2H V100 32GB"),
    "dgxa100-40": System("a100-40gb", 1600, "DGX A100 40GB"),
    "dgxa100-80": System("a100-80gb", 1600, "DGX A100 80GB"),
}

# readme:line system nodes gpus_per_node seq precision batch accumulation published_seq/s
# TF1:861's FP32 cell (35.32) is inconsistent with its own table (weak scaling above linear,
# the seq-512 mixed cell's figure, TF2:720 gives 49.97): the one miss, see bench/README.md.
PUBLISHED = """
TF2:720 dgx2 1 1 128 fp16 60 1024 206.5
TF2:721 dgx2 1 4 128 fp16 60 256 789.75
TF2:722 dgx2 1 8 128 fp16 60 128 1561.77
TF2:723 dgx2 1 16 128 fp16 60 64 3077.99
TF2:724 dgx2 1 1 512 fp16 10 3072 40.95
TF2:725 dgx2 1 4 512 fp16 10 768 158.5
TF2:726 dgx2 1 8 512 fp16 10 384 312.03
TF2:727 dgx2 1 16 512 fp16 10 192 614.94
TF2:720 dgx2 1 1 128 fp32 32 2048 49.97
TF2:721 dgx2 1 4 128 fp32 32 512 194.02
TF2:722 dgx2 1 8 128 fp32 32 256 367.9
TF2:723 dgx2 1 16 128 fp32 32 128 762.22
TF2:724 dgx2 1 1 512 fp32 6 5120 11.06
TF2:725 dgx2 1 4 512 fp32 6 1280 43.05
TF2:726 dgx2 1 8 512 fp32 6 640 85.51
TF2:727 dgx2 1 16 512 fp32 4 512 161.38
TF2:737 dgx2h 1 16 128 fp16 60 64 3528.51
TF2:738 dgx2h 4 16 128 fp16 60 16 13370.21
TF2:739 dgx2h 16 16 128 fp16 60 4 42697.42
TF2:740 dgx2h 32 16 128 fp16 60 2 84223.16
TF2:741 dgx2h 1 16 512 fp16 10 192 678.35
TF2:742 dgx2h 4 16 512 fp16 10 96 2678.29
TF2:743 dgx2h 16 16 512 fp16 10 24 7834.72
TF2:744 dgx2h 32 16 512 fp16 10 6 18786.93
TF2:737 dgx2h 1 16 128 fp32 32 128 841.72
TF2:738 dgx2h 4 16 128 fp32 32 32 3060.49
TF2:739 dgx2h 16 16 128 fp32 32 8 10383.57
TF2:740 dgx2h 32 16 128 fp32 32 4 20094.14
TF2:741 dgx2h 1 16 512 fp32 4 256 180
TF2:742 dgx2h 4 16 512 fp32 4 64 646.76
TF2:743 dgx2h 16 16 512 fp32 4 32 2204.72
TF2:744 dgx2h 32 16 512 fp32 4 16 4196.15
TF2:754 dgxa100-80 1 1 128 fp16 312 256 485.59
TF2:755 dgxa100-80 1 8 128 fp16 312 32 3799.24
TF2:756 dgxa100-80 1 1 512 fp16 40 768 96.52
TF2:757 dgxa100-80 1 8 512 fp16 40 96 649.69
TF2:754 dgxa100-80 1 1 128 fp32 176 512 282.98
TF2:755 dgxa100-80 1 8 128 fp32 176 64 1944.77
TF2:756 dgxa100-80 1 1 512 fp32 22 1536 54.92
TF2:757 dgxa100-80 1 8 512 fp32 22 192 427.39
TF2:767 dgxa100-80 1 8 128 fp16 312 32 3803.82
TF2:768 dgxa100-80 2 8 128 fp16 312 16 7551.37
TF2:769 dgxa100-80 8 8 128 fp16 312 4 29711.11
TF2:770 dgxa100-80 32 8 128 fp16 312 1 110280.73
TF2:771 dgxa100-80 1 8 512 fp16 40 96 749.73
TF2:772 dgxa100-80 2 8 512 fp16 40 48 1491.87
TF2:773 dgxa100-80 8 8 512 fp16 40 12 5870.83
TF2:774 dgxa100-80 32 8 512 fp16 40 3 22506.23
TF2:767 dgxa100-80 1 8 128 fp32 176 64 2062.98
TF2:768 dgxa100-80 2 8 128 fp32 176 32 4084.76
TF2:769 dgxa100-80 8 8 128 fp32 176 8 16134.02
TF2:770 dgxa100-80 32 8 128 fp32 176 2 59569.77
TF2:771 dgxa100-80 1 8 512 fp32 22 192 431.89
TF2:772 dgxa100-80 2 8 512 fp32 22 96 739.14
TF2:773 dgxa100-80 8 8 512 fp32 22 24 2926.58
TF2:774 dgxa100-80 32 8 512 fp32 22 6 11240.5
TF1:797 dgx1-16 1 1 128 fp16 16 4096 134.34
TF1:798 dgx1-16 1 4 128 fp16 16 1024 449.68
TF1:799 dgx1-16 1 8 128 fp16 16 512 1001.39
TF1:800 dgx1-16 1 1 512 fp16 4 8192 28.72
TF1:801 dgx1-16 1 4 512 fp16 4 2048 109.96
TF1:802 dgx1-16 1 8 512 fp16 4 1024 190.65
TF1:797 dgx1-16 1 1 128 fp32 8 8192 39.43
TF1:798 dgx1-16 1 4 128 fp32 8 2048 152.33
TF1:799 dgx1-16 1 8 128 fp32 8 1024 285.79
TF1:800 dgx1-16 1 1 512 fp32 2 16384 9.80
TF1:801 dgx1-16 1 4 512 fp32 2 4096 35.32
TF1:802 dgx1-16 1 8 512 fp32 2 2048 69.53
TF1:829 dgx1-32 1 1 128 fp16 64 1024 168.63
TF1:830 dgx1-32 1 4 128 fp16 64 256 730.25
TF1:831 dgx1-32 1 8 128 fp16 64 128 1443.05
TF1:832 dgx1-32 1 1 512 fp16 8 4096 31.23
TF1:833 dgx1-32 1 4 512 fp16 8 1024 118.84
TF1:834 dgx1-32 1 8 512 fp16 8 512 255.64
TF1:829 dgx1-32 1 1 128 fp32 32 2048 46.78
TF1:830 dgx1-32 1 4 128 fp32 32 512 179.73
TF1:831 dgx1-32 1 8 128 fp32 32 256 357.00
TF1:832 dgx1-32 1 1 512 fp32 8 4096 10.67
TF1:833 dgx1-32 1 4 512 fp32 8 1024 39.55
TF1:834 dgx1-32 1 8 512 fp32 8 512 81.42
TF1:861 dgx2 1 1 128 fp16 64 1024 188.04
TF1:862 dgx2 1 4 128 fp16 64 256 790.89
TF1:863 dgx2 1 8 128 fp16 64 128 1556.89
TF1:864 dgx2 1 16 128 fp16 64 64 3081.69
TF1:865 dgx2 1 1 512 fp16 8 4096 35.32
TF1:866 dgx2 1 4 512 fp16 8 1024 128.98
TF1:867 dgx2 1 8 512 fp16 8 512 274.04
TF1:868 dgx2 1 16 512 fp16 8 256 513.43
TF1:861 dgx2 1 1 128 fp32 32 8192 35.32
TF1:862 dgx2 1 4 128 fp32 32 2048 193.08
TF1:863 dgx2 1 8 128 fp32 32 1024 386.89
TF1:864 dgx2 1 16 128 fp32 32 128 761.92
TF1:865 dgx2 1 1 512 fp32 8 4096 11.67
TF1:866 dgx2 1 4 512 fp32 8 1024 42.84
TF1:867 dgx2 1 8 512 fp32 8 512 86.78
TF1:868 dgx2 1 16 512 fp32 8 256 173.26
TF1:878 dgx2h 1 16 128 fp16 64 64 3081.69
TF1:879 dgx2h 4 16 128 fp16 64 16 13192.00
TF1:880 dgx2h 16 16 128 fp16 64 4 48223.00
TF1:881 dgx2h 32 16 128 fp16 64 2 86673.64
TF1:882 dgx2h 1 16 512 fp16 8 256 577.79
TF1:883 dgx2h 4 16 512 fp16 8 64 2284.23
TF1:884 dgx2h 16 16 512 fp16 8 16 8853.00
TF1:885 dgx2h 32 16 512 fp16 8 8 17059.00
TF1:878 dgx2h 1 16 128 fp32 32 128 761.92
TF1:879 dgx2h 4 16 128 fp32 32 32 3389.83
TF1:880 dgx2h 16 16 128 fp32 32 8 13217.78
TF1:881 dgx2h 32 16 128 fp32 32 4 25142.26
TF1:882 dgx2h 1 16 512 fp32 8 256 173.26
TF1:883 dgx2h 4 16 512 fp32 8 64 765.04
TF1:884 dgx2h 16 16 512 fp32 8 16 3001.43
TF1:885 dgx2h 32 16 512 fp32 8 8 5893.14
TF1:912 dgxa100-40 1 1 128 fp16 64 1024 356.845
TF1:913 dgxa100-40 1 4 128 fp16 64 256 1422.25
TF1:914 dgxa100-40 1 8 128 fp16 64 128 2871.89
TF1:915 dgxa100-40 1 1 512 fp16 16 2048 70.856
TF1:916 dgxa100-40 1 4 512 fp16 16 512 284.912
TF1:917 dgxa100-40 1 8 512 fp16 16 256 572.112
TF1:912 dgxa100-40 1 1 128 fp32 64 1024 238.10
TF1:913 dgxa100-40 1 4 128 fp32 64 256 952.39
TF1:914 dgxa100-40 1 8 128 fp32 64 128 1889.71
TF1:915 dgxa100-40 1 1 512 fp32 8 4096 39.96
TF1:916 dgxa100-40 1 4 512 fp32 8 1024 160.16
TF1:917 dgxa100-40 1 8 512 fp32 8 512 316.51
TF1:927 dgxa100-40 1 8 128 fp16 64 128 2871.89
TF1:928 dgxa100-40 4 8 128 fp16 64 32 11159
TF1:929 dgxa100-40 16 8 128 fp16 64 8 41144
TF1:930 dgxa100-40 32 8 128 fp16 64 4 77479.87
TF1:931 dgxa100-40 1 8 512 fp16 16 256 572.112
TF1:932 dgxa100-40 4 8 512 fp16 16 128 2197.44
TF1:933 dgxa100-40 16 8 512 fp16 16 32 8723.1
TF1:934 dgxa100-40 32 8 512 fp16 16 16 16705
TF1:927 dgxa100-40 1 8 128 fp32 64 128 1889.71
TF1:928 dgxa100-40 4 8 128 fp32 64 32 7532.00
TF1:929 dgxa100-40 16 8 128 fp32 64 8 28605.62
TF1:930 dgxa100-40 32 8 128 fp32 64 4 53585.82
TF1:931 dgxa100-40 1 8 512 fp32 8 512 316.51
TF1:932 dgxa100-40 4 8 512 fp32 8 128 1268.43
TF1:933 dgxa100-40 16 8 512 fp32 8 32 4903.39
TF1:934 dgxa100-40 32 8 512 fp32 8 16 9463.80
"""


@dataclasses.dataclass(frozen=True)
class Row:
    source: str
    system: str
    nodes: int
    gpus_per_node: int
    seq: int
    precision: str
    batch: int
    accumulation: int
    published: float


def published_rows():
    rows = []
    for line in PUBLISHED.strip().splitlines():
        source, system, *numbers = line.split()
        nodes, gpus, seq, precision, batch, accumulation, published = numbers
        rows.append(Row(source, system, int(nodes), int(gpus), int(seq), precision, int(batch),
                        int(accumulation), float(published)))
    return rows


def predict(row: Row) -> float:
    """Sequences/s of all GPUs of the row, from the presets and performance.py's model."""
    system = SYSTEMS[row.system]
    workload = performance.Workload(
        model_size.MODEL_PRESETS["large"], row.seq, 20 if row.seq == 128 else 80, row.batch,
        row.precision, use_xla=True, fp16_allreduce=row.precision == "fp16")
    cluster = performance.Cluster(GPUS[system.gpu], row.gpus_per_node, row.nodes,
                                  system.network_gbps, rdma=True)
    return performance.step_time(workload, cluster, row.accumulation).sequences_per_second


# NVIDIA's BERT-large SQuAD inference (seq 384, batch 8) in one README and container
# (TensorFlow 20.06-py3), the only published BERT figures that put a T4 beside a V100:
# TF1 README lines. readme:line preset precision sentences/s
INFERENCE = """
TF1:987 v100-16gb fp16 148.57
TF1:1033 v100-32gb fp16 143.02
TF1:1080 v100-32gb fp16 151.81
TF1:1189 t4 fp16 38.29
TF1:996 v100-16gb fp32 41.32
TF1:1042 v100-32gb fp32 42.37
TF1:1089 v100-32gb fp32 44.64
TF1:1198 t4 fp32 9.75
"""


def fraction_of_peak(preset, precision):
    """Mean published inference sentences/s over the preset's matmul peak (the forward FLOPs
    per sentence are the same for every row, so they cancel in a ratio)."""
    rates = [float(rate) for line in INFERENCE.strip().splitlines()
             for _, name, p, rate in [line.split()] if name == preset and p == precision]
    return sum(rates) / len(rates) / GPUS[preset].peak_tflops(precision)


def published_t4_ratio(precision):
    """NVIDIA's T4 / V100-32GB BERT-large inference throughput (mean of the V100 rows)."""
    return (fraction_of_peak("t4", precision) * GPUS["t4"].peak_tflops(precision)
            / fraction_of_peak("v100-32gb", precision) / GPUS["v100-32gb"].peak_tflops(precision))


def training_ratio(gpu, over="v100-32gb", precision="fp16"):
    """The estimate's one-GPU BERT-large phase-1 throughput on `gpu` over `over` (batch 32)."""
    w = performance.Workload(model_size.MODEL_PRESETS["large"], 128, 20, 32, precision)
    return (performance.micro_step_seconds(w, GPUS[over])
            / performance.micro_step_seconds(w, GPUS[gpu]))


def fit_turing():
    """Turing's efficiencies: those at which the estimate's T4 / V100 training ratio equals
    NVIDIA's published T4 / V100 inference ratio (bisection; an upper bound, as batch 8
    fills a T4 better than a V100)."""
    for unit, precision in (("half", "fp16"), ("fp32", "fp32")):
        low, high = 0.01, 1.0
        while high - low > 1e-5:
            performance.COMPUTE_EFFICIENCY[f"turing-{unit}"] = (low + high) / 2
            if training_ratio("t4", precision=precision) < published_t4_ratio(precision):
                low = (low + high) / 2
            else:
                high = (low + high) / 2


def print_gpus(rows):
    """Each GPU preset: the published rows it is checked against and their error, or why
    none; and the T4 against the V100, the one cross-generation ratio NVIDIA publishes."""
    print("| preset | confidence | published training rows | mean error | worst |")
    print("|---|---|---|---|---|")
    for name, gpu in GPUS.items():
        mine = [r for r in rows if SYSTEMS[r.system].gpu == name]
        errs = errors(mine)
        level = performance.confidence(gpu, "fp16").level
        if errs:
            print(f"| {name} | {level} | {len(errs)} | {100 * sum(map(abs, errs)) / len(errs):.1f}%"
                  f" | {100 * max(errs, key=abs):+.1f}% |")
        elif name in INFERENCE:
            print(f"| {name} | {level} | none; its T4/V100 inference ratio, below | | |")
        else:
            print(f"| {name} | {level} | none | | |")
    for precision in ("fp16", "fp32"):
        published = published_t4_ratio(precision)
        print(f"\nT4 / V100-32GB, {precision}: NVIDIA's inference {published:.3f}; the estimate's "
              f"training {training_ratio('t4', precision=precision):.3f} (Volta's efficiency "
              "borrowed, as before: ", end="")
        fitted = dict(performance.COMPUTE_EFFICIENCY)
        unit = "half" if precision == "fp16" else "fp32"
        performance.COMPUTE_EFFICIENCY[f"turing-{unit}"] = fitted[f"volta-{unit}"]
        print(f"{training_ratio('t4', precision=precision):.3f})")
        performance.COMPUTE_EFFICIENCY.update(fitted)


def errors(rows):
    return [predict(r) / r.published - 1 for r in rows]


# The constants the fit tunes: (module attribute, key or None).
FITTED = [("COMPUTE_EFFICIENCY", "volta-half"), ("COMPUTE_EFFICIENCY", "volta-fp32"),
          ("COMPUTE_EFFICIENCY", "ampere-half"), ("COMPUTE_EFFICIENCY", "ampere-tf32"),
          ("ELEMENTWISE_PASSES", None), ("MICRO_STEP_OVERHEAD_S", None)]


def _get(name, key):
    value = getattr(performance, name)
    return value[key] if key else value


def _set(name, key, value):
    if key:
        getattr(performance, name)[key] = value
    else:
        setattr(performance, name, value)


def fit(rows, power=4):
    """Pattern search on the log of each constant, minimising the mean of |log(predicted /
    published)|^power over all rows (power 4 leans towards the worst rows, as the 20%
    target does)."""
    def loss():
        return sum(abs(math.log1p(e)) ** power for e in errors(rows)) / len(rows)

    step, best = 0.5, loss()
    while step > 0.002:
        improved = False
        for name, key in FITTED:
            for factor in (math.exp(step), math.exp(-step)):
                old = _get(name, key)
                _set(name, key, old * factor)
                trial = loss()
                if trial < best:
                    best, improved = trial, True
                else:
                    _set(name, key, old)
        if not improved:
            step /= 2
    return best


def print_table(rows):
    errs = errors(rows)
    print("| README line | system | nodes x GPUs | seq | precision | batch/GPU | accumulation "
          "| published seq/s | predicted | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r, e in zip(rows, errs, strict=True):
        print(f"| {r.source} | {SYSTEMS[r.system].label} | {r.nodes} x {r.gpus_per_node} | "
              f"{r.seq} | {'mixed' if r.precision == 'fp16' else 'FP32/TF32'} | {r.batch} | "
              f"{r.accumulation} | {r.published:,.1f} | {r.published * (1 + e):,.1f} | "
              f"{100 * e:+.1f}% |")
    within = sum(abs(e) <= 0.20 for e in errs)
    worst = max(range(len(rows)), key=lambda i: abs(errs[i]))
    print(f"\n{within} of {len(rows)} rows within 20%; mean |error| "
          f"{100 * sum(map(abs, errs)) / len(errs):.1f}%, worst {100 * errs[worst]:+.1f}% "
          f"({rows[worst].source}, {SYSTEMS[rows[worst].system].label})")
    return within == len(rows)


# The READMEs' "Pre-training accuracy" tables: whole two-phase runs, wall-clock hours (TF1
# lines 724-727, TF2 lines 670-673), never used by the fit. Their scripts' steps: phase 1 is
# 9/10 of train_steps (TF1 default 7820, TF2 8341), phase 2 1/10 scaled by the global
# batches' ratio (scripts/run_pretraining_lamb_phase{1,2}.sh).
# readme system nodes gpus precision batch1 batch2 accumulation1 accumulation2 hours
WHOLE_RUNS = """
TF1:724 dgx2h 32 16 fp16 64 8 2 8 2.63
TF1:725 dgx2h 32 16 fp32 32 8 4 8 8.48
TF1:726 dgxa100-40 32 8 fp16 64 16 4 8 3.24
TF1:727 dgxa100-40 32 8 fp32 64 8 4 16 4.58
TF2:670 dgx2h 32 16 fp16 56 10 2 6 2.67
TF2:671 dgx2h 32 16 fp32 32 4 4 16 8.02
TF2:672 dgxa100-80 32 8 fp16 312 40 1 3 2.02
TF2:673 dgxa100-80 32 8 fp32 176 22 2 6 3.57
"""
TRAIN_STEPS = {"TF1": 7820, "TF2": 8341}


def print_time_to_train():
    """Predicted steady-state hours of each whole run against its published wall clock."""
    print("| README line | system | nodes x GPUs | precision | published h | predicted h "
          "| predicted / published |")
    print("|---|---|---|---|---|---|---|")
    for line in WHOLE_RUNS.strip().splitlines():
        source, system, *fields = line.split()
        nodes, gpus, precision = int(fields[0]), int(fields[1]), fields[2]
        b1, b2, a1, a2 = map(int, fields[3:7])
        world = nodes * gpus
        steps = TRAIN_STEPS[source[:3]]
        phase1 = steps * 9 // 10 * b1 * a1 * world
        phase2 = steps // 10 * (b1 * a1) // (b2 * a2) * b2 * a2 * world
        seconds = sum(sequences / predict(Row(source, system, nodes, gpus, seq, precision, b, a, 0))
                      for sequences, seq, b, a in ((phase1, 128, b1, a1), (phase2, 512, b2, a2)))
        hours = float(fields[7])
        print(f"| {source} | {SYSTEMS[system].label} | {nodes} x {gpus} | {precision} | "
              f"{hours} | {seconds / 3600:.2f} | {seconds / 3600 / hours:.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true",
                        help="refit performance.py's constants first and print them")
    parser.add_argument("--time_to_train", action="store_true",
                        help="whole published pretraining runs (held out) instead of the tables")
    parser.add_argument("--gpus", action="store_true",
                        help="each GPU preset: its published rows and error, or none")
    parser.add_argument("--holdout", choices=("TF1", "TF2"),
                        help="fit on the other README's rows, print this one's (cross-check)")
    args = parser.parse_args(argv)
    if args.time_to_train:
        return print_time_to_train()
    rows = published_rows()
    if args.gpus:
        return print_gpus(rows)
    if args.holdout:
        loss = fit([r for r in rows if not r.source.startswith(args.holdout)])
        rows = [r for r in rows if r.source.startswith(args.holdout)]
    elif args.fit:
        loss = fit(rows)
        fit_turing()
    if args.fit or args.holdout:
        print(f"fitted (mean |log error|^4 {loss:.3g}):")
        for name, key in FITTED + [("COMPUTE_EFFICIENCY", "turing-half"),
                                   ("COMPUTE_EFFICIENCY", "turing-fp32")]:
            print(f"  {name}{f'[{key!r}]' if key else ''} = {_get(name, key):.4g}")
        print()
    return 0 if print_table(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
