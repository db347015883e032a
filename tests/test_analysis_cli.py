"""python -m bert_tf analyze_attention end to end on a tiny random model."""

import csv
import dataclasses
import json
import re

import pytest
import tensorflow as tf
from conftest import PYTHON, run_command

from bert_tf.analysis import analyze_attention
from bert_tf.data.files import OutputDirError
from bert_tf.model import checkpoints, modeling
from bert_tf.model.config import BertConfig

LAYERS, HEADS = 2, 2
CONLLU = (
    "1\tThe\t_\t_\t_\t_\t2\tdet\t_\t_\n"
    "2\tcat\t_\t_\t_\t_\t3\tnsubj\t_\t_\n"
    "3\tsat\t_\t_\t_\t_\t0\troot\t_\t_\n"
    "4\tdown\t_\t_\t_\t_\t3\tadvmod\t_\t_\n"
    "5\t.\t_\t_\t_\t_\t3\tpunct\t_\t_\n\n"
    "1\tDogs\t_\t_\t_\t_\t2\tnsubj\t_\t_\n"
    "2\tbark\t_\t_\t_\t_\t0\troot\t_\t_\n"
)


def _save_tiny_model(directory, vocab_file, trained_head):
    """A random L2 H64 A2 model saved as our checkpoint; trained_head moves the
    masked-LM head off its initial values, as training would."""
    config = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, intermediate_size=128,
                        max_position_embeddings=128)
    tf.random.set_seed(1)
    model = modeling.BertForPreTraining(config)
    if trained_head:
        bias = model.masked_lm.output_bias
        bias.assign(tf.random.normal(bias.shape, stddev=0.1))
    checkpoints.save_checkpoint(modeling.variables_by_name(model), str(directory), 0)
    config.to_json_file(str(directory / "bert_config.json"))
    return {"init_checkpoint": str(directory),
            "bert_config_file": str(directory / "bert_config.json"),
            "vocab_file": str(vocab_file)}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, shared_data):
    return _save_tiny_model(tmp_path_factory.mktemp("tiny_bert"),
                            shared_data / "vocab" / "bert-base-uncased.txt", trained_head=True)


def _strict_json(path):
    def reject(constant):
        raise ValueError(f"{path} holds non-standard JSON constant {constant}")
    with open(path, encoding="utf-8") as f:
        return json.load(f, parse_constant=reject)


