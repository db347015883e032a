"""Fine-tuning: rank/accumulation layouts under real Horovod give the same weights, a stopped
run resumes to the weights of an uninterrupted one, tagging and classification learn on real
data, task files are read as Google reads them, and bad input gets a clear error or a counted
warning.

Data: UD English EWT (the shared test file, split into train/dev here) and passages of two
Gutenberg books. Model: L2 H64 A2 I128 from random initialisation, no dropout.
"""

import dataclasses
import json
import os
import random
import re
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from conftest import PYTHON, REPO, run_command

from bert_tf.data import conllu, tasks
from bert_tf.data.tokenization import FullTokenizer, VocabError
from bert_tf.model import checkpoints, modeling
from bert_tf.model.config import BertConfig
from bert_tf.train import evaluation, finetune, loop
from bert_tf.train.finetune_config import NOT_FLAGS, FinetuningConfig, FinetuningConfigError

VENV_BIN = Path(sys.executable).parent
ONE_THREAD = {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
SEQ = 64
TINY_BERT = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=128, hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0, max_position_embeddings=SEQ)


def write_conllu(path, sentences):
    path.write_text("\n\n".join(sentences) + "\n\n", encoding="utf-8")


@pytest.fixture(scope="module")
def ewt(tmp_path_factory, shared_data):
    """EWT split into train (first 900 sentences) and dev (the last 300), a tiny config."""
    root = tmp_path_factory.mktemp("ewt")
    blocks = (shared_data / "ud" / "en_ewt-ud-test.conllu").read_text().strip().split("\n\n")
    write_conllu(root / "en_ewt-ud-train.conllu", blocks[:900])
    write_conllu(root / "en_ewt-ud-dev.conllu", blocks[-300:])
    write_conllu(root / "en_ewt-ud-test.conllu", blocks[-20:])
    small = root / "small"
    small.mkdir()
    write_conllu(small / "train.conllu", blocks[:96])
    write_conllu(small / "dev.conllu", blocks[-40:])
    config = root / "bert_config.json"
    config.write_text(json.dumps(TINY_BERT))
    return SimpleNamespace(root=root, small=small, config=config,
                           vocab=shared_data / "vocab" / "bert-base-uncased.txt")


def finetuning_config(data_dir, output_dir, bert_config, vocab, **overrides):
    settings = dict(task_name="pos", data_dir=str(data_dir), bert_config_file=str(bert_config),
                    vocab_file=str(vocab), output_dir=str(output_dir), max_seq_length=SEQ,
                    train_batch_size=16, learning_rate=1e-3, num_train_epochs=2.0,
                    log_every_n_steps=20)
    settings.update(overrides)
    return FinetuningConfig(**settings)


def command(config: FinetuningConfig):
    flags = []
    for field in dataclasses.fields(config):
        if field.name in NOT_FLAGS:
            continue
        value = getattr(config, field.name)
        if value is None:  # the flag's default (e.g. --do_lower_case: the vocab's spec decides)
            continue
        flags.append(f"--{'' if value else 'no'}{field.name}" if isinstance(value, bool)
                     else f"--{field.name}={value}")
    return [PYTHON, REPO / "run_finetuning.py", *flags]


def final_weights(output_dir):
    reader = tf.train.load_checkpoint(checkpoints.latest_checkpoint(str(output_dir)))
    names = sorted(n for n in reader.get_variable_to_shape_map()
                   if n.startswith(("bert/", "output_")) and "adam" not in n)
    return {n: reader.get_tensor(n) for n in names}


# ------------------------------------------------------------------ equivalence


