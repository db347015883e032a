"""Character-level text normalisation before word splitting: Google BasicTokenizer's cleaning
(drop control characters and U+FFFD, whitespace -> space), optional NFKC (cl-tohoku's Japanese
recipe), lower-casing and accent stripping; with a map from normalised characters back to the
original text's offsets.

Accent stripping is Google's (NFD, then drop combining marks, category Mn) except in kana and
Hangul: there NFD splits off the voicing marks (dakuten U+3099, handakuten U+309A, themselves
Mn: データ -> テータ, google-research/bert #130) and decomposes every Hangul syllable into jamo
(HF tokenizers #49, #436), which changes what the text says rather than an accent. Kana and
Hangul runs are therefore left as they are, and everything else is stripped exactly as Google
does, so Latin text (and every vocab built by Google's rules) keeps Google's ids.
"""

import dataclasses
import functools
import re
import sys
import unicodedata

# Google's WordPiece maps a word longer than this many characters to [UNK]: 200 in Google's
# tokenization.py (WordpieceTokenizer's max_input_chars_per_word), which the TFRecords must match
# (Hugging Face's tokenizers use 100). tensorflow-text counts bytes instead, so it gets 4 bytes
# per character and such words are replaced beforehand.
MAX_CHARS_PER_WORD = 200
# A private-use character: never in a vocab, so the word made of it alone becomes [UNK].
UNK_CHAR = "\ue000"

CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
# Hangul Jamo, hiragana and katakana (with the combining voicing marks U+3099/U+309A), Hangul
# compatibility jamo, katakana phonetic extensions, Hangul jamo extended-A, Hangul syllables and
# jamo extended-B, half-width katakana and Hangul: left whole by accent stripping.
_KANA_HANGUL = re.compile("[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\ua960-\ua97f"
                          "\uac00-\ud7ff\uff65-\uffdc]+")
# Characters that NFC/NFKC may join to the character before them: combining marks and the
# half-width voicing marks. Hangul jamo join only as Unicode composes syllables (below).
_COMBINING = re.compile("[\u0300-\u036f\u3099\u309a\uff9e\uff9f]")
# Unicode's Hangul composition: a leading consonant + vowel (LV), then + final (LVT).
_LEADING, _VOWELS, _FINALS = (0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2)
_SYLLABLES = (0xAC00, 0xD7A3)


def _in(char, span):
    return span[0] <= ord(char) <= span[1]


def _jamo(char):
    """A compatibility or half-width jamo as the conjoining jamo NFKC makes of it (ㄱ -> ᄀ)."""
    if "\u3130" <= char <= "\u318f" or "\uffa0" <= char <= "\uffdc":
        decomposed = unicodedata.normalize("NFKD", char)
        return decomposed if len(decomposed) == 1 else char
    return char


def joins_previous(text, i, nfkc):
    """Whether text[i] may join text[i - 1] in normalisation: a combining mark after a
    non-space; under NFKC (which composes Hangul), a vowel jamo after a leading consonant, a
    final after a vowel that follows one (or after a syllable without a final). Other jamo
    (ㅠㅠ written as vowels) stay their own."""
    if text[i - 1].isspace():
        return False
    if _COMBINING.match(text, i):
        return True
    if not nfkc:
        return False
    char, before = _jamo(text[i]), _jamo(text[i - 1])
    if _in(char, _VOWELS):
        return _in(before, _LEADING)
    if _in(char, _FINALS):
        if _in(before, _SYLLABLES):
            return (ord(before) - _SYLLABLES[0]) % 28 == 0
        return _in(before, _VOWELS) and i > 1 and _in(_jamo(text[i - 2]), _LEADING)
    return False


