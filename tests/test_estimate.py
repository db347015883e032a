"""bert_tf.tools.estimate and what it builds on (model_size, hardware, performance, plan):
the arithmetic, checked against numbers worked out by hand, and the command line."""

import dataclasses
import json
import math
import shlex

import pytest
from conftest import PYTHON, REPO, bench_module, run_command

from bert_tf.model.config import BertConfig
from bert_tf.tools import device_memory, estimate, hardware, model_size, performance, plan, recipe

BASE, LARGE = model_size.MODEL_PRESETS["base"], model_size.MODEL_PRESETS["large"]


def test_parameter_counts_match_published_bert_sizes():
    # Google: BERT-base 110M, BERT-large 340M (with the pretraining heads).
    assert model_size.count_parameters(BASE) == 110_106_428
    assert model_size.count_parameters(LARGE) == 336_226_108


def test_parameter_count_by_hand_for_a_tiny_model():
    config = BertConfig(vocab_size=10, hidden_size=4, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8, max_position_embeddings=6, type_vocab_size=2)
    embeddings = (10 + 6 + 2) * 4 + 2 * 4                  # 80
    layer = 4 * (16 + 4) + 2 * 4 + (32 + 8) + (32 + 4) + 2 * 4  # 172
    heads = (16 + 4) + (16 + 4 + 8) + 10 + (8 + 2)         # pooler, MLM transform+bias, NSP
    assert model_size.count_parameters(config) == embeddings + layer + heads == 320


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


def test_training_flops_by_hand_for_bert_base_and_large():
    # Per layer 2*s*(4H^2 + 2*H*I) + 4*s^2*H, plus the pooler 2H^2 and the MLM head
    # 2*P*(H^2 + H*V) on the predicted positions; training = 3 x forward.
    base_layer = 2 * 128 * (4 * 768**2 + 2 * 768 * 3072) + 4 * 128**2 * 768
    base = 3 * (12 * base_layer + 2 * 768**2 + 2 * 20 * (768**2 + 768 * 30522))
    assert model_size.training_flops_per_sequence(BASE, 128, 20) == base == 69_928_980_480
    large_layer = 2 * 512 * (4 * 1024**2 + 2 * 1024 * 4096) + 4 * 512**2 * 1024
    large = 3 * (24 * large_layer + 2 * 1024**2 + 2 * 80 * (1024**2 + 1024 * 30522))
    assert model_size.training_flops_per_sequence(LARGE, 512, 80) == large == 1_020_534_128_640


def hand_count(config, seq, predictions, batch, xla):
    """Bytes one fp16 training step keeps, tensor by tensor as docs/memory.md lists them:
    (name, elements per sequence, bytes per element), a layer's tensors x L."""
    h, i, a, v = (config.hidden_size, config.intermediate_size, config.num_attention_heads,
                  config.vocab_size)
    tokens, scores = seq, a * seq * seq
    layer = [("input x, query, key, value, context, attention LayerNorm output", 6 * tokens * h, 2),
             ("2 hidden dropout masks (bool)", 2 * tokens * h, 1),
             ("attention probabilities (fp16 softmax output)", scores, 2),
             ("attention dropout mask (bool)", scores, 1),
             ("dropped probabilities (fp16 copy, the context matmul's input)", scores, 2)]
    layer += [("GELU input and output (its gradient recomputes from the input)",
               2 * tokens * i, 2)]
    if xla:
        layer += [("2 LayerNorm inputs (float32)", 2 * tokens * h, 4)]
    else:
        layer += [("2 LayerNorms x input, x - mean, normalised (float32)", 6 * tokens * h, 4)]
    once = [("embeddings LayerNorm (float32 x3)", 3 * tokens * h, 4),
            ("embeddings dropout mask (bool)", tokens * h, 1),
            ("MLM transform input, GELU input and output, LayerNorm output",
             4 * predictions * h, 2),
            ("MLM LayerNorm (float32 x3)", 3 * predictions * h, 4),
            ("MLM float32 logits and their gradient", 2 * predictions * v, 4),
            ("one layer's backward: float32 probs gradient, fp16 scores gradient", scores, 6)]
    per_sequence = (config.num_hidden_layers * sum(n * b for _, n, b in layer)
                    + sum(n * b for _, n, b in once))
    return per_sequence, batch * per_sequence


