import json
import os

import pytest

from bert_tf.model.config import BertConfig, BertConfigError

GOOGLE_BASE_CONFIG = {  # Google's uncased_L-12_H-768_A-12/bert_config.json
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
    "type_vocab_size": 2, "vocab_size": 30522,
}


def test_defaults_are_bert_base():
    assert BertConfig(vocab_size=30522).to_dict() == GOOGLE_BASE_CONFIG
    assert BertConfig(vocab_size=30522).head_size == 64


def test_json_round_trip_leaves_no_temporary_files(tmp_path):
    config = BertConfig(vocab_size=99, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128)
    path = tmp_path / "bert_config.json"
    config.to_json_file(path)
    assert BertConfig.from_json_file(path) == config
    assert json.loads(path.read_text())["hidden_size"] == 64
    assert os.listdir(tmp_path) == ["bert_config.json"]


def test_reads_googles_file(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(GOOGLE_BASE_CONFIG))
    assert BertConfig.from_json_file(path) == BertConfig(vocab_size=30522)


@pytest.mark.parametrize("change, field", [
    ({"hidden_size": 100}, "hidden_size"),  # not divisible by 12 heads
    ({"hidden_act": "swish"}, "hidden_act"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"vocab_size": -5}, "vocab_size"),
    ({"intermediate_size": 3072.5}, "intermediate_size"),
    ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
    ({"initializer_range": 0}, "initializer_range"),
    ({"num_layers": 12}, "num_layers"),  # unknown key
])
def test_invalid_file_names_file_and_field(tmp_path, change, field):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**GOOGLE_BASE_CONFIG, **change}))
    with pytest.raises(BertConfigError) as error:
        BertConfig.from_json_file(path)
    assert str(path) in str(error.value) and field in str(error.value)


def test_missing_vocab_size_and_bad_files(tmp_path):
    with pytest.raises(BertConfigError, match="vocab_size.*required"):
        BertConfig.from_dict({"hidden_size": 768})
    with pytest.raises(BertConfigError, match="not found"):
        BertConfig.from_json_file(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(BertConfigError, match="not valid JSON"):
        BertConfig.from_json_file(broken)
    # issue 37: a directory or a binary file gave IsADirectoryError / UnicodeDecodeError
    with pytest.raises(BertConfigError, match=f"{tmp_path}: a directory, not a file"):
        BertConfig.from_json_file(tmp_path)
    broken.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(BertConfigError, match="broken.json: not valid JSON text"):
        BertConfig.from_json_file(broken)
    broken.write_text("[1, 2]")
    with pytest.raises(BertConfigError, match="broken.json: holds a JSON list"):
        BertConfig.from_json_file(broken)
    with pytest.raises(BertConfigError, match="divisible"):
        BertConfig(vocab_size=10, hidden_size=10, num_attention_heads=3)