def test_two_ranks_and_accumulation_equal_one_double_batch(ewt, tmp_path):
    """horovodrun -np 2 x batch 4 and 1 rank x 2 micro-batches of 4 end with the weights of
    1 rank x batch 8 (12 updates)."""
    base = dict(train_batch_size=8, num_train_epochs=1.0, warmup_proportion=0.1, do_train=True)
    single = finetuning_config(ewt.small, tmp_path / "single", ewt.config, ewt.vocab, **base)
    finetune.run(single)
    accumulated = dataclasses.replace(single, output_dir=str(tmp_path / "accumulated"),
                                      train_batch_size=4, num_accumulation_steps=2)
    finetune.run(accumulated)
    two_ranks = dataclasses.replace(single, output_dir=str(tmp_path / "two_ranks"),
                                    train_batch_size=4)
    run_command([VENV_BIN / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo",
                 *command(two_ranks)], env=ONE_THREAD, timeout=400)

    reference = final_weights(tmp_path / "single")
    assert checkpoints.latest_checkpoint(str(tmp_path / "single")).endswith("-12")
    assert checkpoints.latest_checkpoint(str(tmp_path / "two_ranks")).endswith("-12")
    for other in ("accumulated", "two_ranks"):
        weights = final_weights(tmp_path / other)
        assert weights.keys() == reference.keys()
        for name, value in reference.items():
            np.testing.assert_allclose(weights[name], value, atol=2e-6, rtol=0, err_msg=name)


# ------------------------------------------------------------------ preemption and resume


def sigterm_during_update(monkeypatch, update: int) -> None:
    """The next run gets a SIGTERM (to this process, as a scheduler sends it) while it computes
    `update`, the step it reaches by that update."""
    original = finetune.FinetuningState.update

    def update_and_signal(state, batches, stop_requested):
        if state.step + 1 == update:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(state, batches, stop_requested)

    monkeypatch.setattr(finetune.FinetuningState, "update", update_and_signal)


def logged_metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").open()]


def test_stopped_runs_resume_to_the_weights_and_best_checkpoint_of_an_uninterrupted_run(
        ewt, tmp_path, monkeypatch, capsys):
    """Dropout 0.1; 37 updates, a dev evaluation and a checkpoint after each epoch of 12.
    SIGTERM in update 17 stops run 1 after it, with a checkpoint; run 2 resumes there, knows
    the best dev score of epoch 1, and is stopped in update 29; its newest checkpoint is then
    cut short, so run 3 falls back to the epoch-2 checkpoint. The result equals an
    uninterrupted run: final weights, best checkpoint, eval_results.json, metrics.jsonl."""
    dropout_config = tmp_path / "bert_config.json"
    dropout_config.write_text(json.dumps({**TINY_BERT, "hidden_dropout_prob": 0.1,
                                          "attention_probs_dropout_prob": 0.1}))
    flags = dict(train_batch_size=8, num_train_epochs=3.0, do_train=True, do_eval=True,
                 log_every_n_steps=4)
    reference_dir, resumed_dir = tmp_path / "reference", tmp_path / "resumed"
    reference = finetune.run(finetuning_config(ewt.small, reference_dir, dropout_config,
                                               ewt.vocab, **flags))
    assert reference["train"]["global_step"] == 37  # 99 rows x 3 epochs // 8
    config = finetuning_config(ewt.small, resumed_dir, dropout_config, ewt.vocab, **flags)
    capsys.readouterr()

    sigterm_during_update(monkeypatch, 17)
    stopped = finetune.run(config)
    out = capsys.readouterr().out
    assert stopped["train"]["stopped_by"] == "SIGTERM" and "eval" not in stopped
    assert "stopped at step 17 by SIGTERM; checkpoint saved" in out, out
    assert checkpoints.latest_checkpoint(resumed_dir).endswith("model.ckpt-17")
    epoch_1_score = re.search(r"step 12: dev accuracy (\S+)", out).group(1)

    sigterm_during_update(monkeypatch, 29)
    stopped = finetune.run(config)
    out = capsys.readouterr().out
    assert f"resumed from {resumed_dir}/model.ckpt-17 (step 17, input position 17)" in out, out
    assert f"best dev accuracy so far {epoch_1_score} (step 12)" in out, out
    assert stopped["train"]["stopped_by"] == "SIGTERM"
    assert [os.path.basename(p) for p in checkpoints.listed_checkpoints(resumed_dir)] == [
        "model.ckpt-29", "model.ckpt-24"]

    monkeypatch.undo()
    (resumed_dir / "model.ckpt-29.data-00000-of-00001").write_bytes(b"cut short")
    resumed = finetune.run(config)
    out = capsys.readouterr().out
    assert f"warning: checkpoint {resumed_dir}/model.ckpt-29 is corrupt" in out, out
    assert f"resumed from {resumed_dir}/model.ckpt-24 (step 24" in out, out

    assert resumed["train"]["best_dev"] == reference["train"]["best_dev"]
    assert (checkpoints.latest_checkpoint(resumed_dir / finetune.BEST_DIR).rsplit("/", 1)[1]
            == checkpoints.latest_checkpoint(reference_dir / finetune.BEST_DIR).rsplit("/", 1)[1])
    assert (json.loads((resumed_dir / "eval_results.json").read_text())
            == json.loads((reference_dir / "eval_results.json").read_text()))
    expected = final_weights(reference_dir)
    for name, value in final_weights(resumed_dir).items():
        np.testing.assert_allclose(value, expected[name], atol=1e-6, rtol=0, err_msg=name)
    logged, reference_logged = logged_metrics(resumed_dir), logged_metrics(reference_dir)
    assert [r["step"] for r in logged] == [r["step"] for r in reference_logged]
    np.testing.assert_allclose([r["loss"] for r in logged],
                               [r["loss"] for r in reference_logged], rtol=1e-5)