def test_memory_estimate_matches_the_hand_count_in_docs_memory():
    # docs/memory.md's four cases: (config, seq, predictions, batch, xla) -> activation bytes
    # per sequence and GiB in all with LAMB, fp16 and accumulation.
    cases = [(LARGE, 128, 20, 64, False, 209_896_512, 20.4),
             (LARGE, 128, 20, 64, True, 159_564_864, 17.4),
             (BASE, 512, 80, 32, False, 488_296_704, 17.808),
             (BASE, 512, 80, 32, True, 412_799_232, 15.558)]
    for config, seq, predictions, batch, xla, per_sequence, gib in cases:
        assert hand_count(config, seq, predictions, batch, xla)[0] == per_sequence
        assert model_size.activation_bytes_per_sequence(
            config, seq, predictions, "fp16", use_xla=xla) == per_sequence
        m = model_size.estimate_memory(config, batch, seq, predictions, "fp16", 128, xla)
        params = model_size.count_parameters(config)
        assert (m.weights, m.gradients, m.optimizer_slots, m.accumulation, m.workspace) == (
            6 * params, 4 * params, 8 * params, 4 * params, model_size.GIB)
        assert m.activations == batch * per_sequence
        assert round(m.total / 2**30, 3) == gib
    # fp32: 4-byte activations, no half weights; no accumulation buffer without accumulating.
    assert model_size.estimate_memory(BASE, 8, 128, 20, "fp32").weights == 4 * \
        model_size.count_parameters(BASE)
    assert model_size.estimate_memory(BASE, 8, 128, 20, "fp32").accumulation == 0


def test_attention_probabilities_are_counted_in_the_dtype_the_model_keeps():
    """The probabilities a TransformerLayer hands its softmax gradient and dropout are in
    attention_probs_dtype, the one place the memory estimate reads their size from: a
    change to what the model keeps fails here until that place says so."""
    import tensorflow as tf

    from bert_tf.model import modeling
    from bert_tf.model.config import DTYPE_BYTES, attention_probs_dtype

    config = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16)
    layer = modeling.TransformerLayer(config, 0)
    for precision, dtype in (("fp32", tf.float32), ("fp16", tf.float16), ("bf16", tf.bfloat16)):
        _, probs = layer(tf.zeros([4, 8], dtype), tf.zeros([1, 1, 1, 4]), 1, 4,
                         modeling._no_dropout)
        assert probs.dtype.name == attention_probs_dtype(dtype.name), precision
        # The estimate's bytes per attention element follow it: probs + bool mask + dropped.
        k = 4 if precision == "fp32" else 2
        one = model_size.activation_bytes_per_sequence(config, 4, 1, precision)
        more = model_size.activation_bytes_per_sequence(
            dataclasses.replace(config, num_hidden_layers=2), 4, 1, precision)
        layer_tokens = 4 * (6 * 8 * k + 2 * 8 + 6 * 4 * 8 + 2 * 16 * k)
        assert more - one == layer_tokens + 2 * 16 * (DTYPE_BYTES[probs.dtype.name] + 1 + k)


