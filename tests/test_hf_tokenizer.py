"""A model exported with `convert tf_to_hf` carries its tokenizer: transformers' AutoTokenizer,
loading the exported directory in a fresh process, gives the ids bert_tf gives on held-out
Japanese (MeCab + WordPiece: BertJapaneseTokenizer) and Korean (Mecab-ko + WordPiece, and
SentencePiece: the shipped remote-code classes) lines. The vocabs are learned by build_vocab from
the first 90% of the shared corpora; the lines come from the last 10%."""

import json
import sys

import pytest
import tensorflow as tf
from conftest import run_command

from bert_tf.data import build_vocab
from bert_tf.data.tokenization import load_tokenizer
from bert_tf.model.checkpoints import save_checkpoint
from bert_tf.model.config import BertConfig
from bert_tf.model.convert import variables_by_name
from bert_tf.model.modeling import BertForPreTraining
from bert_tf.tools.convert import main

CORPORA = {"ja": "corpora/ja/debian-reference.ja.txt", "ko": "corpora/ko/installation-guide.ko.txt"}
EXPORTED_CLASS = {"mecab": "BertJapaneseTokenizer", "mecab-ko": "BertMecabKoTokenizer",
                  "sentencepiece": "BertSentencePieceTokenizer"}
HELD_OUT_SENTENCES = 40
READ_IDS = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
texts = json.load(open(sys.argv[2], encoding="utf-8"))
print(json.dumps({"class": type(tokenizer).__name__,
                  "ids": [tokenizer(t)["input_ids"] for t in texts]}))
"""


def held_out_lines(text: str) -> tuple[str, list[str]]:
    """(first 90% of the lines, the first HELD_OUT_SENTENCES non-blank lines of the rest)."""
    lines = text.split("\n")
    cut = int(0.9 * len(lines))
    rest = [line.strip() for line in lines[cut:] if len(line.strip()) > 10]
    return "\n".join(lines[:cut]), rest[:HELD_OUT_SENTENCES]


@pytest.mark.parametrize("lang, tokenizer_name", [("ja", "mecab"), ("ko", "mecab-ko"),
                                                  ("ko", "sentencepiece")])
def test_exported_tokenizer_gives_bert_tf_ids_in_transformers(lang, tokenizer_name, shared_data,
                                                              tmp_path):
    train_text, sentences = held_out_lines(
        (shared_data / CORPORA[lang]).read_text(encoding="utf-8"))
    (tmp_path / "train.txt").write_text(train_text, encoding="utf-8")
    vocab = tmp_path / "model" / "vocab.txt"
    vocab.parent.mkdir()
    build_vocab.run(build_vocab.BuildVocabConfig(
        str(tmp_path / "train.txt"), str(vocab), vocab_size=3000, tokenizer=tokenizer_name,
        max_unique_chars=3000))
    ours = load_tokenizer(str(vocab))
    config = BertConfig(vocab_size=ours.vocab_size, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32)
    variables = variables_by_name(BertForPreTraining(config))
    save_checkpoint({**variables, "global_step": tf.constant(1, tf.int64)}, vocab.parent, 1)
    config.to_json_file(vocab.parent / "bert_config.json")
    exported = tmp_path / "hf"
    assert main(["tf_to_hf", f"--checkpoint={vocab.parent}", f"--output_dir={exported}"]) == 0
    (tmp_path / "texts.json").write_text(json.dumps(sentences, ensure_ascii=False))
    proc = run_command([sys.executable, "-c", READ_IDS, exported, tmp_path / "texts.json"],
                       cwd=tmp_path)  # a fresh process that never imports bert_tf
    theirs = json.loads(proc.stdout.strip().split("\n")[-1])
    assert theirs["class"] == EXPORTED_CLASS[tokenizer_name]
    expected = [[ours.cls_id, *ours.tokenize_ids(t), ours.sep_id] for t in sentences]
    assert len(sentences) == HELD_OUT_SENTENCES
    assert sum(len(ids) for ids in expected) > 20 * HELD_OUT_SENTENCES
    assert theirs["ids"] == expected
    model_config = json.loads((exported / "config.json").read_text())
    assert model_config["tokenizer_class"] == theirs["class"]


def test_a_spec_transformers_cannot_reproduce_is_refused_before_any_output(tmp_path,
                                                                           shared_data, capsys):
    vocab = tmp_path / "model" / "vocab.txt"
    vocab.parent.mkdir()
    vocab.write_bytes((shared_data / "vocab" / "bert-base-cased.txt").read_bytes())
    from bert_tf.data import tokenizer_spec

    tokenizer_spec.write_spec(tokenizer_spec.TokenizerSpec(normalization="nfkc",
                                                           do_lower_case=False,
                                                           strip_accents=False), str(vocab))
    assert main(["tf_to_hf", f"--checkpoint={tmp_path / 'model'}", f"--vocab_file={vocab}",
                 f"--output_dir={tmp_path / 'hf'}"]) == 1
    assert "word_tokenizer_type=bert and normalization=nfkc" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists() or not any((tmp_path / "hf").iterdir())