# ------------------------------------------------------------------ learning on real data


def test_tagging_learns_upos_on_ewt_well_above_the_majority_baseline(ewt, tmp_path):
    config = finetuning_config(ewt.root, tmp_path / "out", ewt.config, ewt.vocab,
                               do_train=True, do_eval=True, do_predict=True)
    summary = finetune.run(config)
    results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert results == json.loads(json.dumps(summary["eval"]))
    assert results["majority_baseline"] < 0.25  # NOUN
    assert results["accuracy"] > results["majority_baseline"] + 0.4, results
    assert results["per_tag_accuracy"]["PUNCT"]["accuracy"] > 0.9
    assert sum(t["count"] for t in results["per_tag_accuracy"].values()) == results["count"]
    # Metrics during training, the best dev checkpoint, and predictions for every test word.
    logged = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    assert logged[-1]["step"] == summary["train"]["global_step"]
    assert checkpoints.latest_checkpoint(str(tmp_path / "out" / finetune.BEST_DIR))
    test_words = sum(len(s.words) for s in conllu.read_conllu(
        ewt.root / "en_ewt-ud-test.conllu", require_heads=False))
    predicted = [line for line in (tmp_path / "out" / "predictions.tsv").read_text().split("\n")
                 if line]
    assert len(predicted) == test_words
    assert {line.split("\t")[1] for line in predicted} <= set(summary["labels"])


@pytest.fixture(scope="module")
def books(tmp_path_factory, shared_data):
    """Which book a 30-word passage comes from: Persuasion (label 'austen') or The Man Who Was
    Thursday ('chesterton'), as a generic TSV with a header (label, text)."""
    root = tmp_path_factory.mktemp("books")
    passages = []
    for label, name in (("austen", "austen-persuasion.txt"),
                        ("chesterton", "chesterton-thursday.txt")):
        words = (shared_data / "corpora" / "gutenberg" / name).read_text().split()[2000:]
        passages += [(label, " ".join(words[i:i + 30])) for i in range(0, 300 * 30, 30)]
    random.Random(0).shuffle(passages)
    for split, part in (("train", passages[:480]), ("dev", passages[480:])):
        lines = ["label\ttext"] + [f"{label}\t{text}" for label, text in part]
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root