def test_tensorflow_gets_the_gpu_less_context_and_reserve():
    v100 = hardware.GPUS["v100-32gb"]
    # 32,510 MiB - 1,024 context - max(TF's 1,050 for 7.x, the Dockerfile's 2,048).
    assert plan.gpu_memory(v100).allocator_bytes == (32510 - 1024 - 2048) * 2**20
    assert "Dockerfile" in plan.gpu_memory(v100).describe()
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"TF_DEVICE_MIN_SYS_MEMORY_IN_MB={device_memory.DOCKERFILE_RESERVE_MIB}" in dockerfile
    # TensorFlow's own reserve by compute capability (gpu_device.cc MinSystemMemory).
    assert [device_memory.tensorflow_reserve_mib(30000, cc) for cc in (6, 7, 8, 9, None)] == [
        500, 1050, 1536, 1800, 1800]
    assert device_memory.tensorflow_reserve_mib(1500, 8) == 225
    bare = device_memory.device_memory(32510, 7, environ={})
    assert bare.allocator_bytes == (32510 - 1024 - 1050) * 2**20
    assert device_memory.device_memory(32510, 7, {"TF_DEVICE_MIN_SYS_MEMORY_IN_MB": "4096"}) \
        .reserve_mib == 4096
    # Never more than TensorFlow logged for its allocator on real GPUs without a reserve
    # variable ("Created device ... with N MB memory", docs/memory.md), and within 3.5%.
    logged = {"v100-32gb": 30976, "t4": 13627, "a100-40gb": 38068, "l4": 20549,
              "h100-sxm": 78763}
    for name, mib in logged.items():
        gpu = hardware.GPUS[name]
        modelled = device_memory.device_memory(gpu.memory_mib, gpu.cc_major, {}).allocator_bytes
        assert 0.965 * mib * 2**20 <= modelled <= mib * 2**20, name


def test_recipes_fit_the_32gb_gpus_they_name_and_nvidias_batches_fit_the_estimate():
    v100 = plan.gpu_memory(hardware.GPUS["v100-32gb"]).allocator_bytes
    for name in ("bert_large_phase1", "bert_large_phase2", "bert_base_phase1",
                 "bert_base_phase2"):
        r = recipe.with_recipe(estimate.EstimateConfig(recipe=f"launch/recipes/{name}.flags"))
        config = model_size.load_model_config(r.bert_config_file)
        m = model_size.estimate_memory(config, r.train_batch_size, r.max_seq_length,
                                       r.max_predictions_per_seq, r.precision,
                                       r.num_accumulation_steps, r.use_xla)
        assert m.total <= v100, name
    # The estimate is not too pessimistic: every per-GPU batch NVIDIA trained BERT-large with
    # (bench/estimate_vs_published.py's rows, XLA on) fits it.
    published = bench_module("estimate_vs_published")
    for row in published.published_rows():
        gpu = hardware.GPUS[published.SYSTEMS[row.system].gpu]
        assert model_size.estimate_memory(
            LARGE, row.batch, row.seq, 20 if row.seq == 128 else 80, row.precision,
            row.accumulation, True).total <= plan.gpu_memory(gpu).allocator_bytes, row


def test_largest_batch_is_the_last_that_fits():
    memory = 40 * model_size.GIB
    b = model_size.largest_batch(LARGE, memory, 128, 20, "fp16", use_xla=True)
    assert model_size.estimate_memory(LARGE, b, 128, 20, "fp16", 2, True).total <= memory
    assert model_size.estimate_memory(LARGE, b + 1, 128, 20, "fp16", 2, True).total > memory


def test_presets_parse_and_are_complete():
    for gpu in hardware.GPUS.values():
        assert gpu.architecture in performance.GENERATION
        assert 0 < gpu.fp32_tflops < gpu.fp16_tflops and gpu.memory_gb > 0 and gpu.memory_gb_s > 0
        assert gpu.link_gb_s > 0 and gpu.pcie_gen in hardware.PCIE_GB_S
        for precision in ("fp32", "fp16") + (("bf16",) if gpu.bf16_tflops else ()):
            assert performance.efficiency_class(gpu, precision) in performance.COMPUTE_EFFICIENCY
    for name, instance in hardware.INSTANCES.items():
        assert hardware.get_instance(name.upper()) is instance
        assert instance.gpu in hardware.GPUS and instance.gpus >= 1 and instance.vcpus >= 1
        assert instance.network_gbps > 0 and instance.price_per_hour > 0
        assert instance.source.startswith("https://")
    wanted = {"p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "g4dn.xlarge", "g4dn.12xlarge",
              "g5.xlarge", "p4d.24xlarge", "p5.48xlarge", "a2-highgpu-8g", "a3-highgpu-8g",
              "ND96asr_v4", "ND96isr_H100_v5"}
    assert wanted <= set(hardware.INSTANCES)
    assert {"v100-16gb", "v100-32gb", "t4", "a10g", "a100-40gb", "a100-80gb", "h100-sxm",
            "h200-sxm", "l4"} <= set(hardware.GPUS)
    with pytest.raises(hardware.HardwareError, match="no bfloat16"):
        hardware.GPUS["v100-32gb"].peak_tflops("bf16")
    with pytest.raises(hardware.HardwareError, match="--instance=p9: unknown"):
        hardware.get_instance("p9")


