"""Statistics of BERT's attention maps, after Clark et al. 2019, "What Does BERT
Look At? An Analysis of BERT's Attention" (arXiv:1906.04341).

Everything here is numpy over attention maps of one segment at a time
([layers, heads, n, n], rows = attending token, each row sums to 1) plus the
segment's tokens, so it is independent of the model. Accumulators keep running
sums, so memory does not grow with the number of segments.
"""

import math

import numpy as np

CLS, SEP = "[CLS]", "[SEP]"
SPECIAL_TOKENS = (CLS, SEP)

# Per head: average attention (fraction of each query's attention) sent to...
TARGET_STATISTICS = ("cls", "sep", "period", "comma", "punct", "next", "prev", "self",
                     "sep_to_sep", "other_to_sep")
ENTROPY_STATISTICS = ("entropy", "cls_entropy")
STATISTICS = TARGET_STATISTICS + ENTROPY_STATISTICS
GRADIENT_TARGETS = ("cls", "sep", "punct", "other")

# Behaviours used to colour the MDS map: the key statistic a head must send at
# least BEHAVIOUR_THRESHOLD of its attention to, in this order of precedence.
BEHAVIOURS = (("cls", "[CLS]"), ("sep", "[SEP]"), ("punct", ". and ,"), ("next", "next token"),
              ("prev", "previous token"), ("self", "self"))
BEHAVIOUR_THRESHOLD = 0.5
BROAD_ENTROPY_FRACTION = 0.75  # "attends broadly": entropy >= this x uniform entropy


def _xlogx(p):
    """p * log(p) with 0 log 0 = 0."""
    return p * np.log(np.maximum(p, np.finfo(p.dtype).tiny))


# ---------------------------------------------------------------------------
# Words from word pieces


def word_ids_from_pieces(tokens):
    """Index of the word each WordPiece token belongs to: a '##' piece continues
    the previous word; [CLS]/[SEP] are words of their own."""
    word_ids, current = [], -1
    for i, token in enumerate(tokens):
        continues = (token.startswith("##") and i > 0 and tokens[i - 1] not in SPECIAL_TOKENS)
        if not continues:
            current += 1
        word_ids.append(current)
    return word_ids


def words_from_pieces(tokens, word_ids):
    """The words' strings: pieces joined without their '##'."""
    words = [""] * (max(word_ids) + 1)
    for token, word in zip(tokens, word_ids, strict=True):
        words[word] += token[2:] if token.startswith("##") and words[word] else token
    return words


def to_word_attention(attention, word_ids):
    """Token-level maps [..., n, n] -> word-level maps [..., w, w]: attention TO
    a split word is the sum over its pieces, attention FROM it the mean of its
    pieces' rows (Clark et al., Section 4.1), so rows still sum to 1."""
    word_ids = np.asarray(word_ids)
    if attention.shape[-1] != len(word_ids):
        raise ValueError(f"attention has {attention.shape[-1]} tokens, word_ids {len(word_ids)}")
    pieces_of_word = np.eye(word_ids.max() + 1, dtype=attention.dtype)[word_ids]  # [n, w]
    pieces_per_word = pieces_of_word.sum(0)
    to_words = attention @ pieces_of_word
    return np.swapaxes(pieces_of_word, 0, 1) @ to_words / pieces_per_word[:, None]


def to_word_vectors(vectors, word_ids):
    """Piece vectors [..., n, D] -> word vectors [..., w, D]: the mean of each word's
    pieces (as Clark et al. average a split word's attention rows)."""
    word_ids = np.asarray(word_ids)
    pieces_of_word = np.eye(word_ids.max() + 1, dtype=vectors.dtype)[word_ids]  # [n, w]
    return (np.swapaxes(pieces_of_word, 0, 1) @ vectors) / pieces_of_word.sum(0)[:, None]


# ---------------------------------------------------------------------------
# Per-segment statistics


