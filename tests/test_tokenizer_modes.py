"""Tokenizer modes (issue 34): the spec beside the vocab and its refusals at every entry point,
Japanese (MeCab + WordPiece, character) and Korean (Mecab-ko + WordPiece) segmentation on real
sentences of the shared corpora, SentencePiece ids, lower-casing that keeps kana and Hangul, and
whole-word masking by MeCab words (static and dynamic)."""

import dataclasses
import json
import re
import types
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import build_vocab, tokenizer_spec, word_splitters
from bert_tf.data import pretraining_data as pdata
from bert_tf.data.input_pipeline import DynamicMasking, apply_dynamic_masking
from bert_tf.data.masking import choose_masks
from bert_tf.data.normalization import Normalizer
from bert_tf.data.records import num_to_predict
from bert_tf.data.tokenization import FullTokenizer, load_tokenizer, normalize_text
from bert_tf.data.tokenizer_spec import TokenizerSpecError

JA = "corpora/ja/debian-reference.ja.txt"
KO = "corpora/ko/installation-guide.ko.txt"
SEQ = 64


def corpus_lines(shared_data, name, start, stop):
    lines = (shared_data / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines[start:stop] if line.strip()]


def make_vocab(shared_data, tmp_path_factory, name, lines, **flags):
    """build_vocab's command (its run()) on `lines` -> the vocab file (with its spec)."""
    directory = tmp_path_factory.mktemp(flags["tokenizer"])
    text = directory / "train.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocab = directory / "vocab.txt"
    build_vocab.run(build_vocab.BuildVocabConfig(str(text), str(vocab), **flags))
    return vocab


@pytest.fixture(scope="module")
def ja_mecab(shared_data, tmp_path_factory):
    lines = corpus_lines(shared_data, JA, 0, 4000)
    vocab = make_vocab(shared_data, tmp_path_factory, JA, lines, tokenizer="mecab",
                       vocab_size=4000, max_unique_chars=3000, initial_alphabet="corpus")
    return load_tokenizer(vocab)


@pytest.fixture(scope="module")
def ja_held_out(shared_data):
    return corpus_lines(shared_data, JA, 18000, 18400)


def reference_spans(splitter_name, text):
    """The splitter's word spans in `text` (NFKC, as the Japanese spec normalises), mapped to
    the original text; words that NFKC made of one character ("…" -> "...") left out."""
    spec = tokenizer_spec.preset_spec(splitter_name if splitter_name == "mecab" else "mecab-ko",
                                      normalization="nfkc")
    normalised, starts, ends = Normalizer(True, False, False).with_offsets(text)
    spans = [(starts[a], ends[b - 1]) for a, b in word_splitters.make_splitter(spec).spans(
        normalised)]
    return [s for s in spans if spans.count(s) == 1]


def crossing_pieces(tokenizer, lines, splitter_name):
    crossing = []
    for line in lines:
        boundaries = {b for span in reference_spans(splitter_name, line) for b in span}
        crossing += [(line, p) for p in tokenizer.tokenize_with_offsets(line)
                     if any(p.start < b < p.end for b in boundaries)]
    return crossing


# --------------------------------------------------------------------------- the spec