def test_allreduce_by_hand():
    # A ring over all 16 GPUs of 2 p4d nodes: 2(N-1)/N x bytes at the slowest hop, here the
    # 400 Gbps RDMA network at 80% (NVLink: 300 GB/s at 80%), plus per fusion buffer 2(g-1)
    # latencies inside a node and 2 log2(n) across; one node: NVLink paces it.
    node = plan.resolve_hardware(instance="p4d.24xlarge")
    size = 2 * model_size.count_parameters(LARGE)  # fp16 gradients
    messages = math.ceil(size / performance.FUSION_BUFFER_BYTES)
    assert performance.ring_bandwidth(node.cluster(2)) == ("400 Gbps RDMA network", 40e9)
    assert performance.allreduce_seconds(size, node.cluster(2)) == pytest.approx(
        30 / 16 * size / 40e9 + messages * (14 * 10e-6 + 2 * 30e-6))
    assert performance.allreduce_seconds(size, node.cluster(1)) == pytest.approx(
        14 / 8 * size / 240e9 + 14 * messages * 10e-6)
    assert performance.allreduce_seconds(size, plan.resolve_hardware(gpu="t4").cluster(1)) == 0


def phase1_workload(batch=64):
    return performance.Workload(LARGE, 128, 20, batch, "fp16", use_xla=True)


def test_scaling_table_is_monotone_in_node_count():
    node = plan.resolve_hardware(instance="p4d.24xlarge")
    rows = plan.scaling_table(phase1_workload(), node, 65536, 1e8, max_nodes=128)
    assert [r.num_nodes for r in rows] == [1, 2, 4, 8, 16, 32, 64, 128]
    for a, b in zip(rows, rows[1:], strict=False):
        assert b.step.sequences_per_second > a.step.sequences_per_second
        assert b.seconds < a.seconds and b.efficiency <= a.efficiency and b.cost >= a.cost
        assert b.accumulation * b.batch_size * b.num_gpus == 65536
    assert rows[-1].batch_size == 64 and rows[-1].accumulation == 1
    # Accumulation amortises the allreduce: the suggested one keeps it under 5%.
    w, cluster = phase1_workload(), node.cluster(8)
    needed = performance.negligible_accumulation(w, cluster)
    step = performance.step_time(w, cluster, needed)
    assert (step.update + step.allreduce) / step.seconds <= 0.05
    step = performance.step_time(w, cluster, needed - 1)
    assert (step.update + step.allreduce) / step.seconds > 0.05


def test_measured_throughput_overrides_the_model():
    node = plan.resolve_hardware(gpu="a100-80gb", gpus_per_node=8)
    modelled = plan.plan_row(phase1_workload(), node, 1, 65536, 1e8)
    measured = plan.plan_row(phase1_workload(), node, 1, 65536, 1e8, measured=100.0)
    assert modelled.step.compute == pytest.approx(128 * performance.micro_step_seconds(
        phase1_workload(), node.gpu))
    assert measured.step.compute == pytest.approx(128 * 64 / 100.0)
    assert measured.step.sequences_per_second < 8 * 100.0 < modelled.step.sequences_per_second


def test_a_gpu_without_instance_has_no_price_unless_given():
    assert plan.resolve_hardware(gpu="t4").price_per_node_hour is None
    assert plan.resolve_hardware(gpu="t4", gpus_per_node=4,
                                 price_per_device_hour=0.5).price_per_node_hour == 2.0
    assert plan.resolve_hardware(instance="g5.xlarge", price_per_hour=0.7).price_per_node_hour \
        == 0.7


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