def test_classification_learns_which_book_a_passage_comes_from(ewt, books, tmp_path):
    config = finetuning_config(books, tmp_path / "out", ewt.config, ewt.vocab, task_name="tsv",
                               text_a_column=1, label_column=0, tsv_has_header=True,
                               num_train_epochs=3.0, do_train=True, do_eval=True)
    results = finetune.run(config)["eval"]
    assert results["count"] == 120
    assert results["accuracy"] > results["majority_baseline"] + 0.15, results


# ------------------------------------------------------------------ task files


def test_glue_files_are_read_with_googles_columns_and_labels(tmp_path):
    glue = {
        "cola": ("gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\n", "0",
                 ("The sailors rode the breeze clear of the rocks.", None, "1")),
        "sst-2": ("sentence\tlabel\nit 's a charming journey . \t1\n", "",
                  ("it 's a charming journey . ", None, "1")),
        "mrpc": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tHe said .\tHe says .\n",
                 "", ("He said .", "He says .", "1")),
        "mnli": ("\t".join(["h"] * 16) + "\n" + "\t".join(
            ["0", "1", "2", "3", "4", "5", "6", "7", "A man .", "A person .", "x", "x", "x",
             "x", "x", "entailment"]) + "\n", "", ("A man .", "A person .", "entailment")),
    }
    for task, (text, _, expected) in glue.items():
        directory = tmp_path / task
        directory.mkdir()
        name = tasks.GLUE_TASKS[task].files["dev"]
        (directory / name).write_text(text)
        (example,) = tasks.read_examples(task, str(directory), "dev")
        assert (example.text_a, example.text_b, example.label) == expected, task


def test_multiword_ranges_and_empty_nodes_are_skipped_and_long_sentences_split(ewt, tmp_path):
    words = [f"{i}\tword{i}\t_\tNOUN\t_\t_\t0\troot\t_\t_" for i in range(1, 41)]
    sentence = "\n".join(["# sent_id = long", "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_", *words[:5],
                          "5.1\tgone\t_\tVERB\t_\t_\t_\t_\t_\t_", *words[5:]])
    write_conllu(tmp_path / "x-train.conllu", [sentence])
    (parsed,) = tasks.read_sentences("pos", str(tmp_path), "train")
    assert len(parsed.words) == 40 and "don't" not in parsed.words and "gone" not in parsed.words
    tokenizer = FullTokenizer(ewt.vocab)
    encoded = tasks.encode_sentences(tokenizer, [parsed], ["NOUN"], 16, "test")
    assert encoded.shortened == 1 and encoded.num_rows > 1  # split, counted
    starts = encoded.features["word_starts"]
    assert starts.sum() == 40  # every word keeps exactly one labelled first piece
    assert [span[0] for span in encoded.pieces] == [0] * encoded.num_rows
    assert encoded.pieces[0][1] == 0 and encoded.pieces[-1][2] == 40


def test_long_pairs_are_truncated_and_counted(ewt):
    tokenizer = FullTokenizer(ewt.vocab)
    examples = [tasks.Example("a", "one two three four five six", "seven eight", "x"),
                tasks.Example("b", "short", None, "y")]
    encoded = tasks.encode_examples(tokenizer, examples, ["x", "y"], 8, "test", True)
    assert encoded.shortened == 1
    assert encoded.features["input_mask"][0].sum() == 8
    assert tokenizer.encode_pair("one two three four five six", "seven eight", 8)[
        "input_ids"] == encoded.features["input_ids"][0].tolist()


def test_scores():
    gold, predicted = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 1, 1])
    # tp 2, tn 1, fp 1, fn 1: MCC (2 - 1) / sqrt(3 * 3 * 2 * 2) = 1/6; F1 = 4 / (3 + 3)
    assert evaluation.matthews_corrcoef(gold, predicted) == pytest.approx(1 / 6)
    assert evaluation.f1(gold, predicted) == pytest.approx(2 / 3)
    scores = evaluation.scores("pos", np.array([0, 1, -1]), np.array([0, 0, 1]), ["A", "B"],
                               [1, 1, 0])
    assert scores["accuracy"] == pytest.approx(1 / 3)
    assert scores["majority_baseline"] == pytest.approx(1 / 3)
    assert scores["per_tag_accuracy"]["(unseen)"] == {"accuracy": 0.0, "count": 1}


