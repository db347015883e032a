"""Pretraining: equivalence of rank/accumulation layouts under real Horovod,
fp16 overflow skipping, learning, and bad input (kill-and-resume: test_preemption.py).

Data: TFRecords made by create_pretraining_data.py from a slice of the
Gutenberg corpus (session fixture). Model: L2 H64 A2 I128, no dropout (so
layouts are comparable) except where dropout masks are the point.
"""

import collections
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tiny
from conftest import PYTHON, REPO, run_command
from tiny import ONE_THREAD, PREDICTIONS, SEQ, VENV_BIN, checkpoint_values

from bert_tf.data import input_pipeline, records
from bert_tf.data.files import InputDataError
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig
from bert_tf.train import distributed, loop, run_setup
from bert_tf.train.config import PretrainingConfigError
from bert_tf.train.report import OutputDirError

WORKER = REPO / "tests" / "training_worker.py"
PROCESS_RUN = dict(train_batch_size=8, num_train_steps=40, num_warmup_steps=4, learning_rate=2e-3,
                   save_checkpoints_steps=10, log_every_n_steps=5, peer_timeout_seconds=60)


@pytest.fixture(scope="session")
def data(tmp_path_factory, shared_data):
    """Train/eval TFRecords from Emma (disjoint parts) and a tiny bert_config: made once per
    run, however many modules import this fixture (test_faults.py, test_preemption.py do)."""
    return tiny.pretraining_data(tmp_path_factory, shared_data)


@pytest.fixture(scope="module")
def unmasked_train(data, tmp_path_factory):
    """About 85 unmasked records (create_pretraining_data.py --dynamic_masking)."""
    root = tmp_path_factory.mktemp("unmasked_data")
    (root / "train.txt").write_text((data.root / "train.txt").read_text()[:12_000])
    tiny.make_records([root / "train.txt"], [root / "train.tfrecord"], data.vocab, 1,
                      "--dynamic_masking")
    return root / "train.tfrecord"


def dropout_config(directory):
    return tiny.write_bert_config(directory / "bert_config_dropout.json", dropout=0.1)


def pretraining_command(data, output_dir, **flags):
    settings = tiny.training_settings(**{"bert_config_file": data.config,
                                         "input_files": data.train, "output_dir": output_dir,
                                         **PROCESS_RUN, **flags})
    return [PYTHON, REPO / "run_pretraining.py", *tiny.as_flags(settings)]


