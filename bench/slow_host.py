"""Runs a command as on the slowest host the README promises for, when that host is not at
hand: a 2-core AMD EPYC Zen 1, AVX2 only, whose TensorFlow fp32 matmul peak is ~71 GFLOP/s
(issue 44; bench/README.md "Session 8").

Two things make this host behave like it:
  - oneDNN may use AVX2 at most (ONEDNN_MAX_CPU_ISA=AVX2: no AVX512, no bf16 instructions);
  - the command's processes run in a cgroup whose CPU quota brings TensorFlow's fp32 matmul
    peak (2 threads, 4096^3, measured in the cgroup) down to --target_gflops.
The threads share the quota: two busy threads are slowed as much as Zen 1's (3.2x), one thread
only 1.6x where Zen 1's is about 2.9x slower (bench/README.md, "A Zen 1 stand-in": a training
process started in 8.2 s here, 14.7 s on Zen 1). Work that is mostly one thread (start-up,
tracing, one-thread runs) is too fast here: wall times are a lower bound for Zen 1's. bert_tf's choice of precision reads the cap too (doctor_training.cpu_flags), so the
demo pretrains in fp32 as on Zen 1. What the stand-in cannot run: bfloat16 matmuls with oneDNN
on. TensorFlow decides from the CPU, not the cap, that oneDNN multiplies bfloat16, and a 4x8
bfloat16 tf.matmul under ONEDNN_MAX_CPU_ISA=AVX2 then dies of a segmentation fault (exit 139;
fine with TF_ENABLE_ONEDNN_OPTS=0 or without the cap; TF 2.21, Zen 4), where Zen 1 runs it
emulated. float16 runs.

  python bench/slow_host.py -- make demo
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import common

BENCH = Path(__file__).resolve().parent
PERIOD_US = 100_000
# Zen 1's fp32 figure (bench/README.md, "Session 8": `compare_train.py`'s start-of-run peak).
ZEN1_FP32_GFLOPS = 71.0


@contextlib.contextmanager
def cpu_cgroup(name):
    """A new cgroup with the cpu controller (v2 if mounted so, else v1), removed on exit;
    yields (directory, set_quota(cores): the CPU time it may use, in cores)."""
    unified = Path("/sys/fs/cgroup")
    controllers = unified / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        group = unified / name
        def set_quota(cores):
            (group / "cpu.max").write_text(f"{int(cores * PERIOD_US)} {PERIOD_US}")
    else:
        group = unified / "cpu" / name
        def set_quota(cores):
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(int(cores * PERIOD_US)))
    try:
        group.mkdir()
    except OSError as e:
        sys.exit(f"slow_host: cannot make the cgroup {group} ({e}): run as root on a host "
                 "with the cpu controller")
    try:
        yield group, set_quota
    finally:
        for _ in range(50):  # what the command left behind is killed, then the group goes
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
                group.rmdir()
                break
            time.sleep(0.1)


def in_group(group, command):
    """`command` started inside `group` (the shell joins it, then execs the command)."""
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *map(str, command)]


def fp32_peak(group, env, python):
    """TensorFlow's fp32 matmul GFLOP/s in `group`, 2 threads, measured by `python`."""
    (record,) = common.run_json(in_group(group, [
        python, BENCH / "compare_train.py", "--child", "peaks", "--threads", "2",
        "--peak_dtypes", "float32"]), env=common.set_thread_env(2, env))[-1:]
    if "error" in record:
        sys.exit(f"slow_host: the matmul peak failed: {record['error']}")
    return record["peak_flops"]["float32"] / 1e9


def calibrate(group, set_quota, env, target, python):
    """Sets the quota so the fp32 peak in `group` is about `target` GFLOP/s (the peak scales
    with the quota: two corrections); returns (cores, measured GFLOP/s)."""
    cores = float(os.cpu_count())
    set_quota(cores)
    peak = fp32_peak(group, env, python)
    print(f"slow_host: fp32 peak with oneDNN at AVX2, no quota: {peak:.0f} GFLOP/s", flush=True)
    for _ in range(2):
        cores = min(float(os.cpu_count()), cores * target / peak)
        set_quota(cores)
        peak = fp32_peak(group, env, python)
        print(f"slow_host: quota {cores:.2f} cores -> {peak:.0f} GFLOP/s", flush=True)
    return cores, peak


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target_gflops", type=float, default=ZEN1_FP32_GFLOPS)
    parser.add_argument("--python", default=str(BENCH.parent / ".venv" / "bin" / "python"),
                        help="a Python with TensorFlow, to measure the peak (another checkout's "
                             "venv when the command builds this one's)")
    parser.add_argument("--cores", type=float, default=0.0,
                        help="the quota, in cores, without measuring the peak (a quota an "
                             "earlier run printed); 0: calibrate to --target_gflops")
    parser.add_argument("command", nargs="+", help="the command to run (after --)")
    args = parser.parse_args()
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    # A SIGTERM (a scheduler, `kill`) unwinds through cpu_cgroup's clean-up like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with cpu_cgroup(f"bert_tf_slow_host_{os.getpid()}") as (group, set_quota):
        if args.cores:
            cores = args.cores
            set_quota(cores)
        else:
            cores, peak = calibrate(group, set_quota, env, args.target_gflops, args.python)
        start = time.time()
        status = subprocess.run(in_group(group, args.command), env=env).returncode
        wall = time.time() - start
        peaks = "" if args.cores else (
            f", fp32 peak {peak:.0f} GFLOP/s before, {fp32_peak(group, env, args.python):.0f} "
            f"after (target {args.target_gflops:.0f})")
    print(f"slow_host: exit {status}, {wall:.0f} s wall ({wall / 60:.1f} min) at a quota of "
          f"{cores:.2f} cores{peaks}")
    return status


if __name__ == "__main__":
    sys.exit(main())