# ------------------------------------------------------------------ bad input


def test_dev_labels_unseen_in_training_are_counted_and_scored_as_errors(ewt, tmp_path, capsys):
    (tmp_path / "train.tsv").write_text("a\tgood film\nb\tbad film\n")
    (tmp_path / "dev.tsv").write_text("a\tgood\nc\tugly\nc\tworse\n")
    config = finetuning_config(tmp_path, tmp_path / "out", ewt.config, ewt.vocab,
                               task_name="tsv", text_a_column=1, label_column=0, do_eval=True)
    results = finetune.run(config)["eval"]
    assert "warning: dev: 2 item(s) have labels training never saw ({'c': 2})" in (
        capsys.readouterr().out)
    assert results["count"] == 3 and results["accuracy"] <= 1 / 3


def test_tsv_with_varying_column_count_fails_naming_file_and_line(ewt, tmp_path):
    (tmp_path / "train.tsv").write_text("a\tgood film\nb\tbad\tfilm\n")
    config = finetuning_config(tmp_path, tmp_path / "out", ewt.config, ewt.vocab,
                               task_name="tsv", do_train=True)
    proc = run_command(command(config), check=False)
    assert proc.returncode == 1
    assert re.search(r"run_finetuning: error: .*train\.tsv:2: 3 tab-separated columns, but the "
                     r"first line has 2", proc.stderr), proc.stderr


def test_another_glue_tasks_files_fail_naming_file_line_and_task(tmp_path):
    (tmp_path / "train.tsv").write_text("gj04\t1\t\tThe sailors rode the breeze .\n"
                                        "gj04\t0\t*\tThe more books .\n")  # CoLA's layout
    with pytest.raises(tasks.TaskDataError, match=r"train\.tsv:1: 4 tab-separated columns, but "
                       "--task_name=sst-2's train file has 2 as GLUE distributes it"):
        tasks.read_examples("sst-2", str(tmp_path), "train")
    assert len(tasks.read_examples("cola", str(tmp_path), "train")) == 2
    # issue 37: a Latin-1 file was a UnicodeDecodeError traceback
    (tmp_path / "train.tsv").write_bytes("good film\t1\nna\xefve film\t0\n".encode("latin-1"))
    with pytest.raises(tasks.TaskDataError, match=r"train\.tsv:2: not UTF-8 \(1 undecodable "
                       r"byte\(s\) in the file\); convert it to UTF-8"):
        tasks.read_examples("tsv", str(tmp_path), "train")


def test_glue_label_outside_the_task_label_set_fails(ewt, tmp_path):
    (tmp_path / "train.tsv").write_text("src\t1\t\tok .\nsrc\t2\t\tbad label .\n")
    config = finetuning_config(tmp_path, tmp_path / "out", ewt.config, ewt.vocab,
                               task_name="cola", do_train=True)
    with pytest.raises(tasks.TaskDataError, match=r"label\(s\) \['2'\] not in the task's label"):
        finetune.run(config)


def test_vocab_size_mismatches_fail_before_training(ewt, tmp_path):
    small_config = tmp_path / "small_bert_config.json"
    small_config.write_text(json.dumps({**TINY_BERT, "vocab_size": 100}))
    config = finetuning_config(ewt.small, tmp_path / "out", small_config, ewt.vocab,
                               do_train=True)
    with pytest.raises(VocabError, match="has 30522 tokens but --bert_config_file"):
        finetune.run(config)
    checkpoints.save_checkpoint({"bert/embeddings/word_embeddings": tf.zeros([100, 64])},
                                tmp_path / "ckpt", 0)
    config = dataclasses.replace(config, bert_config_file=str(ewt.config),
                                 init_checkpoint=str(tmp_path / "ckpt"))
    with pytest.raises(FinetuningConfigError, match="has a 100-token embedding table but "
                       "--vocab_file=.* has 30522 tokens"):
        finetune.run(config)


