"""The tokenizer spec: how text becomes the pieces of a vocab, stored beside the vocab file.

`build_vocab` writes VOCAB_STEM.tokenizer.json next to VOCAB_STEM.txt; every command that
tokenizes reads it through `bert_tf.data.tokenization.load_tokenizer`, so pretraining,
fine-tuning and inference cannot disagree about casing, normalisation or the word splitter (the
most reported failure of the Japanese and Korean BERTs: cl-tohoku/bert-japanese #24, KoBERT #6).
A vocab without a spec (Google's vocab.txt files) is tokenized as before: Google's rules, with
--do_lower_case (default True).

Field names follow Hugging Face's BertJapaneseTokenizer/BertTokenizer where they exist
(subword_tokenizer_type, word_tokenizer_type, do_lower_case, strip_accents,
tokenize_chinese_chars). The word splitter's dictionary is pinned by package, version and a
checksum of its files: another dictionary segments differently (unidic-lite #2), so a mismatch
is an error unless allowed explicitly.
"""

import dataclasses
import hashlib
import json
import os

from bert_tf.data.shards import file_sha256

SPEC_FORMAT = "bert_tf-tokenizer-spec"
SPEC_VERSION = 1
SUBWORD_TYPES = ("wordpiece", "sentencepiece", "character")
WORD_TOKENIZER_TYPES = ("bert", "mecab", "mecab-ko", "none")
NORMALIZATIONS = ("none", "nfkc")


class VocabError(ValueError):
    """The vocabulary file is missing, unreadable or lacks a special token, or its tokenizer
    cannot be set up (every command reports these as a usage error)."""


class TokenizerSpecError(VocabError):
    """A spec file is unreadable or invalid, or contradicts a flag or the installed dictionary."""


