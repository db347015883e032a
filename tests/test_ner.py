"""NER data: the readers on the shared Japanese (IOB2 tokens) and Korean (KLUE characters) files,
bad input named by file and line, exact span+type entity F1 (seqeval's default convention), and
label alignment through the real tokenizer's character offsets."""

import pytest

from bert_tf.data import ner, tasks

JA = "ja/hironsan-ner-iob2.txt"
KO = "ko/klue-ner-v1.1_dev_first4000.tsv"


@pytest.fixture(scope="module")
def japanese(shared_data):
    return ner.read_ner_file(str(shared_data / JA), lenient=True)


@pytest.fixture(scope="module")
def korean(shared_data):
    return ner.read_ner_file(str(shared_data / KO))


def entity_count(sentences):
    return sum(len(ner.entities(s.tags)) for s in sentences)


def test_readers_rebuild_the_running_text_and_count_the_documented_entities(japanese, korean):
    assert (len(japanese), entity_count(japanese)) == (500, 1284)  # ../shared/data/README.md
    assert (len(korean), entity_count(korean)) == (4000, 11459)
    assert japanese[0].text.startswith("2005年7月14日、南アフリカ共和国ダーバンで")
    assert ner.entities(japanese[0].tags)[:2] == [("DAT", 0, 6), ("LOC", 7, 11)]
    first = korean[0]
    assert first.text.startswith("경찰은 또 성매매 알선 자금을 관리한 박씨의 딸(32)과")
    assert first.units[3] == " " and len(first.units) == len(first.text)
    assert ("PS", 21, 22) in ner.entities(first.tags)  # 박 of 박씨의
    assert first.lines[-1] == ".\tO" and first.lines[5].startswith("## klue-ner-v1_dev_00000")


def test_the_package_split_is_first_90_percent_train_last_10_percent_held_out(shared_data):
    path = str(shared_data / JA)
    train = tasks.read_sentences("ner", path, "train", lenient_tags=True)
    dev = tasks.read_sentences("ner", path, "dev", lenient_tags=True)
    assert (len(train), len(dev)) == (450, 50)
    assert dev[0].line_number > train[-1].line_number


def test_folds_written_back_read_the_same(korean, japanese, tmp_path):
    for name, sentences in (("ko.tsv", korean[10:13]), ("ja.txt", japanese[3:5])):
        ner.write_sentences(sentences, str(tmp_path / name))
        again = ner.read_ner_file(str(tmp_path / name))
        assert [(s.units, s.tags) for s in again] == [(s.units, s.tags) for s in sentences]


@pytest.mark.parametrize("change, message", [
    (lambda line: line.rsplit("\t", 1)[0].split("\t")[0], "no tag column"),
    (lambda line: line.rsplit("\t", 1)[0] + "\tB_LOC", "'B_LOC' is not IOB2"),
])
def test_bad_token_lines_are_named_by_file_and_line(shared_data, tmp_path, change, message):
    lines = (shared_data / JA).read_text(encoding="utf-8").split("\n")[:40]
    lines[30] = change(lines[30])
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ner.NerDataError, match=rf"{path}:31: .*{message}"):
        ner.read_ner_file(str(path))


def test_an_i_tag_without_its_b_is_refused_unless_lenient(shared_data, tmp_path):
    # The shared file's own line 6855: 号 I-ART after 」 O (an entity continued past a quote).
    with pytest.raises(ner.NerDataError, match=rf"{JA}:6855: I-ART follows O.*"
                                               "--ner_lenient_tags"):
        ner.read_ner_file(str(shared_data / JA))
    lines = (shared_data / KO).read_text(encoding="utf-8").split("\n")[:60]
    first = lines.index("경\tB-OG")
    lines[first] = "경\tI-OG"
    path = tmp_path / "bad.tsv"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ner.NerDataError, match=rf"{path}:{first + 1}: I-OG follows O"):
        ner.read_ner_file(str(path))
    klue_line = lines.index("은\tO")
    lines[klue_line] = "은은\tO"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ner.NerDataError, match=rf"{path}:{klue_line + 1}: expected KLUE"):
        ner.read_ner_file(str(path))


def test_entity_f1_is_exact_span_and_type_with_seqeval_reading_of_predictions():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-DAT", "I-DAT"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"],  # right person, wrong type
                 ["I-ORG", "O", "B-DAT", "O"]]  # I-ORG starts an entity; DAT ends too early
    assert ner.entities(predicted[1]) == [("ORG", 0, 1), ("DAT", 2, 3)]
    assert ner.entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    scores = ner.entity_f1(gold, predicted)
    assert (scores["gold"], scores["predicted"], scores["correct"]) == (4, 4, 2)
    assert scores["f1"] == pytest.approx(0.5)
    assert scores["per_type"]["DAT"]["correct"] == 0
    all_outside = [["O"] * len(tags) for tags in gold]
    assert ner.entity_f1(gold, all_outside)["f1"] == 0.0


