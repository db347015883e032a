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