def test_cli_plans_a_recipe_on_cloud_instances():
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--instance=p4d.24xlarge",
                        "--num_nodes=4", "--recipe=launch/recipes/bert_large_phase1.flags"])
    out = proc.stdout
    assert "training: 4.612e+08 sequences (7038 steps x 65536 sequences)" in out
    assert "hardware: 4 node(s) x p4d.24xlarge: 8 x a100-40gb" in out
    assert "batch 64, fp16, XLA on" in out
    assert ("of a100-40gb's 36.6 GiB for TensorFlow = 40,536 MiB - CUDA context 1,024 - reserve "
            "2,048 (the larger of TensorFlow's 1536 MiB for compute capability 8.x and the "
            "Dockerfile's TF_DEVICE_MIN_SYS_MEMORY_IN_MB=2048); largest batch that fits: 193 with "
            "XLA, 146 without") in out
    assert "allreduce: 1,345 MB of fp32 gradients per update in a ring of 32 GPUs, paced by the " \
        "400 Gbps RDMA network at 40.0 GB/s" in out
    for line in ("scaling efficiency: ", "time to train: ", "over node counts (global batch 65536)"):
        assert line in out, out
    table = out.split("over node counts")[1].splitlines()[2:]
    assert [int(r.split()[0]) for r in table] == [1, 2, 4, 8, 16, 32, 64]
    # A measured throughput replaces the model; the price can be overridden.
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--gpu=v100-32gb",
                        "--gpus_per_node=4", "--recipe=launch/recipes/bert_large_phase2.flags",
                        "--sequences_per_second=30", "--price_per_hour=10", "--max_nodes=2"])
    assert "per GPU: 30.0 sequences/s at batch 16" in proc.stdout
    assert "throughput confidence: measured: --sequences_per_second" in proc.stdout
    assert "$10 per node-hour" in proc.stdout
    # A recipe batch that does not fit the GPU is estimated at the largest that does.
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--instance=g4dn.12xlarge",
                        "--recipe=launch/recipes/bert_large_phase2.flags", "--max_nodes=1"])
    # (12.0 GiB - 22P - 1 GiB workspace) / 1,034,948,864 bytes per sequence = 4.27: 4 fit,
    # and 32768 / 4 GPUs = 8192 sequences per GPU split into 2048 x batch 4.
    assert ("batch: 16 per GPU does not fit in t4's 12.0 GiB for TensorFlow; estimating "
            "--train_batch_size=4" in proc.stdout)
    assert "2048 x batch 4" in proc.stdout
    # A batch that does not divide the GPU's share falls to one that does (launch.py would
    # refuse a global batch of 32,772 = 4 x 2731 x 3).
    assert plan.split_global_batch(32768, 4, 3) == (2, 4096)
    assert plan.split_global_batch(65536, 24, 64) == (64, 43)  # no even split: the nearest


def test_cli_hardware_errors_name_the_flag(tmp_path):
    def error(*args):
        proc = run_command([PYTHON, "-m", "bert_tf", "estimate", *args], check=False)
        assert proc.returncode == 2, proc.stdout
        return proc.stderr

    assert "--instance=p9.large: unknown instance type" in error(
        "--instance=p9.large", "--recipe=launch/recipes/bert_base_phase1.flags")
    assert f"--recipe={tmp_path}/none.flags: cannot read it" in error(
        "--gpu=t4", f"--recipe={tmp_path}/none.flags")
    assert "v100-16gb has no bfloat16 tensor cores" in error(
        "--gpu=v100-16gb", "--recipe=launch/recipes/bert_base_phase1.flags", "--precision=bf16")
    assert "need the per-GPU batch: --train_batch_size or --recipe" in error(
        "--gpu=t4", "--model=base", "--num_sequences=1e6")


