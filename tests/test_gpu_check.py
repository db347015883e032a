"""bench/gpu_check.sh is run by hand on a GPU machine, rarely and without a second try; its CPU
fallback runs the same code path (peaks, bert_tf's update with XLA, the report), so a change
that breaks the script fails here first."""

import re
from pathlib import Path

from conftest import REPO, run_command


def test_gpu_check_cpu_fallback_reports_a_throughput():
    """BERT-tiny at 2 x 64 tokens, the smallest run through that code; in bf16 only on a CPU
    with bf16 matmuls (elsewhere bf16 is emulated and slow, so fp32)."""
    proc = run_command(["bash", REPO / "bench" / "gpu_check.sh", "--cpu"], timeout=900)
    assert "measured matmul peak" in proc.stdout
    flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
                .group(1).split())
    precision = "bf16" if flags & {"avx512_bf16", "amx_bf16"} else "fp32"
    assert f"BERT-tiny seq 64, batch 2, {precision}, xla" in proc.stdout, proc.stdout
    match = re.search(rf"{precision}\+XLA BERT-tiny batch 2: ([\d.]+) sequences/s .*"
                      r"MFU ([\d.]+)%", proc.stdout)
    assert match, proc.stdout
    assert float(match.group(1)) > 0 and float(match.group(2)) > 0


def test_gpu_check_rejects_unknown_arguments():
    proc = run_command(["bash", REPO / "bench" / "gpu_check.sh", "--gpu"], check=False)
    assert proc.returncode == 2 and "unknown argument '--gpu'" in proc.stderr


def test_gpu_check_installs_one_tensorflow_per_setup():
    """Issue 35: it installed tensorflow[and-cuda] together with requirements.txt's
    tensorflow-cpu pin; both unpack into site-packages/tensorflow and the CPU build could win."""
    script = REPO / "bench" / "gpu_check.sh"
    pins = {}
    for setup in ("cuda", "ngc"):
        out = run_command(["bash", script, f"--requirements={setup}"]).stdout
        pins[setup] = [line for line in out.splitlines() if line and not line.startswith("#")]
    cpu_pin = next(line for line in (REPO / "install" / "requirements.txt").read_text().split()
                   if line.startswith("tensorflow-cpu=="))
    assert pins["cuda"][0] == cpu_pin.replace("tensorflow-cpu", "tensorflow[and-cuda]")
    assert not any(p.startswith("tensorflow-cpu") for p in pins["cuda"])
    assert any(p.startswith("tensorflow-text==") for p in pins["cuda"])
    # On NGC the image's TensorFlow and NCCL Horovod stay (as in the Dockerfile).
    assert not any(re.match(r"(tensorflow|horovod)\b", p) for p in pins["ngc"])
    assert {"absl-py>=2.1", "tokenizers>=0.20"} <= set(pins["ngc"]) & set(pins["cuda"])
    # Every pip install goes through those lists, never the CPU requirements file itself.
    for line in script.read_text().splitlines():
        if "PIP[@]" in line:
            assert "requirements.txt" not in line, line
    proc = run_command(["bash", script, "--requirements=rocm"], check=False)
    assert proc.returncode == 2 and "takes cuda or ngc" in proc.stderr
