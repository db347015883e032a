"""The tokenizer files of a Hugging Face export: what transformers' AutoTokenizer needs to split
text as the vocab's tokenizer spec (bert_tf/data/tokenizer_spec.py) says.

By the spec's word splitter:
  - bert (or a vocab without a spec: Google's rules): `BertTokenizer` with the spec's
    do_lower_case, strip_accents and tokenize_chinese_chars.
  - mecab: `BertJapaneseTokenizer` with word_tokenizer_type mecab and mecab_kwargs naming the
    dictionary package (unidic_lite), as cl-tohoku/bert-japanese's released models do
    (hf_model_configs/bert_base_wordpiece/tokenizer_config.json and config.json's
    tokenizer_class); subword_tokenizer_type wordpiece or character.
  - mecab-ko and sentencepiece: transformers has no Korean analyser (BertJapaneseTokenizer's
    mecab_option would have to name this machine's dictionary directory), and its
    BertJapaneseTokenizer sentencepiece mode rewrites the text (`` -> ", digits before a comma
    re-split), so the export ships its own small tokenizer classes (hf_remote_tokenizer.py,
    copied as tokenization_bert_tf.py) through `auto_map`: load them with
    trust_remote_code=True; mecab-ko needs python-mecab-ko, sentencepiece the sentencepiece
    package (the model file is copied as spiece.model).
A combination no class here reproduces (NFKC with Google's splitter, accent stripping with a
morphological splitter, character subwords) is refused with a clear error rather than exported wrong. Google's splitter with
lower-casing exports to BertTokenizer, which (unlike bert_tf) strips kana voicing marks and
decomposes Hangul: such a vocab tokenizes Japanese and Korean differently in transformers.
"""

import json
import os
import shutil

from bert_tf.data.tokenizer_spec import TokenizerSpec, read_spec

VOCAB = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"
REMOTE_MODULE = "tokenization_bert_tf"
_REMOTE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "hf_remote_tokenizer.py")
SENTENCEPIECE_MODEL = "spiece.model"  # BertJapaneseTokenizer's spm_file name
# Dictionary package (as the spec names it) -> BertJapaneseTokenizer's mecab_dic.
MECAB_DICTIONARIES = {"unidic-lite": "unidic_lite"}


class HfTokenizerError(ValueError):
    """A spec that transformers cannot reproduce; the message says which setting."""


def tokenizer_config(spec: TokenizerSpec) -> dict:
    """tokenizer_config.json for a spec (see the module docstring).

    Raises:
      HfTokenizerError for a spec no transformers tokenizer reproduces.
    """
    def refuse(what):
        raise HfTokenizerError(f"cannot export a tokenizer with {what} to transformers: no "
                               "transformers tokenizer splits text that way")

    common = {"do_lower_case": spec.do_lower_case, "model_max_length": 512}
    splitter, nfkc = spec.word_tokenizer_type, spec.normalization == "nfkc"
    if splitter == "bert" and spec.subword_tokenizer_type == "wordpiece":
        if nfkc:
            refuse("word_tokenizer_type=bert and normalization=nfkc")
        return {**common, "tokenizer_class": "BertTokenizer",
                "strip_accents": spec.strip_accents,
                "tokenize_chinese_chars": spec.tokenize_chinese_chars}
    if spec.strip_accents:
        refuse(f"word_tokenizer_type={splitter} and strip_accents=true")
    if spec.subword_tokenizer_type == "character":
        # bert_tf marks a word's later characters with ## (cl-tohoku's tokenization.py);
        # BertJapaneseTokenizer's CharacterTokenizer never does, so the ids would differ.
        refuse("subword_tokenizer_type=character")
    if spec.subword_tokenizer_type == "sentencepiece":
        return _remote(common, "BertSentencePieceTokenizer", nfkc)
    if splitter == "mecab-ko":
        return {**_remote(common, "BertMecabKoTokenizer", nfkc),
                "subword_tokenizer_type": spec.subword_tokenizer_type}
    package = spec.dictionary.package if spec.dictionary else None
    if splitter != "mecab" or package not in MECAB_DICTIONARIES:
        refuse(f"word_tokenizer_type={splitter} (dictionary {package})")
    return {**common, "tokenizer_class": "BertJapaneseTokenizer", "word_tokenizer_type": "mecab",
            "subword_tokenizer_type": spec.subword_tokenizer_type,
            "mecab_kwargs": {"mecab_dic": MECAB_DICTIONARIES[package], "normalize_text": nfkc}}


def _remote(common: dict, class_name: str, nfkc: bool) -> dict:
    return {**common, "normalize_text": nfkc, "tokenizer_class": class_name,
            "auto_map": {"AutoTokenizer": [f"{REMOTE_MODULE}.{class_name}", None]}}


def vocab_tokenizer_config(vocab_file: str) -> dict:
    """tokenizer_config of the spec beside vocab_file; a vocab without one is Google's:
    BertTokenizer, uncased (as every bert_tf command tokenizes it by default)."""
    return tokenizer_config(read_spec(vocab_file) or TokenizerSpec())


def write_hf_tokenizer(vocab_file: str, output_dir: str) -> dict:
    """Writes vocab.txt, tokenizer_config.json (and for mecab-ko its tokenizer module) into
    output_dir; returns the tokenizer config (its tokenizer_class goes into config.json too,
    where AutoTokenizer also looks)."""
    spec = read_spec(vocab_file) or TokenizerSpec()
    config = tokenizer_config(spec)
    shutil.copyfile(vocab_file, os.path.join(output_dir, VOCAB))
    if "auto_map" in config:
        shutil.copyfile(_REMOTE_SOURCE, os.path.join(output_dir, f"{REMOTE_MODULE}.py"))
    if spec.sentencepiece_model:
        shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(vocab_file)),
                                     spec.sentencepiece_model),
                        os.path.join(output_dir, SENTENCEPIECE_MODEL))
    with open(os.path.join(output_dir, TOKENIZER_CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return config
