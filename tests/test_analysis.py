"""Attention statistics (bert_tf.statistics.statistics) on hand-made maps with known answers."""

import base64
import json
import math
import re

import numpy as np
import pytest

from bert_tf.analysis import statistics
from bert_tf.analysis.analyze_attention import build_segments, conllu_segments
from bert_tf.analysis.plots import write_attention_html
from bert_tf.data.conllu import ConlluError, ParsedSentence, read_conllu

TOKENS = ["[CLS]", "the", "cat", ".", "[SEP]", "a", ",", "dog", "[SEP]"]
N = len(TOKENS)
SEPS = [4, 8]


def one_hot_rows(targets, n=N):
    maps = np.zeros((n, n))
    maps[np.arange(n), targets] = 1.0
    return maps


def hand_made_heads():
    """[1 layer, 4 heads]: all to [CLS]; to the next token (last to itself);
    uniform; half to each [SEP]."""
    to_cls = one_hot_rows([0] * N)
    to_next = one_hot_rows([min(i + 1, N - 1) for i in range(N)])
    uniform = np.full((N, N), 1.0 / N)
    to_seps = np.zeros((N, N))
    to_seps[:, SEPS] = 0.5
    return np.stack([to_cls, to_next, uniform, to_seps])[None]


def test_segment_statistics_known_answers():
    stats = statistics.segment_statistics(hand_made_heads(), TOKENS)
    expected = {
        #               to_cls     to_next  uniform    to_seps
        "cls":          [1,         0,       1 / N,     0],
        "sep":          [0,         3 / N,   2 / N,     1],
        "period":       [0,         1 / N,   1 / N,     0],
        "comma":        [0,         1 / N,   1 / N,     0],
        "punct":        [0,         2 / N,   2 / N,     0],
        "next":         [0,         1,       1 / N,     1 / (N - 1)],  # rows 3, 7
        "prev":         [1 / (N - 1), 0,     1 / N,     0.5 / (N - 1)],  # row 5 -> 4
        "self":         [1 / N,     1 / N,   1 / N,     1 / N],
        "sep_to_sep":   [0,         0.5,     2 / N,     1],
        "other_to_sep": [0,         2 / (N - 2), 2 / N, 1],
        "entropy":      [0,         0,       math.log(N), math.log(2)],
        "cls_entropy":  [0,         0,       math.log(N), math.log(2)],
    }
    assert set(stats) == set(statistics.STATISTICS)
    for name, values in expected.items():
        np.testing.assert_allclose(stats[name][0], values, atol=1e-12, err_msg=name)


def test_statistics_undefined_without_the_token_are_left_out():
    tokens = ["a", "b", "c"]
    stats = statistics.segment_statistics(np.full((1, 1, 3, 3), 1 / 3), tokens)
    assert "sep_to_sep" not in stats and "cls_entropy" not in stats
    np.testing.assert_allclose(stats["sep"], 0.0)
    with pytest.raises(ValueError, match="4 tokens"):
        statistics.segment_statistics(np.full((1, 1, 3, 3), 1 / 3), tokens + ["d"])


def test_head_statistics_average_segments_equally():
    accumulator = statistics.HeadStatistics(1, 4)
    accumulator.add(hand_made_heads(), TOKENS)
    short = ["[CLS]", "x", "[SEP]"]
    accumulator.add(np.full((1, 4, 3, 3), 1 / 3), short)
    means = accumulator.means()
    first = statistics.segment_statistics(hand_made_heads(), TOKENS)
    np.testing.assert_allclose(means["cls"][0], (first["cls"][0] + 1 / 3) / 2)
    np.testing.assert_allclose(means["entropy"][0], (first["entropy"][0] + math.log(3)) / 2)
    assert accumulator.uniform_entropy == pytest.approx((math.log(N) + math.log(3)) / 2)
    assert accumulator.num_segments == 2 and accumulator.num_tokens == N + 3
    with pytest.raises(ValueError, match="expected"):
        accumulator.add(np.full((2, 4, 3, 3), 1 / 3), short)


def test_word_level_conversion_sums_to_and_averages_from():
    tokens = ["[CLS]", "play", "##ing", "x", "[SEP]"]
    word_ids = statistics.word_ids_from_pieces(tokens)
    assert word_ids == [0, 1, 1, 2, 3]
    assert statistics.words_from_pieces(tokens, word_ids) == ["[CLS]", "playing", "x", "[SEP]"]
    assert statistics.word_ids_from_pieces(["[CLS]", "##a", "b"]) == [0, 1, 2]
    rng = np.random.default_rng(0)
    maps = rng.random((2, 3, 5, 5))
    maps /= maps.sum(-1, keepdims=True)
    words = statistics.to_word_attention(maps, word_ids)
    assert words.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(words.sum(-1), 1.0)
    # to "playing" = sum of the two pieces' columns; from it = mean of their rows.
    np.testing.assert_allclose(words[..., 0, 1], maps[..., 0, 1] + maps[..., 0, 2])
    np.testing.assert_allclose(words[..., 1, 2], (maps[..., 1, 3] + maps[..., 2, 3]) / 2)
    np.testing.assert_allclose(
        words[..., 1, 1], (maps[..., 1, 1] + maps[..., 1, 2] + maps[..., 2, 1] + maps[..., 2, 2]) / 2)


