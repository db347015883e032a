"""bert_tf.tools.estimate: the arithmetic, checked against numbers worked out by hand."""

import json
import shlex

import pytest
from conftest import PYTHON, REPO, run_command

from bert_tf.model.config import BertConfig
from bert_tf.tools import estimate


def test_parameter_counts_match_published_bert_sizes():
    # Google: BERT-base 110M, BERT-large 340M (with the pretraining heads).
    assert estimate.count_parameters(estimate.MODEL_PRESETS["base"]) == 110_106_428
    assert estimate.count_parameters(estimate.MODEL_PRESETS["large"]) == 336_226_108


def test_parameter_count_by_hand_for_a_tiny_model():
    config = BertConfig(vocab_size=10, hidden_size=4, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8, max_position_embeddings=6, type_vocab_size=2)
    embeddings = (10 + 6 + 2) * 4 + 2 * 4                  # 80
    layer = 4 * (16 + 4) + 2 * 4 + (32 + 8) + (32 + 4) + 2 * 4  # 172
    heads = (16 + 4) + (16 + 4 + 8) + 10 + (8 + 2)         # pooler, MLM transform+bias, NSP
    assert estimate.count_parameters(config) == embeddings + layer + heads == 320


def test_time_and_cost_arithmetic():
    # 1e6 sequences at 100/s per device on 4 devices at 0.9: 1e6 / 360 s.
    result = estimate.TrainingEstimate(1e6, 100.0, 4, 0.9)
    assert result.sequences_per_second == pytest.approx(360.0)
    assert result.seconds == pytest.approx(2777.777, rel=1e-6)
    assert result.device_hours == pytest.approx(4 * 2777.777 / 3600, rel=1e-6)
    assert result.cost(2.5) == pytest.approx(7.716, rel=1e-3)
    assert estimate.default_efficiency(1) == 1.0 and estimate.default_efficiency(8) == 0.9


def test_throughput_from_metrics_is_per_device_and_skips_the_first_record(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [{"step": 10, "sequences_per_second": 10.0},   # includes tracing: skipped
               {"step": 20, "sequences_per_second": 40.0},
               {"step": 30, "sequences_per_second": 44.0, "num_ranks": 4}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    # (40/2 + 44/4) / 2: the record's num_ranks wins over the flag's.
    assert estimate.throughput_from_metrics(path, num_devices=2) == pytest.approx(15.5)
    with pytest.raises(estimate.EstimateError, match="--metrics_num_devices"):
        estimate.throughput_from_metrics(path)


def test_memory_estimate_follows_the_stated_formula():
    base = estimate.MODEL_PRESETS["base"]
    params = estimate.count_parameters(base)
    m = estimate.estimate_memory(base, batch_size=8, seq_length=128, max_predictions_per_seq=20,
                                 precision="fp32", num_accumulation_steps=1)
    per_layer_half = 34 * 128 * 8 * 768 + 5 * 12 * 128 * 128 * 8
    assert m.weights == 4 * params and m.gradients == 4 * params
    assert m.optimizer_slots == 8 * params and m.accumulation == 0
    assert m.activations == 12 * per_layer_half * 2 + 8 * 20 * 30522 * 8
    half = estimate.estimate_memory(base, 8, 128, 20, "fp16", num_accumulation_steps=4)
    assert half.weights == 6 * params and half.accumulation == 4 * params
    assert half.activations == 12 * per_layer_half + 8 * 20 * 30522 * 8


def test_cli_prints_time_cost_and_assumption():
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--model=base", "--max_seq_length=128",
                        "--corpus_tokens=3.2e9", "--epochs=2", "--num_devices=4",
                        "--sequences_per_second=100", "--efficiency=0.8",
                        "--price_per_device_hour=3"])
    out = proc.stdout
    # 3.2e9 * 2 / 128 = 5e7 sequences at 4 * 100 * 0.8 = 320/s: 156250 s = 43.40 h.
    assert "training: 5e+07 sequences (3.2e+09 tokens x 2 epochs / 128 tokens per sequence)" in out
    assert ("assumption: linear data-parallel scaling over 4 device(s) x efficiency 0.8 = 320 "
            "sequences/s") in out
    assert "time to train: 43.40 h, 173.6 device-hours" in out
    assert "cost: 520.83 at 3 per device-hour" in out


def test_cli_errors_name_the_flag(tmp_path):
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--model=base", "--num_sequences=1e6",
                        f"--metrics_file={tmp_path}/missing.jsonl"], check=False)
    assert proc.returncode == 2
    assert f"--metrics_file={tmp_path}/missing.jsonl: file not found" in proc.stderr
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--num_sequences=1e6",
                        "--sequences_per_second=5"], check=False)
    assert proc.returncode == 2 and "--bert_config_file" in proc.stderr


def test_the_estimate_takes_a_config_and_counts_the_training_one_way(capsys):
    config = estimate.EstimateConfig(model="tiny", num_train_steps=100, global_batch_size=256,
                                     sequences_per_second=50.0)
    assert estimate.print_estimate(config).num_sequences == 25600
    assert "training: 2.56e+04 sequences (100 steps x 256 sequences)" in capsys.readouterr().out
    with pytest.raises(estimate.EstimateError, match="exactly one way.*got --num_sequences, "
                                                     "--corpus_tokens"):
        estimate.print_estimate(estimate.EstimateConfig(
            model="tiny", num_sequences=1e6, corpus_tokens=1e9, sequences_per_second=50.0))
    with pytest.raises(estimate.EstimateError, match="--num_train_steps needs --global_batch_size"):
        estimate.print_estimate(estimate.EstimateConfig(model="tiny", num_train_steps=100,
                                                        sequences_per_second=50.0))


def _readme_command(start):
    """The README's command line that starts with `start`, its continuation lines joined."""
    lines = (REPO / "README.md").read_text().split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    words = []
    for line in lines[first:]:
        words += shlex.split(line.rstrip("\\"))
        if not line.endswith("\\"):
            return words


def test_readme_estimate_example_runs_and_bad_inputs_are_named(tmp_path):
    run_dir = tmp_path / "runs" / "phase1"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "sequences_per_second": 400.0, "num_ranks": 4}) + "\n"
        for s in (1, 2, 3)))
    estimate.MODEL_PRESETS["base"].to_json_file(run_dir / "bert_config.json")
    command = _readme_command("python -m bert_tf estimate")
    proc = run_command([PYTHON, *command[1:]], cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--model=base", "--num_sequences=1e6",
                        f"--metrics_file={run_dir}"], check=False)
    assert proc.returncode == 2 and f"--metrics_file={run_dir} is a directory" in proc.stderr
    with pytest.raises(estimate.EstimateError, match="positive and finite.*nan"):
        estimate.print_estimate(estimate.EstimateConfig(model="tiny", num_sequences=float("nan"),
                                                        sequences_per_second=50.0))
