"""The syntax probes (bert_tf.analysis.probes) on a handmade treebank, and
`python -m bert_tf probe_syntax` end to end on a tiny random model."""

import json
import re

import numpy as np
import pytest
from conftest import PYTHON, mounted_tmpfs, run_command
from test_analysis_cli import _save_tiny_model

from bert_tf.analysis import probe_syntax, probes, statistics
from bert_tf.data.conllu import ConlluError, ParsedSentence
from bert_tf.data.files import OutputDirError
from bert_tf.data.tokenization import VocabError

# (word, UPOS, head) per word; heads 1-based, 0 = root.
TREEBANK = [
    [("The", "DET", 2), ("cat", "NOUN", 3), ("sat", "VERB", 0), ("down", "ADV", 3),
     (".", "PUNCT", 3)],
    [("Dogs", "NOUN", 2), ("bark", "VERB", 0)],
    [("I", "PRON", 2), ("saw", "VERB", 0), ("a", "DET", 4), ("bird", "NOUN", 2),
     ("in", "ADP", 7), ("the", "DET", 7), ("tree", "NOUN", 2), ("!", "PUNCT", 2)],
    [("Birds", "NOUN", 2), ("sing", "VERB", 0), ("loudly", "ADV", 2), (".", "PUNCT", 2)],
    [("She", "PRON", 2), ("reads", "VERB", 0), ("old", "ADJ", 4), ("books", "NOUN", 2)],
    [("Run", "VERB", 0), ("!", "PUNCT", 1)],
]


def parsed(sentence):
    words, upos, heads = zip(*sentence, strict=True)
    return ParsedSentence(list(words), list(heads), ["dep"] * len(words), list(upos))


def conllu_text(sentences):
    return "".join("".join(f"{i}\t{w}\t_\t{u}\t_\t_\t{h}\t{'root' if h == 0 else 'dep'}\t_\t_\n"
                           for i, (w, u, h) in enumerate(s, 1)) + "\n" for s in sentences)


def gold_attention(sentence, num_maps=2):
    """Maps over [CLS] words [SEP]: map 0 sends each word's attention to its gold head
    ([CLS] for the root), the others attend uniformly."""
    n = len(sentence.words) + 2
    maps = np.full((num_maps, n, n), 1.0 / n, np.float32)
    maps[0] = np.eye(n)
    maps[0, np.arange(1, n - 1)] = np.eye(n)[sentence.heads]
    return maps


def test_gold_head_attention_gives_full_uas():
    sentences = [parsed(s) for s in TREEBANK]
    # Constant vectors: the vector probe must find the gold map through them too.
    data = [probes.probe_sentence(s, gold_attention(s), np.ones((len(s.words), 4)))
            for s in sentences]
    for vector_dim in (0, 4):
        probe = probes.AttentionProbe(num_maps=4, vector_dim=vector_dim)
        train = probes.make_batches(data[:3], {"attention", "vectors"}, batch_size=2)
        held_out = probes.make_batches(data[3:], {"attention", "vectors"}, batch_size=2)
        assert probes.probe_uas(probe, held_out) < 1.0  # untrained: no better than a tie
        probes.train(probe, train, probes.TrainSettings(0.002, 0.0, epochs=30), seed=0)
        assert probes.probe_uas(probe, held_out) == 1.0, vector_dim
        if not vector_dim:  # the gold map gets the weight
            weights = probe_syntax.head_weights(probe, layers=1, heads=2)
            assert weights["dependent_to_head"][0][0] > weights["dependent_to_head"][0][1]


def test_right_branching_equals_hand_count():
    # The cat sat down .: predicted 2 3 4 5 0, gold 2 3 0 3 (3): 2 of 4 scored words.
    # Dogs bark: 2 0 = gold: 2 of 2. Punctuation is not scored. 4 of 6.
    data = [probes.probe_sentence(parsed(s)) for s in TREEBANK[:2]]
    assert list(probes.right_branching(5)) == [2, 3, 4, 5, 0]
    assert probes.right_branching_uas(data) == pytest.approx(4 / 6)


def right_branching_treebank(lengths, seed=1):
    rng = np.random.default_rng(seed)
    return [probes.ProbeSentence(probes.right_branching(n), np.ones(n, bool),
                                 vectors=rng.normal(size=(n, 3))) for n in lengths]


