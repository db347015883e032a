"""Hugging Face tokenizers for bert_tf vocabs that transformers' own classes cannot reproduce:
the mecab-ko word splitter and SentencePiece.

`python -m bert_tf convert tf_to_hf` copies this file into the exported directory as
tokenization_bert_tf.py and names the class in tokenizer_config.json's auto_map, so that

    AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)

splits text as bert_tf does: Google's cleaning (control characters dropped, whitespace made a
space), then NFKC and lower-casing where the spec says so (never decomposing Hangul or kana),
then
  - BertMecabKoTokenizer: Mecab-ko morphemes (python-mecab-ko with the python-mecab-ko-dic
    dictionary; transformers has no Korean analyser, and BertJapaneseTokenizer's mecab_option
    would have to name this machine's dictionary directory), WordPiece over each morpheme;
  - BertSentencePieceTokenizer: the SentencePiece model over the whole text, without the
    rewriting BertJapaneseTokenizer's sentencepiece mode adds (`` -> ", digits before a comma
    re-split); the model's ids are the vocab's.
Both reuse BertJapaneseTokenizer for the vocab, special tokens and [CLS]/[SEP] packing. This
file imports nothing from bert_tf.
"""

import unicodedata

from transformers import BertJapaneseTokenizer


class Normalizer:
    """Google BasicTokenizer's cleaning, then NFKC and lower-casing as configured."""

    def __init__(self, normalize_text, do_lower_case):
        self.normalize_text = normalize_text
        self.do_lower_case = do_lower_case

    def __call__(self, text):
        out = []
        for char in text:
            category = unicodedata.category(char)
            if char in "\t\n\r" or category == "Zs":
                out.append(" ")
            elif not (char in "\x00\ufffd" or category in ("Cc", "Cf")):
                out.append(char)
        text = "".join(out)
        if self.normalize_text:
            text = unicodedata.normalize("NFKC", text)
        return text.lower() if self.do_lower_case else text


class MecabKoWordTokenizer:
    """Mecab-ko morphemes: substrings of the normalised text at the spans Mecab-ko reports."""

    def __init__(self, normalizer):
        import mecab  # python-mecab-ko

        self.tagger = mecab.MeCab()
        self.normalizer = normalizer

    def tokenize(self, text, never_split=None, **kwargs):
        text = self.normalizer(text)
        return [text[m.span.start:m.span.end] for m in self.tagger.parse(text)]


class BertMecabKoTokenizer(BertJapaneseTokenizer):
    """BertJapaneseTokenizer's WordPiece (or character) subwords over Mecab-ko morphemes."""

    def __init__(self, vocab_file, do_lower_case=False, normalize_text=True, **kwargs):
        kwargs["word_tokenizer_type"] = "basic"  # replaced below
        super().__init__(vocab_file, do_lower_case=do_lower_case, normalize_text=normalize_text,
                         **kwargs)
        self.word_tokenizer = MecabKoWordTokenizer(Normalizer(normalize_text, do_lower_case))


class SentencePieceSubwords:
    def __init__(self, sp_model, normalizer):
        self.sp_model = sp_model
        self.normalizer = normalizer

    def tokenize(self, text):
        return self.sp_model.encode(self.normalizer(text), out_type=str)


class BertSentencePieceTokenizer(BertJapaneseTokenizer):
    """The SentencePiece model over the whole normalised text (no word splitter)."""

    def __init__(self, vocab_file=None, spm_file=None, do_lower_case=False, normalize_text=True,
                 **kwargs):
        kwargs.update(subword_tokenizer_type="sentencepiece", do_word_tokenize=False)
        super().__init__(vocab_file, spm_file=spm_file, do_lower_case=do_lower_case,
                         normalize_text=normalize_text, **kwargs)
        self.subword_tokenizer = SentencePieceSubwords(
            self.subword_tokenizer.sp_model, Normalizer(normalize_text, do_lower_case))