@pytest.fixture(scope="module")
def cased_tokenizer(shared_data):
    """Google's cased vocab and rules: most Hangul words are one [UNK] piece."""
    from bert_tf.data.tokenization import load_tokenizer

    return load_tokenizer(str(shared_data / "vocab" / "bert-base-cased.txt"),
                          do_lower_case=False, backend="tokenizers")


def test_alignment_by_offsets_labels_first_pieces_and_counts_cut_entities(korean,
                                                                          cased_tokenizer):
    sentence = korean[0]  # 경찰은 또 ...: the word 경찰은 is one [UNK] piece
    pieces = cased_tokenizer.tokenize_with_offsets(sentence.text)
    alignment = ner.align(sentence, pieces)
    assert (pieces[0].token, pieces[0].start, pieces[0].end) == ("[UNK]", 0, 3)
    assert alignment.heads[:4] == [0, 4, 6, 10]  # spaces start no piece
    assert alignment.covered[:5] == [True, True, True, False, True]
    # 경찰 (OG) ends inside 경찰은, and three more entities share a piece with their particle.
    assert alignment.boundaries_inside == 4 and len(ner.entities(sentence.tags)) == 6
    predicted = ner.unit_tags(alignment, [sentence.tags[unit] for unit in alignment.heads])
    assert predicted[:4] == ["B-OG", "I-OG", "I-OG", "O"]  # 은 continues the piece's entity
    # The gold tags of the first pieces recover exactly the entities no piece cuts.
    assert ner.entity_f1([sentence.tags], [predicted])["correct"] == 6 - 4


def test_ner_finetuning_end_to_end_writes_scoreable_predictions(shared_data, tmp_path,
                                                                japanese):
    """Tokenized once through the vocab's tokenizer, trained for a few updates: eval_results
    has entity F1 beside the all-O baseline, and predictions.tsv has one line per input token
    with its gold and predicted tag."""
    import json

    from bert_tf.train import finetune
    from bert_tf.train.finetune_config import FinetuningConfig

    data = tmp_path / "data"
    data.mkdir()
    ner.write_sentences(japanese[:24], str(data / "train.txt"))
    ner.write_sentences(japanese[-6:], str(data / "dev.txt"))
    ner.write_sentences(japanese[-6:], str(data / "test.txt"))
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({"vocab_size": 28996, "hidden_size": 32, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 64,
                                  "max_position_embeddings": 96}))
    out = tmp_path / "out"
    summary = finetune.run(FinetuningConfig(
        task_name="ner", data_dir=str(data), bert_config_file=str(config),
        vocab_file=str(shared_data / "vocab" / "bert-base-cased.txt"), output_dir=str(out),
        do_lower_case=False, max_seq_length=96, train_batch_size=8, learning_rate=1e-3,
        num_train_epochs=1.0, do_train=True, do_eval=True, do_predict=True))
    scores = summary["eval"]
    assert scores["main_metric"] == "entity_f1" and 0 <= scores["entity_f1"] <= 1
    assert scores["majority_tag"] == "O" and scores["majority_baseline_entity_f1"] == 0.0
    assert scores["entities"] == entity_count(japanese[-6:])
    assert scores["entities_with_boundary_inside_piece"] >= 0
    blocks = (out / "predictions.tsv").read_text(encoding="utf-8").strip("\n").split("\n\n")
    assert len(blocks) == 6
    for block, sentence in zip(blocks, japanese[-6:], strict=True):
        rows = [line.split("\t") for line in block.split("\n")]
        assert [row[0] for row in rows] == sentence.units
        assert [row[1] for row in rows] == sentence.tags
        assert all(ner._TAG.match(row[2]) for row in rows)


def test_training_data_with_only_o_tags_is_named_not_a_traceback(shared_data, tmp_path,
                                                                 japanese):
    """Issue 46: a file without entities ended in "ValueError: a classifier needs at least 2
    labels, got 1" from the model, naming no file."""
    import json
    import sys

    from conftest import REPO, run_command

    lines = [line.rsplit("\t", 1)[0] + "\tO" if "\t" in line else line
             for s in japanese[:8] for line in [*s.lines, ""]]
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert {t for s in ner.read_ner_file(str(data / "train.txt")) for t in s.tags} == {"O"}
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({"vocab_size": 28996, "hidden_size": 32, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 64}))
    proc = run_command([sys.executable, REPO / "run_finetuning.py", "--task_name=ner",
                        f"--data_dir={data}", f"--bert_config_file={config}",
                        f"--vocab_file={shared_data / 'vocab' / 'bert-base-cased.txt'}",
                        f"--output_dir={tmp_path / 'out'}", "--do_train", "--nodo_eval"],
                       check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (f"run_finetuning: error: {data / 'train.txt'}: every training label is 'O' (for "
            "--task_name=ner); a classifier needs at least 2 labels: tag the entities") \
        in proc.stderr, proc.stderr