def horovodrun(command):
    return [VENV_BIN / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", *command]


def mpirun(command):
    exports = [arg for name in ONE_THREAD for arg in ("-x", name)]
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", *exports, *command]


# ------------------------------------------------------------------ equivalence


@pytest.fixture(scope="module")
def two_rank_worker(data, tmp_path_factory):
    """One horovodrun of tests/training_worker.py (its three parts, see there)."""
    out = tmp_path_factory.mktemp("worker")
    proc = run_command(horovodrun([PYTHON, WORKER, out, data.config, data.train]),
                       env=ONE_THREAD, timeout=400, check=False)
    return SimpleNamespace(out=out, proc=proc)


@pytest.mark.ngc
def test_two_ranks_and_accumulation_equal_one_double_batch(data, two_rank_worker):
    import training_worker as worker

    distributed.init()  # one rank, in this process
    batches = worker.full_batches(str(data.train))
    whole = worker.build_state(str(data.config), str(data.train),
                               train_batch_size=2 * worker.HALF_BATCH)
    initial = worker.flat_weights(whole)
    accumulated = worker.build_state(str(data.config), str(data.train),
                                     num_accumulation_steps=2)
    for features in batches:
        whole.update([features])
        accumulated.update([worker.rows(features, 0), worker.rows(features, 1)])
    single = worker.flat_weights(whole)
    assert np.abs(single - initial).max() > 1e-3  # the updates did move the weights

    np.testing.assert_allclose(worker.flat_weights(accumulated), single, atol=2e-6, rtol=0)
    rank0 = np.load(two_rank_worker.out / "rank0.npy")
    rank1 = np.load(two_rank_worker.out / "rank1.npy")
    np.testing.assert_array_equal(rank0, rank1)  # every rank applies the same update
    np.testing.assert_allclose(rank0, single, atol=2e-6, rtol=0)


@pytest.mark.ngc
def test_fp16_overflow_skips_exactly_that_update_on_every_rank(two_rank_worker):
    for rank in (0, 1):
        log = json.loads((two_rank_worker.out / f"overflow{rank}.json").read_text())
        assert [u["finite"] for u in log] == [True, False, True], log
        assert [u["weights_changed"] for u in log] == [True, False, True], log
        assert [u["global_step"] for u in log] == [1, 1, 2], log
        assert log[1]["loss_scale_after"] == log[1]["loss_scale_used"] / 2, log
        assert log[2]["loss_scale_used"] == log[1]["loss_scale_after"], log
    np.testing.assert_array_equal(np.load(two_rank_worker.out / "overflow0.npy"),
                                  np.load(two_rank_worker.out / "overflow1.npy"))


@pytest.mark.ngc
def test_dropout_masks_differ_between_ranks_and_micro_batches(two_rank_worker):
    """The same micro-batch's local gradient, dropout 0.1: a different dropout seed at
    every (rank, input position) gives a different gradient."""
    rank0 = np.load(two_rank_worker.out / "dropout0.npy")
    rank1 = np.load(two_rank_worker.out / "dropout1.npy")
    gradients = [rank0[0], rank0[1], rank1[0], rank1[1]]
    for i, a in enumerate(gradients):
        for b in gradients[i + 1:]:
            assert np.abs(a - b).max() > 1e-4


@pytest.mark.ngc
def test_hung_rank_makes_the_job_fail_instead_of_hanging(two_rank_worker):
    proc = two_rank_worker.proc
    output = proc.stdout + proc.stderr
    assert "rank 0 done" in output and "rank 1 done" in output, output
    assert proc.returncode != 0, output
    assert "no training progress for" in output, output
    # Rank 1 prints this if it wakes from its 120 s sleep: nobody ended the job.
    assert "was not stopped" not in output, output


# -------------------------------------------------------------- dynamic masking


def _masked_positions_by_record(batches):
    """Original record (masks undone) -> the masked positions of each occurrence."""
    positions_by_record = collections.defaultdict(list)
    for batch in batches:
        batch = {name: value.numpy() for name, value in batch.items()}
        for row, ids in enumerate(batch["input_ids"]):
            valid = batch["masked_lm_weights"][row] > 0
            positions = batch["masked_lm_positions"][row][valid]
            original = ids.copy()
            original[positions] = batch["masked_lm_ids"][row][valid]
            positions_by_record[original.tobytes()].append(tuple(positions))
    return positions_by_record


def test_dynamic_masking_trains_with_new_masks_every_epoch(data, unmasked_train, tmp_path):
    config = _config(data, tmp_path / "out", input_files=str(unmasked_train),
                     dynamic_masking=True, vocab_file=str(data.vocab), train_batch_size=8,
                     num_train_steps=3, log_every_n_steps=3)
    loop.run(config)
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    assert 5 < record["masked_lm_loss"] < 12  # about ln(30522) = 10.3: masks were made and scored
    assert np.isfinite(record["loss"])

    masking = run_setup.load_dynamic_masking(config, BertConfig.from_json_file(data.config))
    num_records = sum(1 for _ in tf.data.TFRecordDataset(str(unmasked_train)))
    batches = list(run_setup.train_dataset(config, [str(unmasked_train)], 0, 1, masking)
                   .take(3 * num_records // config.train_batch_size))
    assert any((batch["input_ids"] == masking.mask_id).numpy().any() for batch in batches)
    occurrences = _masked_positions_by_record(batches).values()
    repeated = [positions for positions in occurrences if len(positions) >= 2]
    assert len(repeated) > num_records / 2
    differing = sum(positions[0] != positions[1] for positions in repeated)
    assert differing >= 0.9 * len(repeated), f"{differing} of {len(repeated)}"


@pytest.mark.ngc
def test_xla_updates_match_the_uncompiled_ones(data, tmp_path):
    """--use_xla compiles forward/backward and the optimizer apply (Horovod ops stay out):
    same weights as without XLA after a few LAMB updates, to float rounding."""
    weights = {}
    for use_xla in (False, True):
        output_dir = tmp_path / f"xla_{use_xla}"
        loop.run(_config(data, output_dir, use_xla=use_xla, num_train_steps=3,
                             save_checkpoints_steps=3, optimizer_type="lamb"))
        weights[use_xla] = checkpoint_values(output_dir / "model.ckpt-3")
    assert weights[True].keys() == weights[False].keys()
    moved = 0
    for name, value in weights[False].items():
        np.testing.assert_allclose(weights[True][name], value, rtol=1e-4, atol=1e-5, err_msg=name)
        moved += name.endswith("/adam_m") and np.abs(value).max() > 0
    assert moved > 10  # the optimizer really ran (its first moments are non-zero)


def test_dynamic_masking_flag_errors(data, unmasked_train, tmp_path):
    dynamic = dict(input_files=str(unmasked_train), dynamic_masking=True)
    with pytest.raises(PretrainingConfigError, match="--vocab_file is required with "
                                                     "--dynamic_masking"):
        loop.run(_config(data, tmp_path / "out", **dynamic))
    with pytest.raises(loop.TrainingError, match=r"--vocab_file=.* has 30522 tokens but "
                                                     r"vocab_size is 1000"):
        loop.run(_config(data, tmp_path / "out", vocab_file=str(data.vocab),
                             bert_config_file=_small_vocab_config(data, tmp_path, 1000), **dynamic))
    with pytest.raises(InputDataError, match="--input_files: .* holds masked records"):
        loop.run(_config(data, tmp_path / "out", vocab_file=str(data.vocab),
                             dynamic_masking=True))
    with pytest.raises(InputDataError, match="holds unmasked records.*--dynamic_masking"):
        loop.run(_config(data, tmp_path / "out", input_files=str(unmasked_train)))
    assert checkpoints.latest_checkpoint(tmp_path / "out") is None


# --------------------------------------------------------------------- learning


def _unigram_baseline(path):
    """Accuracy of always predicting the most frequent masked token."""
    dataset = input_pipeline.pretraining_dataset(
        str(path), batch_size=1, max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS,
        is_training=False)
    counts = {}
    for features in dataset:
        for token, weight in zip(features["masked_lm_ids"].numpy().ravel(),
                                 features["masked_lm_weights"].numpy().ravel(), strict=True):
            counts[token] = counts.get(token, 0.0) + weight
    return max(counts.values()) / sum(counts.values())


@pytest.mark.ngc
def test_bf16_with_accumulation_trains_and_evaluates(data, tmp_path):
    """40 updates of 2 x 8 sequences in bf16: the masked-LM loss falls from
    ln(30522) = 10.3 to the unigram level and held-out accuracy reaches the
    frequent-token level. (Beating the unigram baseline takes longer runs than
    a test can afford on 2 shared cores; see bench/README.md, "Convergence parity".)
    40 updates, not 100: the loss is under 7 from about update 15 (6.4 at 40, held-out 6.6 on
    the AVX512/AMX Xeon), and on a CPU without bf16 matmuls every update is emulated."""
    output_dir = tmp_path / "out"
    run_command(pretraining_command(
        data, output_dir, precision="bf16", num_accumulation_steps=2, num_train_steps=40,
        num_warmup_steps=4, learning_rate=3e-3, optimizer_type="adamw",
        save_checkpoints_steps=1000, log_every_n_steps=10, do_eval=True, eval_files=data.eval,
        max_eval_steps=20, eval_batch_size=16), env=ONE_THREAD)
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(10, 41, 10))
    assert all(np.isfinite(r["loss"]) for r in records)
    assert records[-1]["masked_lm_loss"] < 7.5  # from ln(30522) = 10.3 at initialisation
    assert (output_dir / "model.ckpt-40.index").exists()
    summary = json.loads((output_dir / "train_summary.json").read_text())
    assert summary["avg_sequences_per_second"] > 0 and summary["time_to_train_hours"] > 0

    results = json.loads((output_dir / "eval_results.json").read_text())
    baseline = _unigram_baseline(data.eval)
    print(f"held-out masked-LM loss {results['masked_lm_loss']:.3f}, accuracy "
          f"{results['masked_lm_accuracy']:.3f}, unigram baseline {baseline:.3f}")
    assert results["masked_lm_loss"] < 7.5
    assert results["masked_lm_accuracy"] > 0.5 * baseline

    from bert_tf.data.tokenization import FullTokenizer
    from bert_tf.tools import predict

    model = predict.load_model(output_dir / "bert_config.json", output_dir)
    (candidates,) = predict.predict_masked(model, FullTokenizer(data.vocab),
                                           "she was very [MASK] to see him .", top_k=3)
    assert len(candidates) == 3 and all(0 < p <= 1 for _, p in candidates)


# ------------------------------------------------------------------ bad input


def _config(data, output_dir, **overrides):
    paths = dict(bert_config_file=data.config, input_files=data.train, output_dir=output_dir)
    return tiny.training_config(**{**paths, **overrides})


def _small_vocab_config(data, tmp_path, vocab_size):
    return str(tiny.write_bert_config(tmp_path / "small_vocab.json", vocab_size=vocab_size))


def test_vocab_smaller_than_data_ids_is_caught_before_training(data, tmp_path):
    config = _config(data, tmp_path / "out",
                     bert_config_file=_small_vocab_config(data, tmp_path, 1000))
    with pytest.raises(InputDataError, match=r"token id \d+ but vocab_size is 1000"):
        loop.run(config)
    assert checkpoints.latest_checkpoint(tmp_path / "out") is None


def _rewrite_records(source, target, edit, count=None):
    with tf.io.TFRecordWriter(str(target)) as writer:
        for i, record in enumerate(tf.data.TFRecordDataset(str(source)).take(count or -1)):
            example = tf.train.Example.FromString(record.numpy())
            edit(i, example.features.feature)
            writer.write(example.SerializeToString())


def test_out_of_range_id_past_the_checked_records_fails_clearly(data, tmp_path):
    bad = tmp_path / "late_bad_id.tfrecord"

    def poison_late_records(i, feature):
        if i >= records.RECORDS_CHECKED_PER_FILE:
            feature["input_ids"].int64_list.value[1] = 40000

    _rewrite_records(data.train, bad, poison_late_records, count=64)
    config = _config(data, tmp_path / "out", input_files=str(bad), num_train_steps=20)
    with pytest.raises(loop.TrainingError, match="outside the embedding table"):
        loop.run(config)


def test_record_length_mismatch_names_file_and_lengths(data, tmp_path):
    longer = tiny.write_bert_config(tmp_path / "bert_config.json", max_position_embeddings=128)
    config = _config(data, tmp_path / "out", max_seq_length=128, bert_config_file=str(longer))
    with pytest.raises(InputDataError, match=r"--input_files: .*train.tfrecord.*expected 128"):
        loop.run(config)


def test_no_input_files_and_unwritable_output_dir(data, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        loop.main(_config(data, tmp_path / "out", input_files=str(tmp_path / "none*.rec")))
    assert exit_info.value.code == 1
    assert "no input files match" in capsys.readouterr().err

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(OutputDirError, match="--output_dir=.*not writable"):
        loop.run(_config(data, blocker / "out"))
    with pytest.raises(PretrainingConfigError, match="--do_train or --do_eval"):
        loop.run(_config(data, tmp_path / "out", do_train=False))


def test_persistent_nonfinite_loss_stops_and_keeps_the_last_good_checkpoint(data, tmp_path):
    output_dir = tmp_path / "out"
    # A good checkpoint to resume from: a fresh state saved as step 0.
    distributed.init()  # one rank, in this process
    fresh = loop.PretrainingState(BertConfig.from_json_file(data.config), _config(data, "x"))
    checkpoints.save_checkpoint(fresh.checkpoint_variables(), output_dir, 0)
    good = checkpoint_values(output_dir / "model.ckpt-0")

    nan_weights = tmp_path / "nan_weights.tfrecord"

    def poison(i, feature):
        feature["masked_lm_weights"].float_list.value[0] = float("nan")

    _rewrite_records(data.train, nan_weights, poison, count=32)
    config = _config(data, output_dir, input_files=str(nan_weights), num_train_steps=10,
                     max_nonfinite_updates=3)
    with pytest.raises(loop.TrainingError, match="3 updates in a row.*model.ckpt-0"):
        loop.run(config)
    assert checkpoints.latest_checkpoint(output_dir).endswith("model.ckpt-0")
    after = checkpoint_values(output_dir / "model.ckpt-0")
    for name, value in good.items():
        np.testing.assert_array_equal(after[name], value)


def test_elastic_flags_name_the_batch_sizes_that_work(data, tmp_path):
    with pytest.raises(PretrainingConfigError, match="--global_batch_size is required with "
                       "--elastic"):
        _config(data, tmp_path / "out", elastic=True).validate()
    with pytest.raises(PretrainingConfigError, match=r"--global_batch_size \(10\) must be a "
                       r"multiple of --train_batch_size \(4\)"):
        _config(data, tmp_path / "out", elastic=True, global_batch_size=10,
                train_batch_size=4).validate()
    config = _config(data, tmp_path / "out", elastic=True, global_batch_size=16,
                     train_batch_size=4)
    assert [config.accumulation_steps_for(n) for n in (1, 2, 4)] == [4, 2, 1]
    with pytest.raises(PretrainingConfigError, match=r"--train_batch_size x ranks = 4 x 3: "
                       r".* World sizes that can: 1, 2, 4;"):
        config.accumulation_steps_for(3)
    with pytest.raises(loop.TrainingError, match="--elastic needs horovodrun's elastic mode"):
        loop.run(config)  # not started by horovodrun --host-discovery-script


def _horovod_ops(concrete_function) -> set[str]:
    """The Horovod op types in a traced function, its branches included."""
    graph_def = concrete_function.graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return {n.op for n in nodes if n.op.startswith("Horovod")}


def test_elastic_updates_follow_the_current_world_size(monkeypatch):
    """apply_update is traced once per run, but an elastic run's world size changes: the
    accumulation divisor and whether an allreduce runs are read when it runs. (They were
    captured at the first trace: after 16 -> 8 ranks every gradient was divided by the old
    accumulation count, and a run first traced at one rank never averaged after growing.)"""
    distributed.init()
    config = tiny.training_config(bert_config_file="unused", input_files="unused",
                                  output_dir="unused", num_accumulation_steps=2)
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")  # what horovodrun's elastic mode sets
    state = loop.PretrainingState(BertConfig(**tiny.TINY_BERT), config)
    grads = [tf.ones_like(p) for p in state.params.values()]
    sums = tf.zeros([len(state.metric_names)])
    at_two = state.update_metrics(state.apply_update(grads, sums))["grad_norm"]
    state.set_accumulation_steps(4)  # e.g. half the ranks, the same global batch
    at_four = state.update_metrics(state.apply_update(grads, sums))["grad_norm"]
    assert at_four == pytest.approx(at_two / 2, rel=1e-6)
    assert state.apply_update.experimental_get_tracing_count() == 1
    # Traced at one rank, the allreduce is in the graph, behind Horovod's size at run time.
    assert {"HorovodSize", "HorovodGroupedAllreduce"} <= _horovod_ops(
        state.apply_update.get_concrete_function(grads, sums))


def test_horovod_never_shuts_down_ranks_that_wait_for_a_slow_one():
    # Horovod's stall shutdown (off by default, and in NVIDIA's BERT) was set to 300 s: a job
    # whose ranks waited that long for rank 0 writing a BERT-large checkpoint was ended.
    distributed.init()
    assert os.environ.get("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0") == "0"
