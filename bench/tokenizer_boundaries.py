"""Where each tokenizer mode cuts Japanese and Korean text, against MeCab's words (unidic-lite)
and Mecab-ko's morphemes, and how whole-word masking groups them (issue 34's done-when
figures). Prints a table; asserts nothing.

    .venv/bin/python bench/tokenizer_boundaries.py \
        --ja_vocabs=bert:VOCAB,mecab:VOCAB,... --ko_vocabs=... \
        --ja_text=HELD_OUT.txt --ko_text=HELD_OUT.txt

Vocabs come from `python -m bert_tf build_vocab --tokenizer=...` on the other part of the
text (bench/README.md has the commands). Figures, per vocab:
- multi_kanji: entries of two or more kanji (設定, 実行); particle_entries: entries that MeCab,
  reading them alone, splits into a noun and a particle (パッケージを, のリスト);
- crossing: pieces of the held-out text whose span has a reference word boundary inside it;
- wwm_units: of the multi-piece reference words touched by static whole-word masking
  (bert_tf.data.masking, 3 passes over the held-out lines packed into sequences of 128 as
  create_pretraining_data fills them), the share masked whole; dyn_wwm_units: the same with the
  in-graph dynamic masking (input_pipeline.apply_dynamic_masking);
- records without a mask: records of create_pretraining_data.py --do_whole_word_mask over the
  held-out text (seq 128, dupe_factor 2) that have no masked position;
- lowercase_kana_hangul_changed: kana/Hangul characters changed by --do_lower_case's
  normalisation (Google's rule, before and after bert_tf's fix);
- chars/CPU-s: tokenize_words_batch (create_pretraining_data's call) over the held-out text,
  median of 3 rounds, modes interleaved; CPU time of the process (all its threads).
"""

import argparse
import collections
import dataclasses
import os
import re
import statistics
import tempfile
import time
import unicodedata

import numpy as np

from bert_tf.data import word_splitters
from bert_tf.data.masking import choose_masks
from bert_tf.data.normalization import Normalizer
from bert_tf.data.pretraining_data import InstanceConfig
from bert_tf.data.tokenization import load_tokenizer, normalize_text
from bert_tf.data.tokenizer_spec import TokenizerSpec