def _mean_attention_to(attention, from_rows, to_columns):
    """Mean over the queries in from_rows of the attention they send to the
    keys in to_columns, per head; None when no query is selected."""
    if not from_rows.any():
        return None
    return attention[..., from_rows, :][..., to_columns].sum(-1).mean(-1)


def segment_statistics(attention, tokens):
    """Statistics of one segment: attention [layers, heads, n, n], tokens (n
    strings). Returns {name: [layers, heads] array}; statistics undefined for
    this segment (e.g. [SEP]->[SEP] without a [SEP]) are left out."""
    n = attention.shape[-1]
    if len(tokens) != n:
        raise ValueError(f"{len(tokens)} tokens for attention maps over {n} positions")
    tokens = np.asarray(tokens, dtype=object)
    every = np.ones(n, dtype=bool)
    is_sep, is_cls = tokens == SEP, tokens == CLS
    is_period, is_comma = tokens == ".", tokens == ","
    stats = {
        "cls": _mean_attention_to(attention, every, is_cls),
        "sep": _mean_attention_to(attention, every, is_sep),
        "period": _mean_attention_to(attention, every, is_period),
        "comma": _mean_attention_to(attention, every, is_comma),
        "punct": _mean_attention_to(attention, every, is_period | is_comma),
        "sep_to_sep": _mean_attention_to(attention, is_sep, is_sep),
        "other_to_sep": _mean_attention_to(attention, ~is_sep, is_sep),
        "self": np.diagonal(attention, 0, -2, -1).mean(-1),
    }
    if n > 1:  # averaged over the tokens that have a next (previous) token
        stats["next"] = np.diagonal(attention, 1, -2, -1).mean(-1)
        stats["prev"] = np.diagonal(attention, -1, -2, -1).mean(-1)
    row_entropy = -_xlogx(attention).sum(-1)  # [layers, heads, n], nats
    stats["entropy"] = row_entropy.mean(-1)
    if is_cls.any():
        stats["cls_entropy"] = row_entropy[..., is_cls].mean(-1)
    return {name: value for name, value in stats.items() if value is not None}


class HeadStatistics:
    """Running per-head means over segments of every statistic in STATISTICS
    (each segment weighs the same, as in the paper), plus the entropy that
    uniform attention would have."""

    def __init__(self, num_layers, num_heads):
        self.shape = (num_layers, num_heads)
        self.sums = {name: np.zeros(self.shape) for name in STATISTICS}
        self.counts = dict.fromkeys(STATISTICS, 0)
        self.num_segments = 0
        self.num_tokens = 0
        self._uniform_entropy_sum = 0.0

    def add(self, attention, tokens):
        if attention.shape[:2] != self.shape:
            raise ValueError(f"attention maps for {attention.shape[:2]} (layers, heads), "
                             f"expected {self.shape}")
        for name, value in segment_statistics(attention, tokens).items():
            self.sums[name] += value
            self.counts[name] += 1
        self.num_segments += 1
        self.num_tokens += len(tokens)
        self._uniform_entropy_sum += math.log(len(tokens))

    @property
    def uniform_entropy(self):
        """Mean entropy of attending uniformly over the whole segment."""
        return self._uniform_entropy_sum / max(self.num_segments, 1)

    def means(self):
        """{name: [layers, heads]}; NaN where no segment defined the statistic."""
        return {name: self.sums[name] / self.counts[name] if self.counts[name]
                else np.full(self.shape, np.nan) for name in STATISTICS}


# ---------------------------------------------------------------------------
# Gradient of the masked-LM loss with respect to the attention weights