@pytest.fixture(scope="module")
def large_embeddings_checkpoint(ewt, tmp_path_factory):
    """A checkpoint of the tiny model (its own random draw) with embeddings 10x BERT's init,
    as the budget recipe's LAMB pretraining leaves them."""
    tf.random.set_seed(99)
    params = modeling.variables_by_name(modeling.BertModel(BertConfig(**TINY_BERT)))
    modeling.rescale_embeddings(params, 0.2)
    directory = tmp_path_factory.mktemp("large_embeddings")
    return checkpoints.save_checkpoint(params, directory, 1)


def test_reinit_top_layers_and_rescale_embeddings(ewt, large_embeddings_checkpoint, tmp_path,
                                                  capsys):
    """--reinit_top_layers=1 leaves layer 1 and the pooler as a random-init run of the same
    seed draws them, loads the rest; --rescale_embeddings brings the tables to
    initializer_range. A learning rate of 1e-12 keeps the weights where they started."""
    saved = tf.train.load_checkpoint(large_embeddings_checkpoint)
    runs = {}
    for name, overrides in {
            "random": {},
            "plain": dict(init_checkpoint=large_embeddings_checkpoint),
            "both": dict(init_checkpoint=large_embeddings_checkpoint, reinit_top_layers=1,
                         rescale_embeddings=True)}.items():
        finetune.run(finetuning_config(ewt.small, tmp_path / name, ewt.config, ewt.vocab,
                                       do_train=True, learning_rate=1e-12,
                                       num_train_epochs=1.0, **overrides))
        runs[name] = (final_weights(tmp_path / name), capsys.readouterr().out)
    assert "word embeddings are 10x initializer_range (0.02) in RMS" in runs["plain"][1]
    assert "--rescale_embeddings: embedding tables / 10" in runs["both"][1]
    both, plain, random_init = (runs[k][0] for k in ("both", "plain", "random"))
    for name in both:
        if name.startswith(("bert/encoder/layer_1/", "bert/pooler/")):
            np.testing.assert_allclose(both[name], random_init[name], atol=1e-6, err_msg=name)
            if name.endswith("kernel"):  # drawn (LayerNorms and biases start at 1 and 0)
                assert not np.allclose(both[name], saved.get_tensor(name), atol=1e-3), name
        elif name in modeling.EMBEDDING_TABLES:
            np.testing.assert_allclose(both[name], saved.get_tensor(name) / 10, rtol=1e-4,
                                       atol=1e-6, err_msg=name)
            np.testing.assert_allclose(plain[name], saved.get_tensor(name), atol=1e-6)
        elif name.startswith("bert/"):
            np.testing.assert_allclose(both[name], saved.get_tensor(name), atol=1e-6,
                                       err_msg=name)


def test_a_tagger_leaves_the_pooler_it_never_reads_as_loaded(ewt, large_embeddings_checkpoint,
                                                             tmp_path):
    """Token tagging reads no pooled output: AdamW's weight decay must not shrink the pooler
    the checkpoint hands on, while every weight the loss reaches moves."""
    finetune.run(finetuning_config(ewt.small, tmp_path / "out", ewt.config, ewt.vocab,
                                   do_train=True, num_train_epochs=1.0,
                                   init_checkpoint=large_embeddings_checkpoint))
    saved, final = tf.train.load_checkpoint(large_embeddings_checkpoint), final_weights(
        tmp_path / "out")
    for name, value in final.items():
        if name.startswith("bert/pooler/"):
            np.testing.assert_array_equal(value, saved.get_tensor(name), err_msg=name)
        elif name.startswith("bert/") and name.endswith("kernel"):
            assert not np.allclose(value, saved.get_tensor(name)), name


