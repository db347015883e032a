import dataclasses
import logging
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model.checkpoints import (
    CheckpointError,
    CheckpointMismatchError,
    init_from_checkpoint,
    latest_checkpoint,
    restore,
    save_checkpoint,
)
from bert_tf.model.config import BertConfig
from bert_tf.model.modeling import BertForPreTraining, variables_by_name

pytestmark = pytest.mark.ngc  # also run by `make test-ngc` (TensorFlow 2.17)

CONFIG = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=16)
GOOGLE_NAME = re.compile(
    r"^bert/embeddings/(word_embeddings|position_embeddings|token_type_embeddings"
    r"|LayerNorm/(gamma|beta))$"
    r"|^bert/encoder/layer_\d+/(attention/self/(query|key|value)/(kernel|bias)"
    r"|attention/output/dense/(kernel|bias)|attention/output/LayerNorm/(gamma|beta)"
    r"|intermediate/dense/(kernel|bias)|output/dense/(kernel|bias)|output/LayerNorm/(gamma|beta))$"
    r"|^bert/pooler/dense/(kernel|bias)$"
    r"|^cls/predictions/(transform/dense/(kernel|bias)|transform/LayerNorm/(gamma|beta)"
    r"|output_bias)$"
    r"|^cls/seq_relationship/output_(weights|bias)$")


def new_variables(config=CONFIG, seed=0):
    tf.random.set_seed(seed)
    return variables_by_name(BertForPreTraining(config))


def values(variables):
    return {name: v.numpy() for name, v in variables.items()}


def test_save_and_restore_by_name(tmp_path):
    saved = new_variables(seed=1)
    step = tf.Variable(7, dtype=tf.int64)
    slot = tf.Variable(tf.ones([99, 32]))
    prefix = save_checkpoint({**saved, "global_step": step,
                              "bert/embeddings/word_embeddings/adam_m": slot}, tmp_path, 7)
    assert prefix == str(tmp_path / "model.ckpt-7")
    assert latest_checkpoint(tmp_path) == prefix == tf.train.latest_checkpoint(str(tmp_path))

    # Readable with TensorFlow's own reader, under Google's names.
    reader = tf.train.load_checkpoint(prefix)
    stored = reader.get_variable_to_shape_map()
    model_names = [n for n in stored if n != "global_step" and not n.endswith("/adam_m")]
    assert sorted(model_names) == sorted(saved)
    assert all(GOOGLE_NAME.match(n) for n in model_names)
    assert reader.get_tensor("global_step") == 7

    restored = new_variables(seed=2)
    report = restore(tmp_path, restored)  # a directory means its latest checkpoint
    assert sorted(report.loaded) == sorted(saved) and report.missing == []
    assert report.unused == ["bert/embeddings/word_embeddings/adam_m", "global_step"]
    for name, value in values(saved).items():
        np.testing.assert_array_equal(restored[name].numpy(), value)

    resumed_step = tf.Variable(0, dtype=tf.int64)
    restore(prefix, {"global_step": resumed_step}, require_all=True)
    assert int(resumed_step) == 7


def test_keep_max_prunes_oldest(tmp_path):
    variables = {"w": tf.Variable([1.0, 2.0])}
    for step in (10, 20, 30):
        save_checkpoint(variables, tmp_path, step, keep_max=2)
    assert sorted(os.listdir(tmp_path)) == [
        "checkpoint", "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index",
        "model.ckpt-30.data-00000-of-00001", "model.ckpt-30.index"]
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-20", "model.ckpt-30"]