def test_js_divergence_between_constructed_heads():
    to_cls = one_hot_rows([0] * N)
    to_next = one_hot_rows([min(i + 1, N - 1) for i in range(N)])
    uniform = np.full((N, N), 1.0 / N)
    heads = np.stack([to_cls, to_cls, to_next, uniform])[None]  # [1 layer, 4 heads]
    distances = statistics.HeadDistances(4)
    distances.add(heads)
    js = distances.divergences()
    np.testing.assert_allclose(js, js.T)
    assert js[0, 1] == pytest.approx(0.0, abs=1e-6)          # identical heads
    # to_cls and to_next never share a key: each row of disjoint one-hots is log 2.
    assert js[0, 2] == pytest.approx(math.log(2), abs=1e-6)
    # one-hot vs uniform over N: H(m) - H(uniform)/2 with m = (e + u)/2.
    p = (1 + 1 / N) / 2
    mixture = -(p * math.log(p) + (N - 1) * (1 / (2 * N)) * math.log(1 / (2 * N)))
    assert js[0, 3] == pytest.approx(mixture - math.log(N) / 2, abs=1e-6)
    assert distances.num_rows == N


def test_js_row_sampling_is_unbiased_for_identical_rows():
    rng = np.random.default_rng(1)
    row_a, row_b = rng.dirichlet(np.ones(N)), rng.dirichlet(np.ones(N))
    heads = np.stack([np.tile(row_a, (N, 1)), np.tile(row_b, (N, 1))])[None]
    full, sampled = statistics.HeadDistances(2), statistics.HeadDistances(2, rows_per_segment=3)
    full.add(heads)
    sampled.add(heads)
    assert sampled.num_rows == 3
    np.testing.assert_allclose(sampled.divergences(), full.divergences(), rtol=1e-5)


def test_classical_mds_recovers_planar_configuration():
    points = np.array([[0, 0], [3, 0], [0, 4], [1, 1], [-2, 5.0]])
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1)
    embedded = statistics.classical_mds(distances)
    recovered = np.linalg.norm(embedded[:, None] - embedded[None], axis=-1)
    np.testing.assert_allclose(recovered, distances, atol=1e-9)


def test_head_behaviours():
    shape = (1, 4)
    means = {name: np.zeros(shape) for name in statistics.STATISTICS}
    means["sep"][0, 0] = 0.9
    means["next"][0, 1] = 0.6
    means["entropy"][0] = [0.1, 0.1, 2.0, 0.1]
    labels = statistics.head_behaviours(means, uniform_entropy=2.2)
    assert labels.tolist() == [["[SEP]", "next token", "broad", "other"]]


def test_attention_gradients_by_attended_token():
    gradient = np.empty((1, 1, N, N))
    tokens = np.array(TOKENS)
    gradient[..., tokens == "[CLS]"] = 0.5
    gradient[..., tokens == "[SEP]"] = -1.0
    gradient[..., (tokens == ".") | (tokens == ",")] = 2.0
    gradient[..., ~np.isin(tokens, ["[CLS]", "[SEP]", ".", ","])] = 3.0
    accumulator = statistics.AttentionGradients(1, 1)
    accumulator.add(gradient, TOKENS)
    accumulator.add(gradient * 3, TOKENS)
    means = accumulator.means()
    assert means["cls"][0, 0] == pytest.approx(1.0)
    assert means["sep"][0, 0] == pytest.approx(2.0)  # |-1| and |-3|
    assert means["punct"][0, 0] == pytest.approx(4.0)
    assert means["other"][0, 0] == pytest.approx(6.0)


CONLLU = """# sent_id = 1
# text = The cat's sat.
1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_
2-3\tcat's\t_\t_\t_\t_\t_\t_\t_\t_
2\tcat\tcat\tNOUN\t_\t_\t4\tnsubj\t_\t_
3\t's\t's\tPART\t_\t_\t2\tnmod:poss\t_\t_
4\tsat\tsit\tVERB\t_\t_\t0\troot\t_\t_
5\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_

1\tGo\tgo\tVERB\t_\t_\t0\troot\t_\t_
"""


def test_read_conllu(tmp_path):
    path = tmp_path / "gold.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    first, second = read_conllu(str(path))
    assert first.words == ["The", "cat", "'s", "sat", "."]
    assert first.heads == [2, 4, 2, 0, 4]
    assert first.relations == ["det", "nsubj", "nmod", "root", "punct"]
    assert second.words == ["Go"] and second.heads == [0]