def test_distance_probe_learns_a_right_branching_treebank():
    data = right_branching_treebank((3, 5, 4, 7, 6, 2, 8))
    train = probes.make_batches(data[:5], {"vectors", "distance"}, batch_size=2)
    held_out = probes.make_batches(data[5:], {"vectors", "distance"}, batch_size=2)
    probe = probes.DistanceProbe(vector_dim=3, seed=0)
    dev_uas = probes.train(probe, train, probes.TrainSettings(0.01, 0.0, epochs=40), seed=0,
                           dev_batches=held_out)
    assert probes.probe_uas(probe, held_out) == 1.0
    # Early stopping: PATIENCE passes after the first perfect one, well before 40.
    assert dev_uas[-probes.PATIENCE - 1] == 1.0 and len(dev_uas) < 40


def test_split_dev_is_a_seeded_partition():
    sentences = list(range(20))
    fit, dev = probes.split_dev(sentences, 0.15, seed=3)
    assert len(dev) == 3 and sorted(fit + dev) == sentences and fit == sorted(fit)
    assert probes.split_dev(sentences, 0.15, seed=3) == (fit, dev)
    assert len(probes.split_dev(sentences[:2], 0.9, seed=3)[0]) == 1  # never an empty fit


def test_tuning_picks_the_setting_that_learns_on_dev():
    data = right_branching_treebank((3, 5, 4, 7, 6, 2, 8, 5, 4, 6))
    grid = probes.TuningGrid(learning_rates=(1e-7, 0.01), l2_weights=(0.0,), max_epochs=30,
                             dev_fraction=0.3)
    probe, chosen, results = probes.tune_and_train(
        lambda: probes.DistanceProbe(vector_dim=3, seed=0), data, {"vectors", "distance"},
        grid, seed=0)
    assert [r["learning_rate"] for r in results] == [1e-7, 0.01]
    assert max(results[0]["dev_uas"]) < 1.0 == max(results[1]["dev_uas"])
    assert chosen.learning_rate == 0.01
    assert chosen.epochs == int(np.argmax(results[1]["dev_uas"])) + 1
    batches = probes.make_batches(data, {"vectors", "distance"}, batch_size=4)
    assert probes.probe_uas(probe, batches) == 1.0  # retrained on all the sentences


def test_upos_probe_separates_separable_classes():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, size=60)
    x = np.eye(3)[labels] * 3 + rng.normal(scale=0.1, size=(60, 3))
    eval_labels = labels[40:].copy()
    assert probes.classifier_accuracy(x[:40], labels[:40], x[40:], eval_labels, 3,
                                      steps=100) == 1.0
    eval_labels[:5] = -1  # tags never seen in training count as wrong
    assert probes.classifier_accuracy(x[:40], labels[:40], x[40:], eval_labels, 3,
                                      steps=100) == pytest.approx(15 / 20)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, shared_data):
    return _save_tiny_model(tmp_path_factory.mktemp("tiny_bert"),
                            shared_data / "vocab" / "bert-base-uncased.txt", trained_head=False)