def test_spec_round_trip_and_what_it_refuses(ja_mecab, tmp_path, capsys):
    spec = ja_mecab.spec
    assert (spec.word_tokenizer_type, spec.normalization, spec.do_lower_case,
            spec.strip_accents, spec.tokenize_chinese_chars) == ("mecab", "nfkc", False, False,
                                                                False)
    assert spec.dictionary == word_splitters.dictionary_identity("mecab")
    assert spec.dictionary.package == "unidic-lite" and spec.dictionary.version == "1.0.8"
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(open(ja_mecab.vocab_file, "rb").read())
    path = tokenizer_spec.write_spec(spec, vocab)
    assert path == str(tmp_path / "vocab.tokenizer.json")
    assert tokenizer_spec.read_spec(vocab) == spec
    assert load_tokenizer(vocab, do_lower_case=False).spec == spec
    with pytest.raises(TokenizerSpecError, match=r"--do_lower_case=true contradicts "
                       rf"{re.escape(path)}, which says do_lower_case=false"):
        load_tokenizer(vocab, do_lower_case=True)
    # Another installed dictionary: refused unless allowed.
    data = json.loads(open(path, encoding="utf-8").read())
    data["dictionary"]["sha256"] = "0" * 64
    open(path, "w", encoding="utf-8").write(json.dumps(data))
    with pytest.raises(TokenizerSpecError, match="pass --allow_dictionary_mismatch"):
        load_tokenizer(vocab)
    assert load_tokenizer(vocab, allow_dictionary_mismatch=True).tokenize("設定") == ["設定"]
    assert "unidic-lite==1.0.8" in capsys.readouterr().err
    # The spec belongs to its vocab; bad specs are named.
    vocab.write_text(vocab.read_text(encoding="utf-8") + "extra\n", encoding="utf-8")
    with pytest.raises(TokenizerSpecError, match="written for another vocab"):
        load_tokenizer(vocab)
    for broken, message in (("{", "cannot read the tokenizer spec"),
                            ('{"format": "x"}', "is not a bert_tf tokenizer spec"),
                            (json.dumps({**data, "casing": 1}), "unknown field.*casing"),
                            # Issue 46: missing fields took Google's defaults (uncased, no NFKC).
                            (json.dumps({k: v for k, v in data.items()
                                         if k not in ("normalization", "do_lower_case")}),
                             r"lacks the field\(s\) do_lower_case, normalization \(build_vocab "
                             "writes every one; a default is Google's, not this vocab's recipe"),
                            (json.dumps({**data, "vocab_sha256": None,
                                         "subword_tokenizer_type": "sentencepiece",
                                         "word_tokenizer_type": "none"}),
                             "needs sentencepiece_model")):
        open(path, "w", encoding="utf-8").write(broken)
        with pytest.raises(TokenizerSpecError, match=message):
            load_tokenizer(vocab)