class AttentionGradients:
    """Mean |d loss / d attention weight| per head, split by the key the weight
    attends to: [CLS], [SEP], "." or ",", or any other token (Clark et al.,
    Figure 3, plus [CLS], which some models use as their no-op instead)."""

    def __init__(self, num_layers, num_heads):
        shape = (num_layers, num_heads)
        self.sums = {target: np.zeros(shape) for target in GRADIENT_TARGETS}
        self.counts = dict.fromkeys(GRADIENT_TARGETS, 0)
        self.num_segments = 0

    def add(self, gradient, tokens):
        """gradient: [layers, heads, n, n] of one segment, tokens its n tokens."""
        tokens = np.asarray(tokens, dtype=object)
        n = len(tokens)
        is_cls, is_sep = tokens == CLS, tokens == SEP
        is_punct = (tokens == ".") | (tokens == ",")
        columns = {"cls": is_cls, "sep": is_sep, "punct": is_punct,
                   "other": ~(is_cls | is_sep | is_punct)}
        magnitude = np.abs(gradient)
        for target, selected in columns.items():
            self.sums[target] += magnitude[..., selected].sum((-1, -2))
            self.counts[target] += n * int(selected.sum())
        self.num_segments += 1

    def means(self):
        return {target: self.sums[target] / self.counts[target] if self.counts[target]
                else np.full(self.sums[target].shape, np.nan) for target in GRADIENT_TARGETS}


# ---------------------------------------------------------------------------
# Head clustering


class HeadDistances:
    """Jensen-Shannon divergence between every pair of heads, averaged over the
    attending tokens of all segments (Clark et al., Section 6).

    The cost is heads^2/2 x n^2 logarithms per segment, so by default only
    rows_per_segment attending tokens (the same for every head, drawn at
    random) enter the average: an unbiased estimate of the all-token mean."""

    def __init__(self, num_heads_total, rows_per_segment=None, seed=0):
        self.num_heads = num_heads_total
        self.rows_per_segment = rows_per_segment
        self._rng = np.random.default_rng(seed)
        self._sums = np.zeros((num_heads_total, num_heads_total))
        self.num_rows = 0

    def add(self, attention):
        """attention: [..., n, n] of one segment whose leading axes flatten to
        the heads in a fixed order (layer-major)."""
        n = attention.shape[-2]
        if self.rows_per_segment and self.rows_per_segment < n:
            rows = np.sort(self._rng.choice(n, self.rows_per_segment, replace=False))
            attention = attention[..., rows, :]
        maps = attention.reshape(self.num_heads, -1).astype(np.float32)
        rows = attention.shape[-2]
        # JS(P, Q) = H((P+Q)/2) - (H(P) + H(Q))/2, summed over rows. With
        # S = P + Q: sum -m log m over m = S/2 is (-sum S log S + log 2 sum S)/2.
        entropy = -_xlogx(maps).sum(1, dtype=np.float64)
        for head in range(self.num_heads - 1):
            pair_sum = maps[head] + maps[head + 1:]
            mixture_entropy = 0.5 * (-_xlogx(pair_sum).sum(1, dtype=np.float64)
                                     + math.log(2.0) * pair_sum.sum(1, dtype=np.float64))
            js = mixture_entropy - 0.5 * (entropy[head] + entropy[head + 1:])
            self._sums[head, head + 1:] += js
            self._sums[head + 1:, head] += js
        self.num_rows += rows

    def divergences(self):
        """[heads, heads] mean JS divergence per attending token (nats)."""
        return np.maximum(self._sums / max(self.num_rows, 1), 0.0)


def classical_mds(distances, dims=2):
    """Classical (Torgerson) multidimensional scaling of a symmetric distance
    matrix -> [N, dims] coordinates whose distances approximate it."""
    distances = np.asarray(distances, dtype=np.float64)
    n = distances.shape[0]
    centering = np.eye(n) - 1.0 / n
    gram = -0.5 * centering @ (distances ** 2) @ centering
    eigenvalues, eigenvectors = np.linalg.eigh(gram)
    top = np.argsort(eigenvalues)[::-1][:dims]
    return eigenvectors[:, top] * np.sqrt(np.maximum(eigenvalues[top], 0.0))