@dataclasses.dataclass(frozen=True)
class Dictionary:
    """A word splitter's dictionary: the Python package that ships it, its version and the
    sha256 of its files (dictionary_identity)."""

    package: str
    version: str
    sha256: str


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """How text becomes pieces. The defaults are Google's uncased BERT."""

    subword_tokenizer_type: str = "wordpiece"
    word_tokenizer_type: str = "bert"
    normalization: str = "none"
    do_lower_case: bool = True
    strip_accents: bool = True
    # Google's BasicTokenizer makes every CJK ideograph its own word (its _tokenize_chinese_chars).
    tokenize_chinese_chars: bool = True
    dictionary: Dictionary | None = None
    # sentencepiece: the model file's name, in the spec's directory, and its sha256.
    sentencepiece_model: str | None = None
    sentencepiece_model_sha256: str | None = None
    # sha256 of the vocab file the spec was written for.
    vocab_sha256: str | None = None

    def validate(self, where="the tokenizer spec"):
        for name, allowed in (("subword_tokenizer_type", SUBWORD_TYPES),
                              ("word_tokenizer_type", WORD_TOKENIZER_TYPES),
                              ("normalization", NORMALIZATIONS)):
            if getattr(self, name) not in allowed:
                raise TokenizerSpecError(f"{where}: {name}={getattr(self, name)!r} is not one of "
                                         f"{', '.join(allowed)}")
        splits_words = self.word_tokenizer_type in ("mecab", "mecab-ko")
        if splits_words and self.dictionary is None:
            raise TokenizerSpecError(f"{where}: word_tokenizer_type={self.word_tokenizer_type} "
                                     "needs a dictionary (package, version, sha256)")
        sentencepiece = self.subword_tokenizer_type == "sentencepiece"
        if self.sentencepiece_model is not None and not sentencepiece:
            raise TokenizerSpecError(f"{where}: sentencepiece_model is only for "
                                     "subword_tokenizer_type=sentencepiece")
        if sentencepiece and self.word_tokenizer_type != "none":
            raise TokenizerSpecError(f"{where}: sentencepiece splits words itself; use "
                                     "word_tokenizer_type=none")
        return self

    def to_json(self):
        return {"format": SPEC_FORMAT, "version": SPEC_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data, where="the tokenizer spec"):
        if not isinstance(data, dict) or data.get("format") != SPEC_FORMAT:
            raise TokenizerSpecError(f"{where} is not a bert_tf tokenizer spec (no \"format\": "
                                     f"\"{SPEC_FORMAT}\")")
        if data.get("version") != SPEC_VERSION:
            raise TokenizerSpecError(f"{where} has spec version {data.get('version')}; this "
                                     f"bert_tf reads version {SPEC_VERSION}: upgrade bert_tf")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields - {"format", "version"}
        if unknown:
            raise TokenizerSpecError(f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
        # A missing field would take Google's default, not the recipe the vocab was built with.
        missing = [name for name in sorted(fields) if name not in data]
        if missing:
            raise TokenizerSpecError(f"{where} lacks the field(s) {', '.join(missing)} (build_vocab "
                                     "writes every one; a default is Google's, not this vocab's "
                                     "recipe): put them back, or rebuild the vocab and its spec")
        values = {k: v for k, v in data.items() if k in fields}
        if values.get("dictionary") is not None:
            try:
                values["dictionary"] = Dictionary(**values["dictionary"])
            except TypeError as e:
                raise TokenizerSpecError(f"{where}: bad dictionary entry ({e})") from None
        spec = cls(**values).validate(where)
        if spec.subword_tokenizer_type == "sentencepiece" and not spec.sentencepiece_model:
            raise TokenizerSpecError(f"{where}: subword_tokenizer_type=sentencepiece needs "
                                     "sentencepiece_model (the model file beside the vocab)")
        return spec


def spec_path(vocab_file):
    """Where the spec of `vocab_file` lives: vocab.txt -> vocab.tokenizer.json."""
    stem, _ = os.path.splitext(str(vocab_file))
    return f"{stem}.tokenizer.json"


def read_spec(vocab_file):
    """The spec beside `vocab_file`, or None when there is none (a Google-style vocab)."""
    path = spec_path(vocab_file)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerSpecError(f"cannot read the tokenizer spec {path} of --vocab_file="
                                 f"{vocab_file}: {e}; rebuild it with python -m bert_tf "
                                 "build_vocab, or remove it to use Google's rules") from None
    spec = TokenizerSpec.from_json(data, where=f"tokenizer spec {path}")
    if spec.vocab_sha256 and not written_for(spec.vocab_sha256, vocab_file):
        raise TokenizerSpecError(f"tokenizer spec {path} was written for another vocab than "
                                 f"--vocab_file={vocab_file} (sha256 differs); keep each vocab "
                                 "with its own spec (build_vocab writes both)")
    if spec.sentencepiece_model:
        model = sentencepiece_model_file(spec, vocab_file)
        if not os.path.isfile(model) or (spec.sentencepiece_model_sha256 and file_sha256(model)
                                         != spec.sentencepiece_model_sha256):
            raise TokenizerSpecError(f"tokenizer spec {path} needs the SentencePiece model "
                                     f"{model} it was written with (missing or changed); keep "
                                     "it beside the vocab")
    return spec


def written_for(vocab_sha256, vocab_file):
    """Whether `vocab_file` is the vocab of that sha256, in either line ending: CRLF (an editor
    or git's autocrlf on Windows) gives the same tokens, load_vocab strips the "\r" as Google's
    load_vocab does."""
    if file_sha256(vocab_file) == vocab_sha256:
        return True
    with open(vocab_file, "rb") as f:
        raw = f.read()
    return b"\r\n" in raw and hashlib.sha256(raw.replace(b"\r\n", b"\n")).hexdigest() == \
        vocab_sha256


def sentencepiece_model_file(spec, vocab_file):
    """The SentencePiece model a spec names: beside the vocab."""
    return os.path.join(os.path.dirname(os.path.abspath(str(vocab_file))),
                        spec.sentencepiece_model)


def write_spec(spec, vocab_file):
    """Writes the spec beside `vocab_file` (after the vocab: it records the vocab's sha256)."""
    spec = dataclasses.replace(spec, vocab_sha256=file_sha256(vocab_file)).validate()
    path = spec_path(vocab_file)
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(spec.to_json(), f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(temporary, path)
    return path


def resolve_casing(spec, vocab_file, do_lower_case, flag="--do_lower_case"):
    """The spec with `do_lower_case` applied: None keeps the spec's; a value that contradicts
    a spec file is an error naming the flag and the file."""
    if do_lower_case is None or do_lower_case == spec.do_lower_case:
        return spec
    value = "true" if do_lower_case else "false"
    raise TokenizerSpecError(
        f"{flag}={value} contradicts {spec_path(vocab_file)}, which says do_lower_case="
        f"{str(spec.do_lower_case).lower()} for --vocab_file={vocab_file}; drop {flag} (the "
        "spec decides), or build a vocab with the casing you want")


# build_vocab --tokenizer=NAME: (subword, word splitter, normalisation, cased) of each recipe.
PRESETS = {
    # Google's BERT: its BasicTokenizer and WordPiece, uncased by default.
    "bert": ("wordpiece", "bert", "none", True),
    # cl-tohoku/bert-japanese v3: NFKC, cased, MeCab (unidic-lite) words, then WordPiece.
    "mecab": ("wordpiece", "mecab", "nfkc", False),
    # cl-tohoku's character-level variant: MeCab words, one piece per character.
    "character": ("character", "mecab", "nfkc", False),
    # KLUE-BERT: Mecab-ko morphemes, then WordPiece, cased, no Unicode normalisation (the
    # released klue/bert-base tokenizer is a plain cased BertTokenizer).
    "mecab-ko": ("wordpiece", "mecab-ko", "none", False),
    # KoBERT / ALBERT: a SentencePiece unigram model over NFKC text (SentencePiece's nmt_nfkc).
    "sentencepiece": ("sentencepiece", "none", "nfkc", False),
}


def preset_spec(name, do_lower_case=None, strip_accents=None, normalization=None,
                tokenize_chinese_chars=None):
    """The spec of a PRESETS recipe; a None argument takes the recipe's value (accent
    stripping follows lower-casing in Google's recipe and is off in the others, as in
    cl-tohoku's; CJK ideographs are split one per word only in Google's).

    The dictionary is left None: the caller records the installed one."""
    if name not in PRESETS:
        raise TokenizerSpecError(f"--tokenizer={name} is not one of {', '.join(PRESETS)}")
    subword, splitter, default_normalization, default_lower = PRESETS[name]
    lower = default_lower if do_lower_case is None else do_lower_case
    return TokenizerSpec(
        subword_tokenizer_type=subword, word_tokenizer_type=splitter,
        normalization=normalization or default_normalization, do_lower_case=lower,
        strip_accents=(lower if name == "bert" else False) if strip_accents is None
        else strip_accents,
        tokenize_chinese_chars=(name == "bert") if tokenize_chinese_chars is None
        else tokenize_chinese_chars)