def test_recipe_fills_what_the_flags_leave_unset(tmp_path):
    config = estimate.EstimateConfig(recipe="launch/recipes/bert_large_phase2.flags",
                                     max_seq_length=384, use_xla=False)
    filled = recipe.with_recipe(config)
    assert (filled.max_seq_length, filled.use_xla) == (384, False)  # the flags win
    assert (filled.train_batch_size, filled.num_accumulation_steps, filled.num_train_steps,
            filled.global_batch_size, filled.precision, filled.max_predictions_per_seq) == (
        16, 256, 1563, 32768, "fp16", 80)
    assert filled.bert_config_file == "launch/configs/bert_large_uncased_config.json"
    assert filled.fp16_allreduce is False  # not in the recipe: run_pretraining.py's default
    # Another way of counting the training drops the recipe's steps; --model its config.
    other = recipe.with_recipe(dataclasses.replace(config, num_sequences=1e6, model="base"))
    assert other.num_train_steps is None and other.bert_config_file is None
    bad = tmp_path / "bad.flags"
    bad.write_text("--train_batch_size=lots\n")
    with pytest.raises(recipe.RecipeError, match=f"--recipe={bad}: --train_batch_size"):
        recipe.with_recipe(estimate.EstimateConfig(recipe=str(bad)))


def test_a_node_with_few_cpus_is_input_bound():
    gpu = hardware.GPUS["h100-sxm"]
    cluster = performance.Cluster(gpu, 8, 1, vcpus_per_node=1)
    step = performance.step_time(phase1_workload(), cluster, 4, measured_sequences_per_second=1e5)
    assert step.bottleneck == "input"
    assert step.sequences_per_second == performance.INPUT_SEQUENCES_PER_CPU_S
    roomy = dataclasses.replace(cluster, vcpus_per_node=192)
    assert performance.step_time(phase1_workload(), roomy, 4).bottleneck == "compute"


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
    command = [word.replace("runs/phase1", str(run_dir))
               for word in _readme_command("python -m bert_tf estimate")]
    proc = run_command([PYTHON, *command[1:]], check=False)  # from the repository root
    assert proc.returncode == 0, proc.stderr
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--model=base", "--num_sequences=1e6",
                        f"--metrics_file={run_dir}"], check=False)
    assert proc.returncode == 2 and f"--metrics_file={run_dir} is a directory" in proc.stderr
    with pytest.raises(estimate.EstimateError,
                       match="--num_sequences must be a finite number > 0, got nan"):
        estimate.print_estimate(estimate.EstimateConfig(model="tiny", num_sequences=float("nan"),
                                                        sequences_per_second=50.0))


def test_every_number_is_checked_and_the_error_names_the_flag(tmp_path):
    """Issue 37: negative, zero, nan and inf numbers gave negative times and costs, "nan days",
    --gpus_per_node=0 meant 8; each is now refused naming the flag (the shared check,
    bert_tf.data.numeric_flags.check_number)."""
    hardware_run = dict(gpu="v100-32gb", recipe="launch/recipes/bert_large_phase1.flags")
    plain_run = dict(model="base", num_sequences=1e6, sequences_per_second=5.0)
    for flag, bounds in estimate.NUMERIC_FLAGS.items():
        bad_values = [math.nan, math.inf, -1]
        if "at_least" not in bounds or bounds["at_least"] > 0:
            bad_values.append(0)
        if "at_most" in bounds:
            bad_values.append(bounds["at_most"] + 0.5)
        for bad in bad_values:
            for run, config in ((estimate.print_estimate, plain_run),
                                (estimate.print_hardware_estimate, hardware_run)):
                with pytest.raises(estimate.EstimateError,
                                   match=rf"^--{flag} must be .*, got {bad!r}$"):
                    run(estimate.EstimateConfig(**{**config, flag: bad}))
    # A recipe's numbers and precision are checked the same way, naming the recipe.
    bad = tmp_path / "bad.flags"
    bad.write_text("--train_batch_size=-4\n")
    with pytest.raises(estimate.EstimateError, match=f"^--recipe={bad}: --train_batch_size must "
                                                     "be an integer >= 1, got -4$"):
        estimate.print_hardware_estimate(estimate.EstimateConfig(gpu="t4", recipe=str(bad)))
    bad.write_text("--precision=fp64\n")
    with pytest.raises(recipe.RecipeError, match="--precision: 'fp64' is not one of fp32"):
        estimate.print_hardware_estimate(estimate.EstimateConfig(gpu="t4", recipe=str(bad)))
    bad.write_bytes(b"\x80\x81\xfe\xff--train_batch_size=4\n")
    with pytest.raises(recipe.RecipeError, match="not a text flagfile"):
        estimate.print_hardware_estimate(estimate.EstimateConfig(gpu="t4", recipe=str(bad)))
    # More GPUs than the global batch: refused, not silently a larger batch.
    with pytest.raises(estimate.EstimateError, match="= 256 GPUs exceed the global batch of 128"):
        estimate.print_hardware_estimate(estimate.EstimateConfig(
            instance="p4d.24xlarge", num_nodes=32, model="base", num_sequences=1e6,
            train_batch_size=8, global_batch_size=128))