KANA_HANGUL = re.compile("[\u3040-\u30ff\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
SEQ = 128


def reference_words(lines, splitter_name):
    """Each line's reference word spans in the ORIGINAL text: the splitter on NFKC text. Words
    that NFKC made out of one original character ("…" -> "...", three MeCab words) are left
    out: in the original text they are no word boundary."""
    spec = TokenizerSpec(word_tokenizer_type=splitter_name, normalization="nfkc",
                         do_lower_case=False, strip_accents=False, tokenize_chinese_chars=False)
    splitter = word_splitters.make_splitter(spec)
    normalizer = Normalizer(True, False, False)
    out = []
    for line in lines:
        normalised, starts, ends = normalizer.with_offsets(line)
        spans = [(starts[a], ends[b - 1]) for a, b in splitter.spans(normalised) if b > a]
        counts = collections.Counter(spans)
        out.append([span for span in spans if counts[span] == 1])
    return out


def crossing_share(pieces_of_lines, words_of_lines):
    crossing = total = 0
    for pieces, words in zip(pieces_of_lines, words_of_lines, strict=True):
        inner = {b for a, b in words} | {a for a, b in words}
        for piece in pieces:
            total += 1
            crossing += any(piece.start < b < piece.end for b in inner)
    return crossing / max(total, 1)


def pieces_of_words(pieces, words):
    """For each reference word, the indices of the pieces inside it (none if a piece crosses)."""
    out = []
    for start, end in words:
        inside = [i for i, p in enumerate(pieces) if start <= p.start and p.end <= end
                  and p.end > p.start]
        out.append(inside)
    return out


def packed_rows(lines, tokenizer, words_of_lines):
    """Consecutive lines packed into [CLS] ... [SEP] rows of up to SEQ positions, as
    create_pretraining_data fills its sequences (a row of one short line has a masking budget
    of one or two pieces, which no multi-piece word fits) -> (input_ids, lengths, word_starts,
    each row's multi-piece reference words as lists of positions)."""
    rows, current = [], ([], [], [])
    for line, words in zip(lines, words_of_lines, strict=True):
        pieces = tokenizer.tokenize_with_offsets(line)[:SEQ - 2]
        ids, _, starts = tokenizer.tokenize_words_batch([line])
        if not len(pieces):
            continue
        if len(current[0]) + len(pieces) > SEQ - 2:
            rows.append(current)
            current = ([], [], [])
        offset = len(current[0]) + 1
        current[2].extend([[offset + g for g in group]
                           for group in pieces_of_words(pieces, words) if len(group) >= 2])
        current[0].extend(ids[:SEQ - 2].tolist())
        current[1].extend(starts[:SEQ - 2].tolist())
    rows.append(current)
    input_ids = np.zeros([len(rows), SEQ], np.int64)
    word_starts = np.ones([len(rows), SEQ], bool)
    lengths = np.array([len(ids) + 2 for ids, _, _ in rows])
    for i, (ids, starts, _) in enumerate(rows):
        input_ids[i, 0], input_ids[i, len(ids) + 1] = tokenizer.cls_id, tokenizer.sep_id
        input_ids[i, 1:len(ids) + 1] = ids
        word_starts[i, 1:len(ids) + 1] = starts
    return input_ids, lengths, word_starts, [groups for _, _, groups in rows]


def masked_whole_share(lines, tokenizer, words_of_lines, dynamic):
    """Of the multi-piece words with a masked piece, the share with every piece masked."""
    input_ids, lengths, word_starts, groups = packed_rows(lines, tokenizer, words_of_lines)
    n = len(input_ids)
    whole = touched = 0
    for seed in range(3):
        if dynamic:
            masked = _dynamic_positions(input_ids, lengths, tokenizer, seed)
        else:
            config = InstanceConfig(max_seq_length=SEQ, max_predictions_per_seq=20,
                                    do_whole_word_mask=True)
            _, positions, _, weights, _ = choose_masks(
                input_ids, lengths, lengths - 2, config, tokenizer, word_starts,
                np.random.default_rng(seed))
            masked = [set(positions[i][weights[i] > 0].tolist()) for i in range(n)]
        for i in range(n):
            for group in groups[i]:
                hit = [g in masked[i] for g in group]
                touched += any(hit)
                whole += all(hit)
    return whole / max(touched, 1)


def unmasked_records(vocab, text_path):
    """(records without a masked position, records) of create_pretraining_data.py
    --do_whole_word_mask over the held-out text (seq 128, 20 predictions, dupe_factor 2)."""
    import tensorflow as tf

    from bert_tf.data.pretraining_data import create_pretraining_data

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "records.tfrecord")
        create_pretraining_data(text_path, path, vocab, progress=False, config=InstanceConfig(
            max_seq_length=SEQ, max_predictions_per_seq=20, dupe_factor=2,
            do_whole_word_mask=True))
        weights = [tf.train.Example.FromString(r.numpy()).features.feature[
            "masked_lm_weights"].float_list.value for r in tf.data.TFRecordDataset(path)]
    return sum(not any(w) for w in weights), len(weights)


def _dynamic_positions(input_ids, lengths, tokenizer, seed):
    import tensorflow as tf

    from bert_tf.data.input_pipeline import DynamicMasking, apply_dynamic_masking

    masking = DynamicMasking.from_tokenizer(tokenizer, whole_word=True)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    out = apply_dynamic_masking({"input_ids": tf.constant(input_ids, tf.int32),
                                 "input_mask": tf.constant(mask)}, masking, 20,
                                tf.constant([seed, 0], tf.int64))
    positions = out["masked_lm_positions"].numpy()
    weights = out["masked_lm_weights"].numpy()
    return [set(positions[i][weights[i] > 0].tolist()) for i in range(len(positions))]


def vocab_entries(tokenizer, tagger):
    tokens = [t for t in tokenizer.vocab if not t.startswith("[")]
    multi_kanji = sum(bool(re.fullmatch("[\u4e00-\u9fff]{2,}", t.removeprefix("##")))
                      for t in tokens)
    particle = []
    for token in tokens:
        if token.startswith(("##", "\u2581")) or len(token) < 2:
            continue
        pos = [node.feature[0] for node in tagger(token)]
        if len(pos) >= 2 and "助詞" in pos and "名詞" in pos:
            particle.append(token)
    return multi_kanji, particle