def test_cli_writes_well_formed_report(tiny_model, shared_data, tmp_path):
    conllu = tmp_path / "gold.conllu"
    conllu.write_text(CONLLU, encoding="utf-8")
    out = tmp_path / "report"
    run_command([PYTHON, "-m", "bert_tf", "analyze_attention",
                 *[f"--{k}={v}" for k, v in tiny_model.items()],
                 f"--input_file={shared_data / 'corpora' / 'sample_text.txt'}",
                 f"--output_dir={out}", f"--conllu={conllu}", "--word_level",
                 "--max_segments=6", "--batch_size=3", "--max_seq_length=64"],
                env={"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                     "TF_NUM_INTEROP_THREADS": "1"},
                timeout=300)

    report = _strict_json(out / "stats.json")
    assert report["num_segments"] == 6 and report["word_level"] is True
    assert report["model"]["num_layers"] == LAYERS
    for name, table in report["statistics"].items():
        assert len(table) == LAYERS and all(len(row) == HEADS for row in table), name
    for name in ("cls", "sep", "punct", "next", "prev", "self"):
        assert all(0.0 <= v <= 1.0 for row in report["statistics"][name] for v in row), name
    assert all(0 < v <= report["uniform_entropy"] + 1e-6
               for row in report["statistics"]["entropy"] for v in row)
    # A random model's heads are nearly uniform: high entropy, JS near 0.
    js = report["js_divergence"]
    assert len(js) == LAYERS * HEADS and all(js[i][i] == 0 for i in range(len(js)))
    assert len(report["mds"]) == LAYERS * HEADS
    gradient = report["mlm_gradient"]
    assert set(gradient) == {"cls", "sep", "punct", "other"}
    assert all(v > 0 for table in gradient.values() for row in table for v in row)
    relations = {row["relation"]: row for row in report["dependency"]["relations"]}
    assert relations["nsubj"]["count"] == 2 and relations["all"]["count"] == 5
    assert 0 <= relations["all"]["accuracy"] <= 1

    with open(out / "tables" / "sep.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["layer", "head_1", "head_2"] and len(rows) == LAYERS + 1
    assert [float(v) for v in rows[1][1:]] == pytest.approx(report["statistics"]["sep"][0])
    for table in ("mlm_gradient_sep", "js_divergence", "mds", "dependency", "behaviours"):
        assert (out / "tables" / f"{table}.csv").stat().st_size > 0, table

    for plot in ("special_tokens", "positional", "entropy", "heatmaps", "head_mds",
                 "mlm_gradient", "dependency"):
        data = (out / "plots" / f"{plot}.png").read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000, plot

    page = (out / "attention_example.html").read_text(encoding="utf-8")
    assert not re.search(r"https?://", page)
    assert "[CLS]" in page and "<script>" in page
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # staging removed


def _args(tiny_model, tmp_path, **overrides):
    return analyze_attention.AnalysisArgs(**tiny_model, output_dir=str(tmp_path / "report"),
                                          **overrides)


def test_late_failure_leaves_no_partial_report(tiny_model, shared_data, tmp_path):
    long_sentence = "".join(f"{i}\tword\t_\t_\t_\t_\t0\troot\t_\t_\n" for i in range(1, 40))
    conllu = tmp_path / "long.conllu"
    conllu.write_text(long_sentence, encoding="utf-8")
    args = _args(tiny_model, tmp_path, conllu=str(conllu), max_seq_length=16, max_segments=2,
                 input_file=str(shared_data / "corpora" / "sample_text.txt"),
                 mlm_gradient=False)
    with pytest.raises(analyze_attention.AnalysisError, match="--conllu=.*longer than"):
        analyze_attention.analyse(args)
    assert not (tmp_path / "report").exists()
    assert not list(tmp_path.glob(".analyze_attention-*"))
    # issue 37: an --output_dir that cannot be written was found after all the computation
    (tmp_path / "a_file").write_text("")
    with pytest.raises(OutputDirError, match="a_file/report is not writable .*a_file is a file"):
        analyze_attention.analyse(dataclasses.replace(
            args, output_dir=str(tmp_path / "a_file" / "report"), conllu=None))


def test_untrained_masked_lm_head_gives_no_gradient(shared_data, tmp_path):
    model = _save_tiny_model(tmp_path / "fresh", shared_data / "vocab" / "bert-base-uncased.txt",
                             trained_head=False)
    stale = tmp_path / "report" / "plots" / "mlm_gradient.png"  # from an earlier run
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    (tmp_path / "report" / "notes.txt").write_text("the user's", encoding="utf-8")
    report = analyze_attention.analyse(_args(
        model, tmp_path, input_file=str(shared_data / "corpora" / "sample_text.txt"),
        max_segments=2, max_seq_length=32))
    assert report["mlm_gradient"] is None
    assert "untrained" in report["mlm_gradient_note"]
    assert not stale.exists()
    assert (tmp_path / "report" / "notes.txt").exists()
    assert (tmp_path / "report" / "plots" / "special_tokens.png").exists()


def test_missing_input_names_the_flag(tiny_model, tmp_path):
    args = _args(tiny_model, tmp_path, input_file=str(tmp_path / "missing.txt"))
    with pytest.raises(analyze_attention.AnalysisError, match="--input_file: .*missing.txt"):
        analyze_attention.analyse(args)
    assert not (tmp_path / "report").exists()


def test_config_not_matching_checkpoint_names_both(tiny_model, shared_data, tmp_path):
    wrong = tmp_path / "bert_config.json"
    BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS, intermediate_size=64).to_json_file(str(wrong))
    args = _args(dict(tiny_model, bert_config_file=str(wrong)), tmp_path,
                 input_file=str(shared_data / "corpora" / "sample_text.txt"))
    with pytest.raises(analyze_attention.AnalysisError, match="--init_checkpoint=.*shape"):
        analyze_attention.analyse(args)