def test_flag_errors(ewt, tmp_path):
    config = finetuning_config(ewt.small, tmp_path / "out", ewt.config, ewt.vocab)
    with pytest.raises(FinetuningConfigError, match="--do_train or --do_eval or --do_predict"):
        finetune.run(config)
    with pytest.raises(FinetuningConfigError, match="--task_name must be one of"):
        finetune.run(dataclasses.replace(config, task_name="squad", do_train=True))
    # issue 37: nan epochs passed `<= 0` and failed in int() deep in the schedule
    with pytest.raises(FinetuningConfigError, match="--num_train_epochs must be a finite "
                       "number > 0, got nan"):
        finetune.run(dataclasses.replace(config, do_train=True, num_train_epochs=float("nan")))
    with pytest.raises(FinetuningConfigError, match="less than one update"):
        finetune.run(dataclasses.replace(config, do_train=True, train_batch_size=1000))
    with pytest.raises(loop.TrainingError, match="--max_seq_length=128 is longer than the "
                       "model's max_position_embeddings=64"):
        finetune.run(dataclasses.replace(config, do_train=True, max_seq_length=128))
    with pytest.raises(FinetuningConfigError, match="--reinit_top_layers changes what "
                       "--init_checkpoint loads; pass --init_checkpoint too"):
        finetune.run(dataclasses.replace(config, do_train=True, reinit_top_layers=1))
    with pytest.raises(FinetuningConfigError, match="--rescale_embeddings changes what"):
        finetune.run(dataclasses.replace(config, do_train=True, rescale_embeddings=True))
    with pytest.raises(FinetuningConfigError, match="--reinit_top_layers=3 is more than the 2 "
                       "layers of --bert_config_file="):
        finetune.run(dataclasses.replace(config, do_train=True, reinit_top_layers=3,
                                         init_checkpoint=str(tmp_path)))
    assert not (tmp_path / "out").exists()


def test_empty_split_and_an_output_dir_holding_another_run_fail(ewt, tmp_path):
    (tmp_path / "train.tsv").write_text("label\ttext\n")
    config = finetuning_config(tmp_path, tmp_path / "out", ewt.config, ewt.vocab,
                               task_name="tsv", tsv_has_header=True, do_train=True,
                               train_batch_size=2)
    with pytest.raises(tasks.TaskDataError, match=r"train\.tsv: no examples"):
        finetune.run(config)
    (tmp_path / "train.tsv").write_text("label\ttext\na\tgood film\nb\tbad film\n")
    checkpoints.save_checkpoint({"global_step": tf.constant(3, tf.int64)}, tmp_path / "out", 3)
    with pytest.raises(checkpoints.CheckpointMismatchError,
                       match=r"model.ckpt-3 lacks \d+ variable\(s\) needed to resume exactly"):
        finetune.run(config)


def test_relative_output_dir_resumes_and_never_overwrites_a_pretraining_run(ewt, tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.tsv").write_text("a\tgood film\nb\tbad film\n" * 4)
    config = finetuning_config(".", "rel/out", ewt.config, ewt.vocab, task_name="tsv",
                               do_train=True, train_batch_size=4, num_train_epochs=1.0)
    assert finetune.run(config)["train"]["global_step"] == 2
    before = (tmp_path / "rel/out/model.ckpt-2.index").read_bytes()
    rerun = finetune.run(config)["train"]  # finished: resumes at the end, trains nothing
    assert rerun["global_step"] == 2 and "avg_sequences_per_second" not in rerun
    assert (tmp_path / "rel/out/model.ckpt-2.index").read_bytes() == before

    checkpoints.save_checkpoint({"global_step": tf.constant(3, tf.int64)}, "rel/pre", 3)
    with pytest.raises(checkpoints.CheckpointMismatchError, match="model.ckpt-3 lacks"):
        finetune.run(dataclasses.replace(config, output_dir="rel/pre"))
    assert checkpoints.listed_checkpoints("rel/pre") == [os.path.join("rel/pre", "model.ckpt-3")]
