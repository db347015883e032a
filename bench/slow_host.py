"""Runs a command as on the slowest host the README promises for, when that host is not at
hand: a 2-core AMD EPYC Zen 1, AVX2 only, whose TensorFlow fp32 matmul peak is ~71 GFLOP/s
(issue 44; bench/README.md "Session 8") and whose one thread is about 2.8x slower than a Zen 3's
or Zen 4's (bench/README.md, "A Zen 1 stand-in").

Two things make this host behave like it:
  - oneDNN may use AVX2 at most (ONEDNN_MAX_CPU_ISA=AVX2: no AVX512, no bf16 instructions);
  - every thread of the command is slowed alike, by a busy process pinned to each core at a
    higher priority (nice), in one cgroup with the command. On a core the scheduler gives a
    nice-0 thread 1024 / (1024 + w) of it, w the busy process's weight (the kernel's
    sched_prio_to_weight, kernel/sched/core.c), so a nice of -3 (w = 1991) slows each thread
    2.9x, one thread or two (a CPU quota, this script's first model, is shared by the threads:
    it slowed one thread 1.6x and two 3.2x, so one-thread work ran too fast).
The matmul peak then falls by the same factor: ~82 GFLOP/s on a Zen 4 held to AVX2, ~30 on a
Zen 3 (AVX2, 88 without the load): at or below Zen 1's 71, so pretraining makes at most Zen 1's
updates in a time budget. What the stand-in cannot run: bfloat16 matmuls with oneDNN on under
the cap on an AVX512_BF16 CPU. TensorFlow decides from the CPU, not the cap, that oneDNN
multiplies bfloat16, and a 4x8 bfloat16 tf.matmul under ONEDNN_MAX_CPU_ISA=AVX2 dies of a
segmentation fault (exit 139; TF 2.21, Zen 4), where Zen 1 runs it emulated.

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

# The kernel's CFS weights of nice -10..0 (sched_prio_to_weight, kernel/sched/core.c).
NICE_WEIGHTS = {-10: 9548, -9: 7620, -8: 6100, -7: 4904, -6: 3906, -5: 3121, -4: 2501,
                -3: 1991, -2: 1586, -1: 1277, 0: 1024}
# Zen 1 against this script's hosts on one thread: bench/startup.py's baseline (checkout
# 5a678dd, a training process's start to exit) took 14.7 s on Zen 1 (session 9) and 5.35 s on
# a 2-core Zen 3 (AVX2; 2026-12-07: `python bench/startup.py --baseline /tmp/s9old --rounds 3`);
# 6.47 s on a 2-core Intel Xeon with AMX (family 6 model 167; 2026-12-08): --slowdown=2.27 there.
ZEN1_THREAD_SLOWDOWN = 2.8


def hog_nice(slowdown):
    """The nice of the busy processes that slows a nice-0 thread sharing a core with one of
    them by at least `slowdown` (the nearest level at or above it)."""
    fits = [nice for nice, weight in NICE_WEIGHTS.items() if (1024 + weight) / 1024 >= slowdown]
    if not fits:
        sys.exit(f"slow_host: --slowdown={slowdown} is beyond nice -10's "
                 f"{(1024 + NICE_WEIGHTS[-10]) / 1024:.1f}x")
    return max(fits)


@contextlib.contextmanager
def cpu_cgroup(name):
    """A new cgroup with the cpu controller (v2 if mounted so, else v1), without a limit, so
    that the command and the busy processes share its run queues (no autogroup: that applies
    to the root group only); everything left in it is killed and the group removed on exit.
    Yields the directory."""
    unified = Path("/sys/fs/cgroup")
    controllers = unified / "cgroup.controllers"
    v2 = controllers.exists() and "cpu" in controllers.read_text().split()
    group = unified / name if v2 else unified / "cpu" / name
    try:
        group.mkdir()
    except OSError as e:
        sys.exit(f"slow_host: cannot make the cgroup {group} ({e}): run as root on a host "
                 "with the cpu controller")
    try:
        yield group
    finally:
        for _ in range(50):
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
                group.rmdir()
                break
            time.sleep(0.1)


def in_group(group, command):
    """`command` started inside `group` (the shell joins it, then execs the command)."""
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *map(str, command)]


@contextlib.contextmanager
def busy_cores(group, nice):
    """A busy process pinned to each core, at `nice`, in `group`; stopped on exit."""
    spin = [sys.executable, "-c", "while True: pass"]
    hogs = [subprocess.Popen(in_group(group, ["taskset", "-c", str(cpu), "nice", "-n",
                                              str(nice), *spin]))
            for cpu in sorted(os.sched_getaffinity(0))]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def one_thread_seconds(group):
    """Seconds a fixed pure-Python loop takes in `group` (one thread)."""
    loop = "import time; t = time.perf_counter(); sum(i * i for i in range(3_000_000)); " \
           "print(time.perf_counter() - t)"
    out = subprocess.run(in_group(group, [sys.executable, "-c", loop]), capture_output=True,
                         text=True, check=True).stdout
    return float(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slowdown", type=float, default=ZEN1_THREAD_SLOWDOWN,
                        help="how many times slower each thread should run")
    parser.add_argument("command", nargs="+", help="the command to run (after --)")
    args = parser.parse_args()
    nice = hog_nice(args.slowdown)
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    # A SIGTERM (a scheduler, `kill`) unwinds through the clean-up like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with cpu_cgroup(f"bert_tf_slow_host_{os.getpid()}") as group:
        alone = one_thread_seconds(group)
        with busy_cores(group, nice):
            loaded = one_thread_seconds(group)
            print(f"slow_host: a busy process at nice {nice} on each core: one thread "
                  f"{loaded / alone:.1f}x slower ({alone:.2f} -> {loaded:.2f} s)", flush=True)
            start = time.time()
            status = subprocess.run(in_group(group, args.command), env=env).returncode
            wall = time.time() - start
    print(f"slow_host: exit {status}, {wall:.0f} s wall ({wall / 60:.1f} min), each thread "
          f"slowed {loaded / alone:.1f}x")
    return status


if __name__ == "__main__":
    sys.exit(main())
