"""The budget recipe's options (docs/budget.md): masked-LM-only windows, --masked_lm_prob with
dynamic masking, --nodropout, --nonext_sentence_prediction, the triangle schedule and the
--max_train_time wall-clock budget, which ends a run with a checkpoint and the eval and which a
resume keeps. Real runs of the tiny model (tests/tiny.py) in this process."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tiny
from tiny import SEQ

from bert_tf.data import records
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig
from bert_tf.train import distributed, loop, run_setup
from bert_tf.train.config import PretrainingConfigError
from bert_tf.train.state import TRAIN_SECONDS

PREDICTIONS = 20  # room for --masked_lm_prob=0.3 at length 64


@pytest.fixture(scope="module")
def windows(shared_data, tmp_path_factory):
    """Unmasked masked-LM-only records (--nonext_sentence_prediction) of three documents of
    10,000 characters of Emma each, one line a paragraph."""
    root = tmp_path_factory.mktemp("windows")
    paragraphs = [" ".join(p.split()) for p in tiny.emma(shared_data)[:30_000].split("\n\n")]
    lines = [p for p in paragraphs if p]
    third = len(lines) // 3
    documents = ["\n".join(lines[i * third:(i + 1) * third]) for i in range(3)]
    (root / "train.txt").write_text("\n\n".join(documents) + "\n")
    tiny.make_records([root / "train.txt"], [root / "train.tfrecord"],
                      tiny.vocab_file(shared_data), 1, "--dynamic_masking",
                      "--nonext_sentence_prediction", f"--max_predictions_per_seq={PREDICTIONS}")
    tiny.write_bert_config(root / "bert_config.json", dropout=0.1)
    return root


def _read(path):
    spec = records.feature_spec(SEQ, PREDICTIONS)
    return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()}
            for r in tf.data.TFRecordDataset(str(path))]


def test_windows_are_full_single_segments_without_next_sentence_labels(windows):
    examples = _read(windows / "train.tfrecord")
    lengths = np.array([e["input_mask"].sum() for e in examples])
    assert len(examples) > 50
    assert np.sum(lengths < SEQ) <= 3  # full length but at a document's end
    sep = 102  # bert-base-uncased's [SEP]
    for example, length in zip(examples, lengths, strict=True):
        ids = example["input_ids"]
        assert ids[0] == 101 and ids[length - 1] == sep and sep not in ids[1:length - 1]
        assert not example["segment_ids"].any() and not example["next_sentence_labels"].any()


@pytest.fixture()
def budget_config(windows, shared_data, tmp_path):
    def make(**overrides):
        return tiny.training_config(**{
            "bert_config_file": windows / "bert_config.json",
            "input_files": windows / "train.tfrecord", "output_dir": tmp_path / "out",
            "dynamic_masking": True, "vocab_file": tiny.vocab_file(shared_data),
            "next_sentence_prediction": False, "dropout": False, "masked_lm_prob": 0.3,
            "max_predictions_per_seq": PREDICTIONS, "train_batch_size": 8,
            "learning_rate_schedule": "triangle", "learning_rate": 2e-3,
            "log_every_n_steps": 1, "save_checkpoints_steps": 100_000, **overrides})
    return make


def test_masked_lm_prob_sets_the_dynamic_masking_rate(budget_config, shared_data):
    config = budget_config()
    config.validate()
    masking = run_setup.load_dynamic_masking(config, BertConfig.from_json_file(
        config.bert_config_file))
    batch = next(iter(run_setup.train_dataset(config, [config.input_files], 0, 1, masking)))
    masked = batch["masked_lm_weights"].numpy().sum(axis=1)
    tokens = batch["input_mask"].numpy().sum(axis=1)
    np.testing.assert_allclose(masked, np.round(tokens * 0.3), atol=0.5)  # 19 of 64


def test_masking_rate_the_records_cannot_hold_is_refused(budget_config):
    with pytest.raises(PretrainingConfigError, match=r"--max_predictions_per_seq \(10\) caps "
                       r"--masked_lm_prob=0.4 at 10 of 64 tokens: use "
                       r"--max_predictions_per_seq=26, here and in create_pretraining_data.py"):
        budget_config(masked_lm_prob=0.4, max_predictions_per_seq=10).validate()
    budget_config(masked_lm_prob=0.4, max_predictions_per_seq=10,
                  dynamic_masking=False).validate()  # the records' own cap: doctor warns
    with pytest.raises(PretrainingConfigError, match="--max_train_time got '10 minutes'"):
        budget_config(max_train_time="10 minutes").validate()


def _metrics(output_dir):
    return [json.loads(line) for line in (Path(output_dir) / "metrics.jsonl").open()]


def test_nodropout_and_nonext_sentence_prediction_train_the_masked_lm_alone(budget_config):
    config = budget_config(num_train_steps=3)
    distributed.init()
    bert_config = BertConfig.from_json_file(config.bert_config_file)
    state = loop.PretrainingState(bert_config, config)
    masking = run_setup.load_dynamic_masking(config, bert_config)
    batch = next(iter(run_setup.train_dataset(config, [config.input_files], 0, 1, masking)))
    seed = tf.constant([1, 2], tf.int64)
    first, second = (state.model(batch, training=True, dropout_seed=s).mlm_logits
                     for s in (seed, seed + 1))
    np.testing.assert_array_equal(first.numpy(), second.numpy())  # no dropout masks
    # The pooler and NSP head get no gradient and no step: LAMB's weight decay with its trust
    # ratio took the pooler to 0 when they did (lr x the weight per update).
    untrained = [name for name in state.params if name.startswith(("bert/pooler/",
                                                                   "cls/seq_relationship/"))]
    assert len(untrained) == 4 and not set(untrained) & set(state.trained)
    before = {name: state.params[name].numpy() for name in state.params}
    for _ in range(3):
        state.update(iter([batch]))
    for name, value in before.items():
        changed = not np.array_equal(state.params[name].numpy(), value)
        assert changed == (name not in untrained), name
    loop.run(config)
    assert all(r["loss"] == r["masked_lm_loss"] for r in _metrics(config.output_dir))
    saved = BertConfig.from_json_file(config.output_dir + "/bert_config.json")
    assert saved.hidden_dropout_prob == 0.1  # kept for fine-tuning


def test_time_budget_ends_with_a_checkpoint_and_the_eval_and_resumes_with_what_is_left(
        budget_config):
    config = budget_config(num_train_steps=100_000, max_train_time="4s", do_eval=True,
                           eval_files=budget_config().input_files, max_eval_steps=2)
    summary = loop.run(config)
    step = summary["train"]["global_step"]
    assert 1 < step < 100_000 and summary["train"]["train_seconds"] >= 4
    assert summary["eval"]["loss"] == summary["eval"]["masked_lm_loss"]  # no NSP head trained
    assert "next_sentence_accuracy" not in summary["eval"]
    prefix = checkpoints.latest_checkpoint(config.output_dir)
    assert prefix.endswith(f"model.ckpt-{step}")
    spent = float(checkpoints.checkpoint_tensor(prefix, TRAIN_SECONDS))
    assert spent >= 4
    # The schedule followed the budget: from a quarter of the peak to near 0 at its end.
    rates = [r["learning_rate"] for r in _metrics(config.output_dir)]
    assert rates[0] == pytest.approx(0.25 * config.learning_rate, rel=0.05)
    # (How near the peak an update lands depends on the machine's speed: rising, then falling.)
    top = rates.index(max(rates))
    assert 0 < top < len(rates) - 1 and max(rates) <= config.learning_rate
    assert rates[-1] < 0.3 * config.learning_rate

    again = loop.run(config)  # the same command: the time spent was restored, none is left
    assert again["train"] == {"global_step": step}
    longer = loop.run(budget_config(num_train_steps=100_000, max_train_time="7s"))
    assert longer["train"]["global_step"] > step and longer["train"]["train_seconds"] >= 7


def test_a_budget_checkpoint_converts_and_exports_like_a_classic_one(budget_config, shared_data,
                                                                      tmp_path):
    """The budget recipe keeps Google's architecture: its checkpoint (no NSP trained, dropout
    off, the time spent saved beside the weights) converts to Hugging Face with every weight
    mapped, and its SavedModel, ONNX and KerasHub exports, each loaded in a fresh process, give
    bert_tf's encoder outputs."""
    import test_export

    from bert_tf.model.convert import tf_to_hf
    from bert_tf.tools import export
    from bert_tf.tools.export_source import resolve_source

    config = budget_config(num_train_steps=3)
    loop.run(config)
    to_hf = tf_to_hf(config.output_dir, tmp_path / "hf")
    assert to_hf.fresh == [] and to_hf.unused == []

    tok = test_export.tokenizer(shared_data)
    texts = tiny.emma(shared_data)[:2000].split("\n\n")[:4]
    inputs = {**test_export.id_inputs(tok, texts), "texts": texts}
    mask = np.array(inputs["input_mask"])
    vocab = str(tiny.vocab_file(shared_data))
    model = resolve_source(config.output_dir, vocab_file=vocab).build_model()
    outputs = model(*(tf.constant(inputs[name]) for name in test_export.ID_INPUTS))
    want = {"pooled_output": outputs.pooled_output.numpy(),
            "sequence_output": outputs.sequence_output.numpy()}
    for export_format in ("savedmodel", "onnx", "keras_hub"):
        directory = tmp_path / export_format
        assert export.run(export.ExportConfig(export_format, config.output_dir, str(directory),
                                              vocab_file=vocab)) == 0
        got = test_export.run_consumer(tmp_path, export_format, inputs, {"encoder": directory})
        where = "encoder/encode/" if export_format == "savedmodel" else "encoder/"
        for name, value in want.items():
            test_export.assert_close(got[where + name], value, mask, 1e-4,
                                     f"{export_format} {name}")