def test_a_vocab_with_crlf_line_endings_keeps_its_spec(ja_mecab, tmp_path):
    """Issue 46: CRLF (Windows editors, git's autocrlf) changed the vocab's sha256, and its own
    spec was refused as "written for another vocab"; the tokens are the same, so it is used."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(open(ja_mecab.vocab_file, "rb").read().replace(b"\n", b"\r\n"))
    spec_file = tokenizer_spec.spec_path(ja_mecab.vocab_file)
    (tmp_path / "vocab.tokenizer.json").write_bytes(open(spec_file, "rb").read())
    crlf = load_tokenizer(vocab)
    assert crlf.spec == ja_mecab.spec and crlf.vocab == ja_mecab.vocab
    text = "データベースをインストールします。"
    assert crlf.tokenize(text) == ja_mecab.tokenize(text) != ["[UNK]"]
    vocab.write_bytes(vocab.read_bytes() + b"extra\r\n")  # another vocab is still refused
    with pytest.raises(TokenizerSpecError, match="written for another vocab"):
        load_tokenizer(vocab)


def test_a_vocab_without_spec_keeps_google_rules(shared_data):
    vocab = shared_data / "vocab/bert-base-uncased.txt"
    assert not (shared_data / "vocab/bert-base-uncased.tokenizer.json").exists()
    tokenizer = load_tokenizer(vocab)
    assert tokenizer.spec == tokenizer_spec.TokenizerSpec() and tokenizer.do_lower_case
    text = "Héllo,  unaffable WORLD!"
    assert tokenizer.tokenize(text) == FullTokenizer(vocab).tokenize(text) == [
        "hello", ",", "una", "##ffa", "##ble", "world", "!"]
    assert load_tokenizer(vocab, do_lower_case=False).tokenize("WORLD") == ["[UNK]"]
    pieces = tokenizer.tokenize_with_offsets(text)
    assert [(text[p.start:p.end], p.word) for p in pieces] == [
        ("Héllo", 0), (",", 1), ("una", 2), ("ffa", 2), ("ble", 2), ("WORLD", 3), ("!", 4)]


def test_a_vocab_not_built_for_google_split_warns_without_its_spec(ja_mecab, shared_data,
                                                                   tmp_path, capsys):
    """Issue 46: a MeCab vocab copied without vocab.tokenizer.json was tokenized by Google's
    rules without a word (データベースを -> one [UNK]). Google's vocabs stay silent."""
    for name in ("uncased", "cased"):
        google = load_tokenizer(shared_data / f"vocab/bert-base-{name}.txt")
        google.tokenize_ids_batch(corpus_lines(shared_data, "corpora/sample_text.txt", 0, 40))
    assert capsys.readouterr().err == ""
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(open(ja_mecab.vocab_file, "rb").read())
    load_tokenizer(vocab)
    err = capsys.readouterr().err
    assert (f"WARNING: --vocab_file={vocab} has no tokenizer spec ({tmp_path}/vocab.tokenizer.json "
            "is missing), so it gets Google's rules") in err, err
    assert "of its entries (e.g. " in err and "can never come out of Google's split" in err
    # No telling entries, but half the first pieces [UNK]: Google's English vocab on Korean.
    uncased = load_tokenizer(shared_data / "vocab/bert-base-uncased.txt")
    uncased.tokenize_ids_batch(corpus_lines(shared_data, KO, 0, 200))
    uncased.tokenize_ids_batch(corpus_lines(shared_data, KO, 200, 400))  # said once
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1 and re.search(r"\d+\.\d% of the first \d+ pieces are "
                                                    r"\[UNK\]", err), err


def _entry_points(tmp_path, shared_data, vocab, **tokenizer_flags):
    """Each command that tokenizes, run in this process up to its tokenizer (cheap: the refusal
    comes before any model or data work)."""
    from bert_tf.analysis import analyze_attention, probe_syntax
    from bert_tf.data import dataset
    from bert_tf.tools import predict, tokenize_text
    from bert_tf.train import finetune, finetune_config

    text = tmp_path / "text.txt"
    text.write_text("設定を確認します。\n\nパッケージです。\n", encoding="utf-8")
    ud = str(shared_data / "ud/en_ewt-ud-test.conllu")
    model = {"init_checkpoint": str(tmp_path / "none"), "bert_config_file": str(tmp_path / "x")}
    return {
        "create_pretraining_data": lambda: pdata.create_pretraining_data(
            str(text), str(tmp_path / "out.tfrecord"), str(vocab),
            config=pdata.InstanceConfig(dupe_factor=1), progress=False, **tokenizer_flags),
        "prepare_dataset": lambda: dataset.prepare_dataset(dataset.DatasetConfig(
            str(text), str(tmp_path / "dataset"), str(vocab), progress=False,
            **tokenizer_flags)),
        "finetune": lambda: finetune.load_tokenizer(finetune_config.FinetuningConfig(
            "pos", str(tmp_path), model["bert_config_file"], str(vocab), str(tmp_path / "ft"),
            **tokenizer_flags), 0),
        "predict": lambda: predict.run(predict.PredictConfig(
            **model, vocab_file=str(vocab), text=["[MASK]"], **tokenizer_flags)),
        "analyze_attention": lambda: analyze_attention.analyse(analyze_attention.AnalysisArgs(
            **model, vocab_file=str(vocab), output_dir=str(tmp_path / "a"), input_file=str(text),
            **tokenizer_flags)),
        "probe_syntax": lambda: probe_syntax.run_probes(probe_syntax.ProbeArgs(
            **model, vocab_file=str(vocab), output_dir=str(tmp_path / "p"), train_conllu=ud,
            **tokenizer_flags)),
        "tokenize": lambda: tokenize_text.run(tokenize_text.TokenizeConfig(
            str(vocab), ["設定"], **tokenizer_flags)),
    }


