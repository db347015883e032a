"""The tiny model, records and training settings that the training, fault and cluster tests
share: L2 H64 A2 I128 at sequence length 64, records made by create_pretraining_data.py from
Emma, and the run_pretraining settings those fit."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from conftest import ONE_THREAD, PYTHON, REPO, built_once, run_command

VENV_BIN = Path(sys.executable).parent
SEQ, PREDICTIONS = 64, 10
TINY_BERT = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=128, hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0, max_position_embeddings=SEQ)
TRAINING = dict(do_train=True, train_batch_size=4, max_seq_length=SEQ,
                max_predictions_per_seq=PREDICTIONS, num_train_steps=2, num_warmup_steps=0,
                learning_rate=1e-3, save_checkpoints_steps=2)
"""A short in-process run; multi-process tests override steps, logging and peer timeout."""


def emma(shared_data) -> str:
    return (shared_data / "corpora" / "gutenberg" / "austen-emma.txt").read_text()


def vocab_file(shared_data) -> Path:
    return shared_data / "vocab" / "bert-base-uncased.txt"


def write_bert_config(path, dropout=0.0, **overrides) -> Path:
    """The tiny bert_config.json; dropout matters wherever a resume must redraw its masks."""
    path.write_text(json.dumps({**TINY_BERT, "hidden_dropout_prob": dropout,
                                "attention_probs_dropout_prob": dropout, **overrides}))
    return path


def make_records(text_files, record_files, vocab, dupe_factor, *extra_flags):
    """create_pretraining_data.py at the tiny shape, one output file per text file."""
    run_command([PYTHON, REPO / "create_pretraining_data.py",
                 "--input_file=" + ",".join(map(str, text_files)),
                 "--output_file=" + ",".join(map(str, record_files)), f"--vocab_file={vocab}",
                 f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDICTIONS}",
                 f"--dupe_factor={dupe_factor}", "--noprogress", *extra_flags], env=ONE_THREAD)


def pretraining_data(tmp_path_factory, shared_data) -> SimpleNamespace:
    """Train/eval TFRecords from Emma (disjoint parts) and the tiny bert_config, made once per
    test run (built_once) for every module and worker that uses them."""
    def build(root):
        text = emma(shared_data)
        (root / "train.txt").write_text(text[:200_000])
        (root / "eval.txt").write_text(text[-80_000:])
        make_records([root / "train.txt", root / "eval.txt"],
                     [root / "train.tfrecord", root / "eval.tfrecord"], vocab_file(shared_data), 2)
        write_bert_config(root / "bert_config.json")

    root = built_once(tmp_path_factory, "tiny_pretraining_data", build)
    return SimpleNamespace(root=root, train=root / "train.tfrecord", eval=root / "eval.tfrecord",
                           config=root / "bert_config.json", vocab=vocab_file(shared_data))


def training_settings(**settings) -> dict:
    """TRAINING with `settings` over it (bert_config_file, input_files, output_dir and any
    overrides); paths as strings, as flags hold them."""
    return {**TRAINING, **{k: str(v) if isinstance(v, Path) else v for k, v in settings.items()}}


def training_config(**settings):
    # Imported when called, so that collecting test_cluster.py does not load TensorFlow.
    from bert_tf.train.config import PretrainingConfig

    return PretrainingConfig(**training_settings(**settings))


def as_flags(settings: dict) -> list[str]:
    """Settings as run_pretraining.py flags (booleans as --name / --noname)."""
    return [f"--{k}={v}" if not isinstance(v, bool) else f"--{'' if v else 'no'}{k}"
            for k, v in settings.items()]


def checkpoint_values(prefix) -> dict:
    """A checkpoint's values by name, but for the wall-clock seconds trained (--max_train_time),
    which differ between any two runs."""
    import tensorflow as tf  # when called: see training_config

    from bert_tf.train.state import TRAIN_SECONDS

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.split("/")[0] != TRAIN_SECONDS}


def random_batch(rng, batch_size):
    """A pretraining micro-batch of random tokens and masks at the tiny shape, for tests of
    gradient magnitudes, where the text does not matter."""
    import numpy as np
    import tensorflow as tf  # when called: see training_config

    vocab = TINY_BERT["vocab_size"]
    return {name: tf.constant(value) for name, value in {
            "input_ids": rng.integers(1000, vocab, [batch_size, SEQ], dtype=np.int32),
            "input_mask": np.ones([batch_size, SEQ], np.int32),
            "segment_ids": np.zeros([batch_size, SEQ], np.int32),
            "masked_lm_positions": rng.integers(1, SEQ, [batch_size, PREDICTIONS],
                                                dtype=np.int32),
            "masked_lm_ids": rng.integers(1000, vocab, [batch_size, PREDICTIONS], dtype=np.int32),
            "masked_lm_weights": np.ones([batch_size, PREDICTIONS], np.float32),
            "next_sentence_labels": rng.integers(0, 2, [batch_size], dtype=np.int32)}.items()}