def test_metrics_files_with_bad_throughputs_are_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for line, message in ((b'{"sequences_per_second": null, "num_ranks": 1}\n', "is null"),
                          (b'{"sequences_per_second": "fast", "num_ranks": 1}\n',
                           "sequences_per_second must be a finite number > 0, got 'fast'"),
                          (b'{"sequences_per_second": -3, "num_ranks": 1}\n', "> 0, got -3"),
                          (b'{"sequences_per_second": 3, "num_ranks": 0}\n',
                           "num_ranks must be an integer >= 1, got 0"),
                          (b'[1, 2]\n', "not a JSON object"),
                          (b'\xff\xfe\x00binary\n', "not a text file")):
        path.write_bytes(line)
        with pytest.raises(estimate.EstimateError, match=message):
            estimate.throughput_from_metrics(path, num_devices=1)
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--gpu=t4", "--gpus_per_node=0",
                        "--recipe=launch/recipes/bert_base_phase1.flags"], check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "estimate: error: --gpus_per_node must be an integer >= 1, got 0" in proc.stderr


def test_each_gpu_preset_says_how_sure_its_throughput_is():
    """Issue 35: T4, A10G, L4, H100 and H200 borrowed V100's or A100's efficiency silently.
    Each preset now says measured / fitted / borrowed and why; the fitted ones are exactly
    those bench/estimate_vs_published.py has published figures for."""
    published = bench_module("estimate_vs_published")
    training = {published.SYSTEMS[r.system].gpu for r in published.published_rows()}
    inference = {line.split()[1] for line in published.INFERENCE.strip().splitlines()}
    assert set(performance.FITTED_ON) == training | inference
    levels = {name: performance.confidence(gpu, "fp16").level
              for name, gpu in hardware.GPUS.items()}
    assert {n for n, level in levels.items() if level == "borrowed"} == {
        "a10g", "l4", "h100-sxm", "h200-sxm"}
    assert performance.confidence(hardware.GPUS["t4"], "fp16", "--metrics_file=m").level \
        == "measured"
    # T4's efficiency makes the estimate's T4/V100 ratio NVIDIA's published one (it was
    # 0.547 against 0.260 with Volta's borrowed); refitting reproduces the constants.
    saved = dict(performance.COMPUTE_EFFICIENCY)
    try:
        published.fit_turing()
        for key in ("turing-half", "turing-fp32"):
            assert performance.COMPUTE_EFFICIENCY[key] == pytest.approx(saved[key], abs=6e-4)
    finally:
        performance.COMPUTE_EFFICIENCY.update(saved)
    assert published.training_ratio("t4") == pytest.approx(published.published_t4_ratio("fp16"),
                                                            rel=0.01)
    proc = run_command([PYTHON, "-m", "bert_tf", "estimate", "--list_gpus"])
    lines = proc.stdout.splitlines()[1:]
    assert len(lines) == len(hardware.GPUS)
    for name, level in levels.items():
        line = next(line for line in lines if line.split()[0] == name)
        assert f" {level}: " in line and ("measure with bench/gpu_check.sh" in line) == (
            level == "borrowed")