def lowercase_changes(lines):
    """(kana/Hangul characters, those changed by Google's lower-casing (NFD, drop Mn), those
    changed by bert_tf's): character by character, as both rules work."""
    def google(char):
        return "".join(c for c in unicodedata.normalize("NFD", char.lower())
                       if unicodedata.category(c) != "Mn")
    chars = KANA_HANGUL.findall("".join(lines))
    return (len(chars), sum(google(c) != c for c in chars),
            sum(normalize_text(c, True) != c for c in chars))


@dataclasses.dataclass
class Row:
    language: str
    mode: str
    vocab_size: int
    pieces_per_char: float
    crossing: float
    wwm_units: float
    dyn_wwm_units: float
    unk: float
    unmasked_records: tuple[int, int]
    chars_per_cpu_second: float = 0.0


def tokenizing_speed(rows, tokenizers, lines, rounds=3):
    """Sets each row's chars_per_cpu_second (rounds interleaved over the modes)."""
    seconds = [[] for _ in rows]
    for _ in range(rounds):
        for i, tokenizer in enumerate(tokenizers):
            started = time.process_time()
            tokenizer.tokenize_words_batch(lines)
            seconds[i].append(time.process_time() - started)
    for row, times in zip(rows, seconds, strict=True):
        row.chars_per_cpu_second = sum(map(len, lines)) / max(statistics.median(times), 1e-9)


def measure(language, vocabs, lines, splitter_name, tagger, text_path):
    words = reference_words(lines, splitter_name)
    rows, tokenizers = [], []
    for mode, vocab in vocabs:
        tokenizer = load_tokenizer(vocab)
        tokenizers.append(tokenizer)
        pieces = [tokenizer.tokenize_with_offsets(line) for line in lines]
        num_pieces = sum(map(len, pieces))
        rows.append(Row(language, mode, tokenizer.vocab_size,
                        num_pieces / sum(len(line) for line in lines),
                        crossing_share(pieces, words),
                        masked_whole_share(lines, tokenizer, words, dynamic=False),
                        masked_whole_share(lines, tokenizer, words, dynamic=True),
                        sum(p.id == tokenizer.unk_id for ps in pieces for p in ps) / num_pieces,
                        unmasked_records(vocab, text_path)))
        if language == "ja":
            multi_kanji, particle = vocab_entries(tokenizer, tagger)
            print(f"{language} {mode}: {multi_kanji} multi-kanji entries, {len(particle)} "
                  f"noun+particle entries (MeCab reading each alone), e.g. {particle[:8]}")
        ids, _, starts = tokenizer.tokenize_words_batch(lines)
        unknown = ids == tokenizer.unk_id
        print(f"{language} {mode}: [UNK] pieces: {(unknown & starts).sum()} begin a splitter word, "
              f"{(unknown & ~starts).sum()} are inside one")
    tokenizing_speed(rows, tokenizers, lines)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ja_vocabs", default="", help="mode:vocab,... for Japanese")
    parser.add_argument("--ko_vocabs", default="", help="mode:vocab,... for Korean")
    parser.add_argument("--ja_text", help="held-out Japanese text, one line per sentence")
    parser.add_argument("--ko_text", help="held-out Korean text")
    parser.add_argument("--max_lines", type=int, default=2000)
    args = parser.parse_args()
    tagger = word_splitters.MecabSplitter().tagger
    rows = []
    for language, vocabs, path, splitter in (("ja", args.ja_vocabs, args.ja_text, "mecab"),
                                             ("ko", args.ko_vocabs, args.ko_text, "mecab-ko")):
        if not vocabs:
            continue
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip()][:args.max_lines]
        total, google, ours = lowercase_changes(lines)
        print(f"{language}: --do_lower_case changes {google} of {total} kana/Hangul characters "
              f"with Google's rule, {ours} with bert_tf's")
        pairs = [v.split(":", 1) for v in vocabs.split(",")]
        rows += measure(language, pairs, lines, splitter, tagger, path)
    print("| lang | mode | vocab | pieces/char | pieces crossing a word | multi-piece words "
          "masked whole (static) | (dynamic) | [UNK] | records without a mask | M chars/CPU-s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.language} | {r.mode} | {r.vocab_size} | {r.pieces_per_char:.3f} | "
              f"{100 * r.crossing:.2f}% | {100 * r.wwm_units:.1f}% | {100 * r.dyn_wwm_units:.1f}% "
              f"| {100 * r.unk:.2f}% | {r.unmasked_records[0]} of {r.unmasked_records[1]} "
              f"| {r.chars_per_cpu_second / 1e6:.2f} |")


if __name__ == "__main__":
    main()