@pytest.mark.parametrize("failing_file", ["index", "checkpoint"])
def test_failed_save_keeps_previous_checkpoint(tmp_path, monkeypatch, failing_file):
    variables = {"w": tf.Variable([1.0, 2.0])}
    save_checkpoint(variables, tmp_path, 1)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    real_rename = tf.io.gfile.rename

    def rename(src, dst, overwrite=False):  # the disk fails on one rename mid-save
        if dst.endswith(failing_file):
            raise tf.errors.UnavailableError(None, None, "simulated I/O failure")
        real_rename(src, dst, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", rename)
    variables["w"].assign([3.0, 4.0])
    with pytest.raises(CheckpointError, match="model.ckpt-2.*simulated I/O failure"):
        save_checkpoint(variables, tmp_path, 2)
    monkeypatch.undo()
    after = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    assert after == before  # no partial files, state file unchanged
    restore(tmp_path, variables)
    np.testing.assert_array_equal(variables["w"].numpy(), [1.0, 2.0])


def test_unwritable_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the output directory should be")
    with pytest.raises(CheckpointError, match="not_a_dir"):
        save_checkpoint({"w": tf.Variable(1.0)}, blocker / "sub", 1)


def test_shape_mismatch_names_variable_and_changes_nothing(tmp_path):
    prefix = save_checkpoint(new_variables(seed=1), tmp_path, 1)
    other = new_variables(BertConfig(**{**CONFIG.to_dict(), "vocab_size": 120}), seed=2)
    before = values(other)
    with pytest.raises(CheckpointMismatchError) as error:
        restore(prefix, other)
    message = str(error.value)
    assert "bert/embeddings/word_embeddings" in message or "cls/predictions/output_bias" in message
    assert "[99" in message and "[120" in message and prefix in message
    for name, value in before.items():
        np.testing.assert_array_equal(other[name].numpy(), value)


def test_missing_and_bad_paths(tmp_path):
    saved = {"w": tf.Variable(1.0)}
    prefix = save_checkpoint(saved, tmp_path, 1)
    with pytest.raises(CheckpointMismatchError, match="lacks 1 variable.*global_step"):
        restore(prefix, {**saved, "global_step": tf.Variable(0, dtype=tf.int64)},
                require_all=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="no checkpoint in directory"):
        restore(empty, saved)
    with pytest.raises(CheckpointError, match="not found"):
        restore(tmp_path / "model.ckpt-999", saved)
    with pytest.raises(CheckpointMismatchError, match="no variable name matches"):
        init_from_checkpoint(prefix, {"other": tf.Variable(1.0)})


def test_google_tf1_checkpoint_initialises_model(tmp_path, caplog):
    """A checkpoint written the way Google's run_pretraining.py writes one: a TF1
    Saver in graph mode, Google's variable names, plus global_step and Adam slots."""
    reference = values(new_variables(seed=3))
    del reference["cls/seq_relationship/output_bias"]  # pretend the checkpoint lacks it
    prefix = str(tmp_path / "bert_model.ckpt")
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        for name, value in reference.items():
            tf.compat.v1.get_variable(name, initializer=value)
            tf.compat.v1.get_variable(name + "/adam_m", initializer=np.zeros_like(value))
        tf.compat.v1.train.get_or_create_global_step()
        session.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.Saver().save(session, prefix, write_meta_graph=False)

    model_variables = new_variables(seed=4)
    with caplog.at_level(logging.INFO, logger=checkpoints.__name__):
        report = init_from_checkpoint(prefix, model_variables)
    assert sorted(report.loaded) == sorted(reference)
    assert report.missing == ["cls/seq_relationship/output_bias"]
    assert "global_step" in report.unused
    for name, value in reference.items():
        np.testing.assert_array_equal(model_variables[name].numpy(), value)
    assert "new    cls/seq_relationship/output_bias" in caplog.text
    assert "loaded bert/encoder/layer_1/output/dense/kernel" in caplog.text


def test_our_checkpoint_restores_with_tf1_saver(tmp_path):
    """Google's and NVIDIA's TF1 code restores our checkpoints by name."""
    saved = values(new_variables(seed=5))
    prefix = save_checkpoint(new_variables(seed=5), tmp_path, 3)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        graph_vars = {name: tf.compat.v1.get_variable(name, shape=value.shape)
                      for name, value in saved.items()}
        tf.compat.v1.train.Saver(graph_vars).restore(session, prefix)
        for name, value in session.run(graph_vars).items():
            np.testing.assert_array_equal(value, saved[name])


def test_truncated_checkpoint_is_corrupt_and_set_aside_changes_nothing_else(tmp_path):
    variables = {"w": tf.Variable(tf.range(50_000, dtype=tf.float32))}
    for step in (1, 2):
        save_checkpoint(variables, tmp_path, step)
    data = tmp_path / "model.ckpt-2.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(1000)
    variables["w"].assign(tf.zeros([50_000]))
    with pytest.raises(checkpoints.CheckpointCorruptError,
                       match=f"checkpoint {tmp_path}/model.ckpt-2 is corrupt"):
        restore(tmp_path / "model.ckpt-2", variables)
    assert not variables["w"].numpy().any()  # nothing assigned from the bad checkpoint

    renamed = checkpoints.set_aside(str(tmp_path / "model.ckpt-2"))
    assert sorted(os.path.basename(p) for p in renamed) == [
        "model.ckpt-2.data-00000-of-00001.corrupt", "model.ckpt-2.index.corrupt"]
    assert checkpoints.listed_checkpoints(tmp_path) == [str(tmp_path / "model.ckpt-1")]
    restore(tmp_path, variables)
    assert variables["w"].numpy()[-1] == 49_999


def test_stale_temporaries_of_our_naming_only_are_removed(tmp_path):
    save_checkpoint({"w": tf.Variable(1.0)}, tmp_path, 1)
    ours = [".tmp-" + "a" * 32 + "-model.ckpt-3.data-00000-of-00001.tempstate99",
            ".tmp-" + "a" * 32 + "-model.ckpt-3.index", "checkpoint.tmp-" + "b" * 32]
    others = [".tmp-mine", "model.ckpt-3.notes", ".hidden"]
    for name in ours + others:
        (tmp_path / name).write_text("x")
    removed = checkpoints.remove_stale_temporaries(tmp_path)
    assert sorted(os.path.basename(p) for p in removed) == sorted(ours)
    assert all((tmp_path / name).exists() for name in others)
    assert checkpoints.latest_checkpoint(tmp_path).endswith("model.ckpt-1")


def test_relative_directory_lists_prunes_and_sets_aside(tmp_path, monkeypatch):
    """Every README example passes a relative --output_dir: the state file's entries must be
    found under it, --keep_checkpoint_max applied, and a set-aside checkpoint dropped."""
    monkeypatch.chdir(tmp_path)
    variables = {"w": tf.Variable([1.0, 2.0])}
    for step in (10, 20, 30):
        save_checkpoint(variables, "runs/rel", step, keep_max=2)
    assert checkpoints.listed_checkpoints("runs/rel") == [
        os.path.join("runs/rel", "model.ckpt-30"), os.path.join("runs/rel", "model.ckpt-20")]
    assert not (tmp_path / "runs/rel/model.ckpt-10.index").exists()
    checkpoints.set_aside(os.path.join("runs/rel", "model.ckpt-30"))
    assert checkpoints.listed_checkpoints("runs/rel") == [os.path.join("runs/rel",
                                                                       "model.ckpt-20")]


def test_predict_names_what_a_checkpoint_was_written_for_and_checks_top_k(tmp_path):
    from bert_tf.model.tasks import BertForSequenceClassification
    from bert_tf.tools import predict

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n")
    config = BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=16)
    config.to_json_file(tmp_path / "bert_config.json")
    save_checkpoint(variables_by_name(BertForSequenceClassification(config, 2)),
                    tmp_path / "finetuned", 1)
    save_checkpoint(variables_by_name(BertForPreTraining(config)), tmp_path / "pretrained", 1)
    deeper = tmp_path / "deeper.json"
    BertConfig(**{**config.to_dict(), "num_hidden_layers": 2}).to_json_file(deeper)
    run = predict.PredictConfig(str(tmp_path / "bert_config.json"), str(tmp_path / "pretrained"),
                                str(tmp_path / "vocab.txt"), ["the [MASK] sat"])
    with pytest.raises(CheckpointMismatchError, match=r"finetuned: .* lacks 7 variable\(s\) .*"
                       r"it holds a model for fine-tuning \(a task head\), not this one\. "
                       "predict needs a pretraining checkpoint"):
        predict.run(dataclasses.replace(run, init_checkpoint=str(tmp_path / "finetuned")))
    with pytest.raises(CheckpointMismatchError, match="written with another bert_config.json"):
        predict.run(dataclasses.replace(run, bert_config_file=str(deeper)))
    for top_k in (0, 100_000):
        with pytest.raises(ValueError, match=f"--top_k={top_k} must be between 1 and the 10 "):
            predict.run(dataclasses.replace(run, top_k=top_k))
    assert predict.run(dataclasses.replace(run, top_k=10)) == 0