@functools.cache
def _clean_table(strip_accents):
    """str.translate table: Google's _clean_text (drop NUL, U+FFFD and control/format characters,
    whitespace -> space), plus dropping combining marks (category Mn) when stripping accents."""
    table = {}
    for cp in range(sys.maxunicode + 1):
        char = chr(cp)
        if char in "\t\n\r":
            table[cp] = " "
            continue
        category = unicodedata.category(char)
        if cp == 0 or cp == 0xFFFD or category in ("Cc", "Cf"):
            table[cp] = None
        elif category == "Zs":
            table[cp] = " "
        elif strip_accents and category == "Mn":
            table[cp] = None
    return table


_ASCII_CONTROL = str.maketrans({cp: None for cp in [*range(0, 9), 11, 12, *range(14, 32), 127]}
                               | {9: " ", 10: " ", 13: " "})


def splits_word(char):
    """Whether Google's BasicTokenizer ends a word at `char` (punctuation or a CJK ideograph)."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P") or any(
        lo <= cp <= hi for lo, hi in CJK_RANGES)


def _mark_overlong_words(text):
    """Replaces each word over MAX_CHARS_PER_WORD characters by UNK_CHAR (rare, so plain Python)."""
    out = []
    for chunk in text.split(" "):
        if len(chunk) > MAX_CHARS_PER_WORD:
            word_start = 0
            pieces = []
            for i, char in enumerate([*chunk, " "]):
                if char == " " or splits_word(char):
                    word = chunk[word_start:i]
                    pieces.append(UNK_CHAR if len(word) > MAX_CHARS_PER_WORD else word)
                    pieces.append(char if char != " " else "")
                    word_start = i + 1
            chunk = "".join(pieces)
        out.append(chunk)
    return " ".join(out)


def strip_accents(text):
    """NFD and drop combining marks, outside kana and Hangul (see the module docstring)."""
    table = _clean_table(True)
    if not _KANA_HANGUL.search(text):
        return unicodedata.normalize("NFD", text).translate(table)
    parts, last = [], 0
    for match in _KANA_HANGUL.finditer(text):
        parts.append(unicodedata.normalize("NFD", text[last:match.start()]).translate(table))
        parts.append(match.group())
        last = match.end()
    parts.append(unicodedata.normalize("NFD", text[last:]).translate(table))
    return "".join(parts)


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """Cleaning, then NFKC, lower-casing and accent stripping as set."""

    nfkc: bool = False
    do_lower_case: bool = True
    strip_accents: bool = True

    def __call__(self, text):
        if text.isascii():  # the common case, 10x faster
            text = text.translate(_ASCII_CONTROL)
            return text.lower() if self.do_lower_case else text
        text = text.translate(_clean_table(False))
        if self.nfkc:
            text = unicodedata.normalize("NFKC", text)
        if self.do_lower_case:
            text = text.lower()
        if self.strip_accents:
            text = strip_accents(text)
        return text

    def with_offsets(self, text):
        """(normalised text, starts, ends): normalised character k comes from text[starts[k]:
        ends[k]]. Normalised cluster by cluster (a character and the marks that may join it);
        if that differs from normalising the whole text, every character maps to all of it."""
        normalised = self(text)
        starts, ends, pieces = [], [], []
        cluster_starts = [0] + [i for i in range(1, len(text))
                                if not joins_previous(text, i, self.nfkc)]
        for begin, end in zip(cluster_starts, [*cluster_starts[1:], len(text)], strict=True):
            piece = self(text[begin:end])
            pieces.append(piece)
            starts += [begin] * len(piece)
            ends += [end] * len(piece)
        if "".join(pieces) != normalised:
            return normalised, [0] * len(normalised), [len(text)] * len(normalised)
        return normalised, starts, ends


def normalize_text(text, do_lower_case):
    """Google BasicTokenizer's character-level normalisation of one string (kana and Hangul
    kept whole), with over-long words replaced by UNK_CHAR."""
    text = Normalizer(False, do_lower_case, do_lower_case)(text)
    if len(text) > MAX_CHARS_PER_WORD and max(map(len, text.split())) > MAX_CHARS_PER_WORD:
        text = _mark_overlong_words(text)
    return text