@pytest.mark.parametrize("text, message", [
    ("1\tThe\tthe\n", r"gold.conllu:1: expected 10"),
    ("1\ta\t_\t_\t_\t_\t_\t_\t_\t_\n", r"gold.conllu:1: HEAD field"),
    ("2\ta\t_\t_\t_\t_\t0\troot\t_\t_\n", r"gold.conllu:1: word id '2'"),
    ("1\ta\t_\t_\t_\t_\t3\tdep\t_\t_\n", r"word 1 has head 3"),
    # issue 37: '²'.isdigit() is True but int('²') fails; a word headed by itself was accepted
    ("1\ta\t_\t_\t_\t_\t\u00b2\tdep\t_\t_\n", r"gold.conllu:1: HEAD field '\u00b2'"),
    ("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n2\tb\t_\t_\t_\t_\t2\tdep\t_\t_\n",
     r"word 2 is its own head"),
    ("# only a comment\n", r"no sentences"),
])
def test_read_conllu_errors_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "gold.conllu"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConlluError, match=message):
        read_conllu(str(path))


def test_dependency_accuracy_on_hand_made_parse():
    # [CLS] the cat sat [SEP]: the -> cat (det), cat -> sat (nsubj), sat = root.
    sentence = ParsedSentence(["the", "cat", "sat"], [2, 3, 0], ["det", "nsubj", "root"])

    def word_map(inner):
        """Embeds a 3x3 map over the words; [CLS], [SEP] and the word itself get
        the largest weights, which must be ignored."""
        full = np.full((5, 5), 0.9)
        full[1:4, 1:4] = inner
        np.fill_diagonal(full, 0.95)
        return full

    # Head 1: each dependent attends most to its head. Head 2: each head word
    # attends most to its dependent (right only when read transposed).
    dependent_to_head = word_map([[0, .6, .1], [.1, 0, .6], [.6, .1, 0]])
    head_to_dependent = word_map([[0, .1, .6], [.6, 0, .1], [.1, .6, 0]])
    maps = np.stack([dependent_to_head, head_to_dependent])[None]  # [1 layer, 2 heads, 5, 5]
    accuracy = statistics.DependencyAccuracy(1, 2, max_offset=2)
    accuracy.add(maps, sentence)
    for relation in ("det", "nsubj"):
        # [direction (dependent->head, head->dependent), layer, head]
        assert accuracy.correct[relation][:, 0, :].tolist() == [[1, 0], [0, 1]]
    rows = {row["relation"]: row for row in accuracy.table()}
    assert list(rows) == ["det", "nsubj", "all"]  # the root has no head word
    assert rows["det"]["count"] == 1 and rows["all"]["count"] == 2
    for row in rows.values():
        assert row["accuracy"] == 1.0
        assert (row["layer"], row["head"], row["direction"]) == (1, 1, "dependent->head")
        assert row["baseline_offset"] == 1 and row["baseline_accuracy"] == 1.0
    with pytest.raises(ValueError, match="plus"):
        accuracy.add(maps[..., :4, :4], sentence)


def test_build_segments_packs_sentences():
    def tokenize_batch(texts):
        return [text.split() for text in texts]

    documents = [["a b c", "d e", "f g h i j k l m n o p q", "r"], ["s t"]]
    segments = build_segments(documents, tokenize_batch, max_seq_length=11, max_segments=10)
    assert [s.tokens for s in segments] == [
        ["[CLS]", "a", "b", "c", "[SEP]", "d", "e", "[SEP]"],
        ["[CLS]", "f", "g", "h", "i", "[SEP]", "r", "[SEP]"],  # over-long A is truncated
        ["[CLS]", "s", "t", "[SEP]"],
    ]
    assert segments[0].segment_ids == [0] * 5 + [1] * 3
    assert len(build_segments(documents, tokenize_batch, 11, max_segments=1)) == 1


def test_conllu_segments_map_pieces_to_words():
    sentence = ParsedSentence(["playing", "x"], [0, 1], ["root", "obj"])
    long_sentence = ParsedSentence(["a"] * 10, [0] * 10, ["root"] * 10)

    def tokenize_batch(words):
        return [["play", "##ing"] if w == "playing" else [w] for w in words]

    segments, skipped = conllu_segments([sentence, long_sentence], tokenize_batch, 8)
    assert skipped == 1
    assert segments[0].tokens == ["[CLS]", "play", "##ing", "x", "[SEP]"]
    assert segments[0].word_ids == [0, 1, 1, 2, 3]


def test_attention_html_is_offline_and_holds_the_maps(tmp_path):
    maps = hand_made_heads()
    path = tmp_path / "view.html"
    write_attention_html(TOKENS, maps, str(path), title="a <b> test")
    page = path.read_text(encoding="utf-8")
    assert not re.search(r"https?://", page)
    assert "a &lt;b&gt; test" in page
    data = json.loads(re.search(r"const DATA = (\{.*?\});", page).group(1))
    assert data["tokens"] == TOKENS and (data["layers"], data["heads"]) == (1, 4)
    weights = np.frombuffer(base64.b64decode(data["weights"]), np.uint8).reshape(maps.shape)
    np.testing.assert_allclose(weights / 255, maps, atol=1 / 255)


def test_attention_html_escapes_script_end(tmp_path):
    path = tmp_path / "view.html"
    write_attention_html(["[CLS]", "</script>"], np.full((1, 1, 2, 2), 0.5), str(path))
    page = path.read_text(encoding="utf-8")
    assert page.count("</script>") == 1
