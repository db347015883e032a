"""bench/gpu_check.sh is run by hand on a GPU machine, rarely and without a second try; its CPU
fallback runs the same code path (peaks, bert_tf's update with XLA, the report), so a change
that breaks the script fails here first."""

import re

from conftest import REPO, run_command


def test_gpu_check_cpu_fallback_reports_a_throughput():
    proc = run_command(["bash", REPO / "bench" / "gpu_check.sh", "--cpu"], timeout=900)
    assert "measured matmul peak" in proc.stdout
    match = re.search(r"bf16\+XLA BERT-tiny batch \d+: ([\d.]+) sequences/s .*MFU ([\d.]+)%",
                      proc.stdout)
    assert match, proc.stdout
    assert float(match.group(1)) > 0 and float(match.group(2)) > 0


def test_gpu_check_rejects_unknown_arguments():
    proc = run_command(["bash", REPO / "bench" / "gpu_check.sh", "--gpu"], check=False)
    assert proc.returncode == 2 and "unknown argument '--gpu'" in proc.stderr