ENTRY_POINTS = ("create_pretraining_data", "prepare_dataset", "finetune", "predict",
                "analyze_attention", "probe_syntax", "tokenize")


@pytest.mark.parametrize("mismatch", ["casing", "dictionary"])
def test_every_entry_point_refuses_a_mismatch(mismatch, ja_mecab, shared_data, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(open(ja_mecab.vocab_file, "rb").read())
    spec = ja_mecab.spec
    if mismatch == "casing":
        flags, message = {"do_lower_case": True}, r"--do_lower_case=true contradicts .*vocab\."
    else:
        spec = dataclasses.replace(spec, dictionary=dataclasses.replace(spec.dictionary,
                                                                        version="0.9"))
        flags, message = {}, "unidic-lite==0.9.*pass --allow_dictionary_mismatch"
    tokenizer_spec.write_spec(spec, vocab)
    refused = []
    for name, run in _entry_points(tmp_path, shared_data, vocab, **flags).items():
        with pytest.raises(TokenizerSpecError, match=message):
            run()
        refused.append(name)
    assert tuple(refused) == ENTRY_POINTS
    assert not list(tmp_path.glob("out.tfrecord*")) and not (tmp_path / "dataset").exists()


# --------------------------------------------------------------------------- Japanese, Korean


def test_japanese_mecab_wordpiece(ja_mecab, ja_held_out):
    vocab = list(ja_mecab.vocab)
    assert sum(bool(re.fullmatch("[\u4e00-\u9fff]{2,}", t)) for t in vocab) > 100
    assert {"設定", "実行", "参照"} <= set(vocab)
    assert not {"パッケージを", "のリスト", "ファイルの"} & set(vocab)
    # No piece crosses a MeCab word: pieces are made inside MeCab's words.
    assert crossing_pieces(ja_mecab, ja_held_out, "mecab") == []
    ids, row_splits, word_starts = ja_mecab.tokenize_words_batch(ja_held_out)
    # The initial alphabet: no whole word becomes [UNK] for want of a "##" character.
    assert (ids == ja_mecab.unk_id).mean() < 0.003
    np.testing.assert_array_equal(word_starts, ja_mecab.word_start_table()[ids])
    other_backend = load_tokenizer(ja_mecab.vocab_file, backend="tokenizers")
    np.testing.assert_array_equal(other_backend.tokenize_ids_batch(ja_held_out)[0], ids)
    for i, line in enumerate(ja_held_out[:100]):
        pieces = ja_mecab.tokenize_with_offsets(line)
        assert [p.id for p in pieces] == ids[row_splits[i]:row_splits[i + 1]].tolist()
        for p in pieces:  # offsets into the original text ("…" is NFKC's "...": 2 pieces)
            if p.token != "[UNK]":
                assert p.token.lstrip("#") in unicodedata.normalize("NFKC", line[p.start:p.end])
    text = "ﾃﾞｰﾀﾍﾞｰｽを設定"  # half-width kana: NFKC joins the voicing marks
    assert [(text[p.start:p.end], p.word) for p in ja_mecab.tokenize_with_offsets(text)] == [
        ("ﾃﾞｰﾀ", 0), ("ﾍﾞｰｽ", 0), ("を", 1), ("設定", 2)]


def test_initial_alphabet_of_the_dictionary(shared_data, tmp_path_factory):
    # cl-tohoku's alphabet: the characters of UniDic 2.1.2's words, NFKC, printable (its
    # README: "The size of the initial alphabet: 7012"), read here from unidic-lite's sys.dic.
    spec = tokenizer_spec.preset_spec("mecab")
    alphabet = build_vocab.alphabet_of("dictionary", [], spec)
    assert len(alphabet) == 7012 and {"鬱", "憂", "ぱ", "ヴ", "A"} <= set(alphabet)
    with pytest.raises(build_vocab.BuildVocabError,
                       match="--initial_alphabet=dictionary: .*'mecab-ko'.*pass corpus"):
        build_vocab.alphabet_of("dictionary", [], tokenizer_spec.preset_spec("mecab-ko"))
    vocab = make_vocab(shared_data, tmp_path_factory, JA, corpus_lines(shared_data, JA, 0, 300),
                       tokenizer="mecab", vocab_size=16000, initial_alphabet="dictionary")
    tokenizer = load_tokenizer(vocab)
    # Characters the training text lacks, at a word's start and inside one: no [UNK].
    assert "鬱" not in "".join(corpus_lines(shared_data, JA, 0, 300))
    pieces = tokenizer.tokenize("憂鬱な鬱病")
    assert "[UNK]" not in pieces and {"##鬱", "鬱"} <= set(pieces), pieces


def test_japanese_character_mode(shared_data, tmp_path_factory, ja_held_out):
    vocab = make_vocab(shared_data, tmp_path_factory, JA, corpus_lines(shared_data, JA, 0, 2000),
                       tokenizer="character", vocab_size=3000)
    tokenizer = load_tokenizer(vocab)
    for line in ja_held_out[:50]:
        pieces = tokenizer.tokenize_with_offsets(line)
        assert all(p.end - p.start == 1 or p.token == "[UNK]" for p in pieces)
        words = [[p for p in pieces if p.word == w] for w in range(pieces[-1].word + 1)]
        assert all(not w[0].token.startswith("##") for w in words if w)
        assert all(p.token.startswith("##") for w in words for p in w[1:] if p.token != "[UNK]")
    assert crossing_pieces(tokenizer, ja_held_out[:50], "mecab") == []


def test_korean_mecab_ko_wordpiece(shared_data, tmp_path_factory):
    vocab = make_vocab(shared_data, tmp_path_factory, KO, corpus_lines(shared_data, KO, 0, 2400),
                       tokenizer="mecab-ko", vocab_size=3000, initial_alphabet="corpus")
    tokenizer = load_tokenizer(vocab)
    assert tokenizer.spec.dictionary.package == "python-mecab-ko-dic"
    held_out = corpus_lines(shared_data, KO, 2500, 2830)
    assert crossing_pieces(tokenizer, held_out, "mecab-ko") == []
    jamo = re.compile("[\u1100-\u11ff]")
    assert not any(jamo.search(t) for t in tokenizer.vocab)
    for line in held_out[:50]:
        for p in tokenizer.tokenize_with_offsets(line):  # morphemes are substrings
            assert p.token == "[UNK]" or line[p.start:p.end] == p.token.lstrip("#")
    text = "  패키지를 설치합니다."  # python-mecab-ko's own spans ignore leading spaces
    assert [(p.token, text[p.start:p.end]) for p in tokenizer.tokenize_with_offsets(text)] == [
        (w, w) for w in ("패키지", "를", "설치", "합니다", ".")]
    _jamo_offsets_on_klue(tokenizer, shared_data)


def _jamo_offsets_on_klue(tokenizer, shared_data):
    """Issue 46: a vowel jamo after a syllable or a space (ㅠㅠ typed as conjoining jamo, common
    in web text) joined the character before it, so pieces shared offsets or covered a space."""
    from bert_tf.data import ner

    text = "듯\u1172\u1172 \u1173\u1173 a"
    assert [(p.start, p.end) for p in tokenizer.tokenize_with_offsets(text)] == [
        (0, 1), (1, 3), (4, 6), (7, 8)]
    # NFKC composes compatibility jamo (ㄱㅏ -> 가): those still map to both characters.
    assert Normalizer(True, False, False).with_offsets("ㄱㅏ ㅋㅋ") == (
        "가 ᄏᄏ", [0, 2, 3, 4], [2, 3, 4, 5])
    wrong, pieces = [], 0
    for sentence in ner.read_ner_file(str(shared_data / "ko/klue-ner-v1.1_dev_first4000.tsv")):
        for p in tokenizer.tokenize_with_offsets(sentence.text):
            covered = sentence.text[p.start:p.end]
            pieces += 1
            if " " in covered or p.token != "[UNK]" and covered != p.token.removeprefix("##"):
                wrong.append((covered, p))
    assert pieces > 100_000 and wrong == []


def test_lower_casing_keeps_kana_and_hangul(shared_data):
    # Google's rule (NFD, drop Mn) turned データベース into テータヘース and 한 into jamo.
    assert normalize_text("データベース ぱ 한국어 Héllo ÅNGSTRÖM", True) == (
        "データベース ぱ 한국어 hello angstrom")
    for name in (JA, KO):
        text = "\n".join(corpus_lines(shared_data, name, 0, 3000))
        kept = re.findall("[\u3040-\u30ff\uac00-\ud7af]", text)
        assert re.findall("[\u3040-\u30ff\uac00-\ud7af]", normalize_text(text, True)) == kept
    uncased = FullTokenizer(shared_data / "vocab/bert-base-uncased.txt")
    assert uncased.tokenize("かが") == ["[UNK]"]  # not "かか": the vocab has no voiced kana
    assert uncased.tokenize("テ") == ["テ"]


def test_sentencepiece_mode_ids(shared_data, tmp_path_factory, ja_held_out):
    import sentencepiece

    vocab = make_vocab(shared_data, tmp_path_factory, JA, corpus_lines(shared_data, JA, 0, 3000),
                       tokenizer="sentencepiece", vocab_size=2000)
    tokenizer = load_tokenizer(vocab)
    model = vocab.parent / "vocab.sentencepiece.model"
    assert tokenizer.spec.sentencepiece_model == model.name
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    lines = vocab.read_text(encoding="utf-8").splitlines()
    assert lines[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert lines == [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    ids, row_splits, word_starts = tokenizer.tokenize_words_batch(ja_held_out)
    expected = processor.encode([unicodedata.normalize("NFKC", t) for t in ja_held_out])
    assert [ids[row_splits[i]:row_splits[i + 1]].tolist() for i in range(len(expected))] == (
        expected)
    # Masking units: SentencePiece's words, except that a piece of kana or kanji is one unit
    # (in unspaced Japanese a "word" is a sentence).
    unspaced = re.compile("[\u3005\u3040-\u30ff\u4e00-\u9fff]")
    np.testing.assert_array_equal(word_starts, [
        lines[i].startswith("\u2581") or bool(unspaced.search(lines[i])) for i in ids.tolist()])
    # Whole-word masking then masks every sequence about as much as per-piece masking would
    # (with SentencePiece's words, whole sentences, Google's rule masked none of most).
    rows, lengths, starts, _ = _instances(tokenizer, ja_held_out[:100])
    wanted = np.minimum(10, np.maximum(1, np.round(lengths * 0.15)))
    for masked in _static_and_dynamic_masks(tokenizer, rows, lengths, starts, 10):
        counts = np.array([len(m) for m in masked])
        assert counts.min() >= 1 and counts.sum() > 0.95 * wanted.sum(), (counts, wanted)
    text = "ﾃﾞｰﾀﾍﾞｰｽ を設定"
    pieces = tokenizer.tokenize_with_offsets(text)
    assert [p.id for p in pieces] == processor.encode(unicodedata.normalize("NFKC", text))
    assert "".join(text[p.start:p.end] for p in pieces) == text.replace(" ", "")


# --------------------------------------------------------------------------- whole words


def _instances(tokenizer, lines):
    """[CLS] line [SEP] rows: (input_ids, lengths, word_starts, pieces of each line)."""
    n = len(lines)
    input_ids = np.zeros([n, SEQ], np.int64)
    word_starts = np.ones([n, SEQ], bool)
    lengths, pieces = np.zeros([n], np.int64), []
    for i, line in enumerate(lines):
        ids, _, starts = tokenizer.tokenize_words_batch([line])
        ids, starts = ids[:SEQ - 2], starts[:SEQ - 2]
        input_ids[i, :len(ids) + 2] = [tokenizer.cls_id, *ids, tokenizer.sep_id]
        word_starts[i, 1:len(ids) + 1] = starts
        lengths[i] = len(ids) + 2
        pieces.append(tokenizer.tokenize_with_offsets(line)[:SEQ - 2])
    return input_ids, lengths, word_starts, pieces


def _words_masked_whole(lines, pieces, masked_rows):
    """(multi-piece MeCab words with a masked piece, those masked whole)."""
    touched = whole = 0
    for line, line_pieces, masked in zip(lines, pieces, masked_rows, strict=True):
        for start, end in reference_spans("mecab", line):
            inside = [i + 1 for i, p in enumerate(line_pieces) if start <= p.start < end]
            if len(inside) >= 2 and masked & set(inside):
                touched += 1
                whole += set(inside) <= masked
    return touched, whole


def _static_and_dynamic_masks(tokenizer, input_ids, lengths, word_starts, predictions,
                              masking=None):
    """[CLS] A [SEP] rows -> the masked positions of each row (sets), by static whole-word
    masking (masking.choose_masks) and by dynamic (apply_dynamic_masking; `masking` or the
    tokenizer's DynamicMasking)."""
    seq_length = input_ids.shape[1]
    config = pdata.InstanceConfig(max_seq_length=seq_length, max_predictions_per_seq=predictions,
                                  do_whole_word_mask=True)
    _, positions, _, weights, _ = choose_masks(input_ids, lengths, lengths - 2, config, tokenizer,
                                               word_starts, np.random.default_rng(0))
    static = [set(p[w > 0].tolist()) for p, w in zip(positions, weights, strict=True)]
    masking = masking or DynamicMasking.from_tokenizer(tokenizer, whole_word=True)
    mask = np.arange(seq_length)[None, :] < lengths[:, None]
    out = apply_dynamic_masking({"input_ids": tf.constant(input_ids, tf.int32),
                                 "input_mask": tf.constant(mask, tf.int32)}, masking,
                                predictions, tf.constant([1, 2], tf.int64))
    dynamic = [set(p[w > 0].tolist()) for p, w in zip(out["masked_lm_positions"].numpy(),
                                                      out["masked_lm_weights"].numpy(),
                                                      strict=True)]
    return static, dynamic


def test_a_sequence_where_no_word_fits_masks_its_pieces():
    # Ids: 5 begins a word, 6 continues one. Row 0 is one word of 20 pieces, more than its 3
    # positions to mask: Google's rule masked nothing there. Row 1 (1 position): the 1-piece
    # word fits, so the 4-piece one is never cut.
    table = (False,) * 5 + (True, False)
    tokenizer = types.SimpleNamespace(vocab_size=7, mask_id=4)
    masking = DynamicMasking(7, 4, (2, 3, 0), word_start_table=table)
    input_ids = np.zeros([2, 32], np.int64)
    input_ids[0, :22] = [2, 5, *[6] * 19, 3]
    input_ids[1, :7] = [2, 5, 5, 6, 6, 6, 3]
    lengths = np.array([22, 7])
    word_starts = np.array(table)[input_ids] | (input_ids < 5)
    for masked in _static_and_dynamic_masks(tokenizer, input_ids, lengths, word_starts, 5,
                                            masking):
        assert len(masked[0]) == 3 and masked[0] <= set(range(1, 21)), masked
        assert masked[1] == {1}, masked


def test_whole_word_masking_groups_mecab_words(ja_mecab, ja_held_out):
    lines = ja_held_out[:200]
    input_ids, lengths, word_starts, pieces = _instances(ja_mecab, lines)
    # A line whose every word is longer than its positions to mask ("インストール" alone: 2
    # pieces, 1 position) masks single pieces (test_a_sequence_where_no_word_fits_...).
    budgets = num_to_predict(lengths, 0.15, 10)
    no_word_fits = [np.diff(np.append(np.flatnonzero(s[1:n - 1]), n - 2)).min() > b
                    for s, n, b in zip(word_starts, lengths, budgets, strict=True)]
    assert 0 < sum(no_word_fits) < 10
    for masked in _static_and_dynamic_masks(ja_mecab, input_ids, lengths, word_starts, 10):
        kept = [i for i, skip in enumerate(no_word_fits) if not skip]
        touched, whole = _words_masked_whole([lines[i] for i in kept], [pieces[i] for i in kept],
                                             [masked[i] for i in kept])
        assert touched > 30 and whole == touched, (touched, whole)
        assert all(masked)
        assert sum(map(len, masked)) > 0.1 * (lengths - 2).sum()


def test_data_workers_do_not_hash_the_dictionary_again(ja_mecab, ja_held_out, tmp_path):
    # plan_jobs checks the installed dictionary; a worker process starts with empty caches
    # (cleared here) and used to hash unidic-lite's 260 MB again, 0.2 CPU-s each here.
    text = tmp_path / "ja.txt"
    text.write_text("\n".join(ja_held_out[:20]) + "\n", encoding="utf-8")
    config = pdata.InstanceConfig(max_seq_length=SEQ, max_predictions_per_seq=10, dupe_factor=1)
    word_splitters.dictionary_identity.cache_clear()
    _, _, jobs, _ = pdata.plan_jobs(str(text), str(tmp_path / "ja.tfrecord"), ja_mecab.vocab_file,
                                    None, config)
    assert word_splitters.dictionary_identity.cache_info().misses == 1
    word_splitters.dictionary_identity.cache_clear()
    pdata._tokenizer.cache_clear()
    assert pdata._run_shard(jobs[0])["instances"] > 0
    assert word_splitters.dictionary_identity.cache_info().misses == 0


def test_create_pretraining_data_masks_mecab_words_whole(ja_mecab, ja_held_out, tmp_path):
    text = tmp_path / "ja.txt"
    text.write_text("\n".join(ja_held_out[:60]) + "\n\n" + "\n".join(ja_held_out[60:120]) + "\n",
                    encoding="utf-8")
    out = tmp_path / "ja.tfrecord"
    pdata.create_pretraining_data(str(text), str(out), ja_mecab.vocab_file, config=pdata.
                                  InstanceConfig(max_seq_length=SEQ, max_predictions_per_seq=10,
                                                 dupe_factor=2, do_whole_word_mask=True),
                                  progress=False)
    starts_table = ja_mecab.word_start_table()
    split_words = multi_piece_masked = 0
    for record in tf.data.TFRecordDataset(str(out)):
        example = tf.train.Example.FromString(record.numpy()).features.feature
        ids = np.array(example["input_ids"].int64_list.value)
        positions = [p for p, w in zip(example["masked_lm_positions"].int64_list.value,
                                       example["masked_lm_weights"].float_list.value,
                                       strict=True) if w > 0]
        ids[positions] = [example["masked_lm_ids"].int64_list.value[i]
                          for i in range(len(positions))]
        special = np.isin(ids, [ja_mecab.cls_id, ja_mecab.sep_id])
        # Truncation may leave a "##" piece first in a segment: it starts a unit there.
        word = np.cumsum(starts_table[ids] | special | np.roll(special, 1))
        masked_words = set(word[positions])
        split_words += sum(not set(np.flatnonzero(word == w)) <= set(positions)
                           for w in masked_words)
        multi_piece_masked += sum((word == w).sum() > 1 for w in masked_words)
    assert split_words == 0 and multi_piece_masked > 10