def head_behaviours(means, uniform_entropy):
    """A label per head ([layers, heads] array of str): the first behaviour in
    BEHAVIOURS the head gives at least half its attention to, else 'broad' if
    its entropy is near uniform, else 'other'."""
    shape = means["entropy"].shape
    labels = np.full(shape, "other", dtype=object)
    labels[means["entropy"] >= BROAD_ENTROPY_FRACTION * uniform_entropy] = "broad"
    assigned = np.zeros(shape, dtype=bool)
    for key, label in BEHAVIOURS:
        hit = (means[key] >= BEHAVIOUR_THRESHOLD) & ~assigned
        labels[hit] = label
        assigned |= hit
    return labels


# ---------------------------------------------------------------------------
# Head-word prediction from dependency parses (Clark et al., Table 1)


DIRECTIONS = ("dependent->head", "head->dependent")


class DependencyAccuracy:
    """Per relation: how often each head's most-attended word is the gold
    syntactic head (Clark et al., Table 1), in both directions (the dependent
    attending to its head, or the head word attending to the dependent), and
    the accuracy of always predicting a fixed offset."""

    def __init__(self, num_layers, num_heads, max_offset=10):
        self.shape = (len(DIRECTIONS), num_layers, num_heads)
        self.offsets = [k for k in range(-max_offset, max_offset + 1) if k]
        self.correct = {}          # relation -> [directions, layers, heads]
        self.offset_correct = {}   # relation -> [offsets]
        self.totals = {}

    def add(self, word_attention, sentence):
        """word_attention: [layers, heads, w+2, w+2] over [CLS] words [SEP];
        [CLS], [SEP] and the word itself are never predicted."""
        num_words = len(sentence.words)
        if word_attention.shape[-1] != num_words + 2:
            raise ValueError(f"word attention over {word_attention.shape[-1]} words for a "
                             f"sentence of {num_words} words plus [CLS] and [SEP]")
        inner = word_attention[..., 1:-1, 1:-1].astype(np.float64)
        inner = np.stack([inner, np.swapaxes(inner, -1, -2)])  # [dir, L, H, w, w]
        diagonal = np.arange(num_words)
        inner[..., diagonal, diagonal] = -np.inf
        predicted = inner.argmax(-1)  # [dir, L, H, w], 0-based word index
        for dependent, (head, relation) in enumerate(zip(sentence.heads, sentence.relations,
                                                        strict=True)):
            if head == 0:
                continue
            gold = head - 1
            if relation not in self.totals:
                self.totals[relation] = 0
                self.correct[relation] = np.zeros(self.shape, dtype=np.int64)
                self.offset_correct[relation] = np.zeros(len(self.offsets), dtype=np.int64)
            self.totals[relation] += 1
            self.correct[relation] += predicted[..., dependent] == gold
            self.offset_correct[relation] += np.array(
                [dependent + k == gold for k in self.offsets])

    def table(self):
        """Rows (most frequent relation first, then 'all'): relation, count,
        the best head (layer, head 1-based; direction) and its accuracy, the
        best fixed offset and its accuracy."""
        rows = []
        relations = sorted(self.totals, key=lambda r: (-self.totals[r], r))
        groups = [(r, self.correct[r], self.offset_correct[r], self.totals[r])
                  for r in relations]
        if relations:
            groups.append(("all", sum(self.correct.values()),
                           sum(self.offset_correct.values()), sum(self.totals.values())))
        for relation, correct, offset_correct, total in groups:
            direction, layer, head = np.unravel_index(correct.argmax(), correct.shape)
            best_offset = int(offset_correct.argmax())
            rows.append({
                "relation": relation, "count": int(total),
                "layer": int(layer) + 1, "head": int(head) + 1,
                "direction": DIRECTIONS[direction],
                "accuracy": float(correct[direction, layer, head] / total),
                "baseline_offset": self.offsets[best_offset],
                "baseline_accuracy": float(offset_correct[best_offset] / total),
            })
        return rows