def test_cli_writes_the_report(tiny_model, tmp_path):
    conllu = tmp_path / "gold.conllu"
    conllu.write_text(conllu_text(TREEBANK), encoding="utf-8")
    out = tmp_path / "report"
    proc = run_command([PYTHON, "-m", "bert_tf", "probe_syntax",
                        *[f"--{k}={v}" for k, v in tiny_model.items()],
                        f"--train_conllu={conllu}", "--train_sentences=4",
                        f"--output_dir={out}", "--max_epochs=2", "--learning_rates=0.01",
                        "--l2_weights=0", "--l2_weights=0.001", "--upos_steps=5",
                        "--batch_size=2", "--max_seq_length=32"],
                       env={"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                            "TF_NUM_INTEROP_THREADS": "1"}, timeout=300)
    assert "Right-branching" in proc.stdout
    with open(out / "probes.json", encoding="utf-8") as f:
        report = json.load(f)
    assert report["data"]["eval"] == {"sentences": 2, "skipped_too_long": 0, "scored_words": 5}
    # Held out: She reads old books (predicted 2 3 4 0: 2 of 4 right), Run ! (Run gets
    # "!", not the root: wrong; "!" is not scored).
    assert report["uas"]["right_branching"] == pytest.approx(2 / 5)
    assert set(report["uas"]) == set(probe_syntax.PROBE_NAMES)
    # Every trained probe is tuned by the same rule over the same grid.
    assert set(report["tuning"]) == set(probe_syntax.PROBE_NAMES) - {"right_branching"}
    for tuning in report["tuning"].values():
        assert [(r["learning_rate"], r["l2"]) for r in tuning["grid"]] == [(0.01, 0), (0.01, 0.001)]
        assert tuning["chosen"]["epochs"] in (1, 2)
    assert all(0.0 <= v <= 1.0 for v in report["uas"].values())
    assert len(report["upos_accuracy"]["trained"]) == 3  # embeddings + 2 layers
    assert len(report["upos_accuracy"]["random_init"]) == 3
    with open(out / "head_weights.json", encoding="utf-8") as f:
        weights = json.load(f)
    assert np.shape(weights["attn"]["dependent_to_head"]) == (2, 2)
    assert (out / "uas.csv").read_text().splitlines()[0] == "probe,uas,paper_bert_base_wsj"
    assert len((out / "upos_by_layer.csv").read_text().splitlines()) == 4
    assert (out / "probes.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert not list(tmp_path.glob(".probe_syntax-*"))


def test_without_dependency_probes_only_the_upos_report_is_written(tiny_model, tmp_path):
    """--nodependency_probes: UPOS per layer, no UAS, and an earlier run's UAS files go."""
    conllu = tmp_path / "gold.conllu"
    conllu.write_text(conllu_text(TREEBANK), encoding="utf-8")
    out = tmp_path / "report"
    out.mkdir()
    (out / "uas.csv").write_text("stale\n")
    proc = run_command([PYTHON, "-m", "bert_tf", "probe_syntax",
                        *[f"--{k}={v}" for k, v in tiny_model.items()],
                        f"--train_conllu={conllu}", "--train_sentences=4",
                        f"--output_dir={out}", "--upos_steps=5", "--nodependency_probes",
                        "--norandom_init", "--batch_size=2", "--max_seq_length=32"],
                       env={"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                            "TF_NUM_INTEROP_THREADS": "1"}, timeout=300)
    assert "UAS" not in proc.stdout and "UPOS accuracy per layer" in proc.stdout
    report = json.loads((out / "probes.json").read_text(encoding="utf-8"))
    assert report["uas"] == {} and report["tuning"] == {}
    assert len(report["upos_accuracy"]["trained"]) == 3
    assert report["upos_accuracy"]["random_init"] is None
    assert sorted(f.name for f in out.iterdir()) == ["probes.json", "probes.png",
                                                     "upos_by_layer.csv"]


def _args(tiny_model, tmp_path, **overrides):
    return probe_syntax.ProbeArgs(**{**tiny_model, "output_dir": str(tmp_path / "report"),
                                     **overrides})


@pytest.mark.parametrize("content, error, message", [
    (None, ConlluError, r"--train_conllu: no such file .*gold.conllu"),
    (b"# sent_id = 1\n1\tThe\t_\tDET\t_\t_\t0\troot\t_\t_\n2\tca\xfft\t_\t_\t_\t_\t1\tdep\t_\t_\n",
     ConlluError, r"gold.conllu:3: not UTF-8"),
    (conllu_text(TREEBANK[:2]).encode(), probe_syntax.AnalysisError,
     r"has 2 sentences, none left to evaluate after --train_sentences=1500"),
])
def test_bad_input_names_file_and_writes_nothing(tiny_model, tmp_path, content, error,
                                                 message):
    conllu = tmp_path / "gold.conllu"
    if content is not None:
        conllu.write_bytes(content)
    with pytest.raises(error, match=message):
        probe_syntax.run_probes(_args(tiny_model, tmp_path, train_conllu=str(conllu)))
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("overrides, message", [
    ({"max_epochs": 0}, "--max_epochs must be an integer >= 1, got 0"),
    ({"l2_weights": (0.0, -1.0)}, "--l2_weights must be a finite number >= 0, got -1.0"),
    # issue 37: inf was accepted and reported as "UAS 0.0"
    ({"learning_rates": (0.01, float("inf"))}, "--learning_rates must be a finite number > 0, "
                                                "got inf"),
])
def test_bad_flag_is_named(tiny_model, tmp_path, overrides, message):
    with pytest.raises(probe_syntax.AnalysisError, match=f"^{re.escape(message)}$"):
        probe_syntax.run_probes(_args(tiny_model, tmp_path, train_conllu="x", **overrides))


def _quick_args(tiny_model, tmp_path, treebank, **overrides):
    conllu = tmp_path / "gold.conllu"
    conllu.write_text(conllu_text(treebank), encoding="utf-8")
    settings = dict(train_conllu=str(conllu), train_sentences=4, max_epochs=1,
                    learning_rates=(0.01,), l2_weights=(0.0,), upos_steps=2, batch_size=2,
                    max_seq_length=32, random_init=False)
    return _args(tiny_model, tmp_path, **{**settings, **overrides})


def test_dev_part_without_a_scored_word_is_named(tiny_model, tmp_path):
    """Issue 37: an AttributeError on learning_rate, after the forward passes."""
    punctuation_only = [[("!", "PUNCT", 0)]] * 4 + TREEBANK[4:]
    with pytest.raises(probe_syntax.AnalysisError, match="dev part .* has no scored word"):
        probe_syntax.run_probes(_quick_args(tiny_model, tmp_path, punctuation_only))
    assert not (tmp_path / "report").exists()


def test_vocab_that_does_not_fit_the_model_is_named(tiny_model, tmp_path):
    """Issue 37: an IndexError for a vocab of another size, a tensorflow_text RuntimeError
    for one of special tokens only."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"has 6 tokens but --bert_config_file=.* says "
                                         r"vocab_size=30522"):
        probe_syntax.run_probes(_quick_args(tiny_model, tmp_path, TREEBANK,
                                            vocab_file=str(vocab)))
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    with pytest.raises(VocabError, match="holds only special tokens"):
        probe_syntax.run_probes(_quick_args(tiny_model, tmp_path, TREEBANK,
                                            vocab_file=str(vocab)))
    assert not (tmp_path / "report").exists()


def test_output_dir_is_checked_first_and_a_rerun_leaves_no_stale_file(tiny_model, tmp_path):
    """Issue 37: an unwritable --output_dir was found after all the computation; the report
    was staged beside --output_dir ("Invalid cross-device link" on a mount point); a rerun
    without UPOS tags kept the old upos_by_layer.csv; a nan UAS was written as bare NaN."""
    (tmp_path / "a_file").write_text("")
    for output_dir, message in ((tmp_path / "a_file" / "report", "is not writable"),
                                (tmp_path / "a_file", "is a file"),
                                ("/sys/kernel/report", "is not writable")):
        with pytest.raises(OutputDirError, match=f"--output_dir={output_dir} {message}"):
            probe_syntax.run_probes(_quick_args(tiny_model, tmp_path, TREEBANK,
                                                output_dir=str(output_dir), train_conllu="x"))

    out = tmp_path / "report"
    with mounted_tmpfs(out):
        probe_syntax.run_probes(_quick_args(tiny_model, tmp_path, TREEBANK))
        assert (out / "upos_by_layer.csv").exists()
        untagged = [[(w, "_", h) for w, _, h in s] for s in TREEBANK[:4]]
        punctuation = tmp_path / "punct.conllu"
        punctuation.write_text(conllu_text([[("!", "PUNCT", 0)]]), encoding="utf-8")
        probe_syntax.run_probes(_quick_args(tiny_model, tmp_path, untagged,
                                            eval_conllu=str(punctuation)))
        assert sorted(p.name for p in out.iterdir()) == sorted(
            set(probe_syntax.REPORT_FILES) - {"upos_by_layer.csv"})
        text = (out / "probes.json").read_text()
        assert "NaN" not in text
        assert set(json.loads(text)["uas"].values()) == {None}


def test_word_vectors_average_their_pieces():
    vectors = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    words = statistics.to_word_vectors(vectors, [0, 1, 1, 2, 3])  # [CLS] a ##b c [SEP]
    np.testing.assert_allclose(words, [[0, 0], [2, 3], [5, 6], [7, 8]])
