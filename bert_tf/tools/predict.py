"""Masked-word predictions from a pretraining checkpoint.

    python -m bert_tf predict --bert_config_file=out/bert_config.json --init_checkpoint=out
        --vocab_file=vocab.txt --text="the [MASK] sat on the mat" [--text=...] [--top_k=5]

Every `[MASK]` in a --text gets its --top_k most likely tokens with probabilities.
"""

import dataclasses
import json

import numpy as np
import tensorflow as tf
from absl import flags

import bert_tf
from bert_tf.data import shared_flags
from bert_tf.data.tokenization import FullTokenizer, VocabError, load_tokenizer
from bert_tf.model import checkpoints, devices
from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.model.modeling import BertForPreTraining, variables_by_name

MASK = "[MASK]"


def load_model(bert_config_file: str, init_checkpoint: str) -> BertForPreTraining:
    """The pretraining model with weights from a checkpoint (prefix or directory);
    every variable, the masked-LM head included, must be in the checkpoint."""
    model = BertForPreTraining(BertConfig.from_json_file(bert_config_file))
    try:
        checkpoints.restore(init_checkpoint, variables_by_name(model), require_all=True)
    except checkpoints.CheckpointMismatchError as e:
        raise checkpoints.CheckpointMismatchError(
            f"--init_checkpoint={init_checkpoint}: {e}. predict needs a pretraining checkpoint "
            "(run_pretraining's --output_dir, or Google's bert_model.ckpt) and the "
            "--bert_config_file it was written with") from None
    return model


def encode_masked_text(tokenizer: FullTokenizer, text: str, max_seq_length: int) -> dict:
    """[CLS] text [SEP] with each literal [MASK] kept as the mask token; one batch row."""
    if MASK not in text:
        raise ValueError(f"--text {text!r} has no {MASK} to predict")
    ids = [tokenizer.cls_id]
    for i, piece in enumerate(text.split(MASK)):
        if i:
            ids.append(tokenizer.mask_id)
        ids += tokenizer.tokenize_ids(piece) if piece.strip() else []
    ids.append(tokenizer.sep_id)
    if len(ids) > max_seq_length:
        raise ValueError(f"--text {text!r} is {len(ids)} tokens, more than the model's "
                         f"max_position_embeddings ({max_seq_length})")
    positions = [i for i, token_id in enumerate(ids) if token_id == tokenizer.mask_id]
    return {
        "input_ids": np.array([ids], np.int32),
        "input_mask": np.ones([1, len(ids)], np.int32),
        "segment_ids": np.zeros([1, len(ids)], np.int32),
        "masked_lm_positions": np.array([positions], np.int32),
    }


def predict_masked(model: BertForPreTraining, tokenizer: FullTokenizer, text: str,
                   top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, the top_k (token, probability) pairs."""
    features = encode_masked_text(tokenizer, text, model.config.max_position_embeddings)
    logits = model(features, training=False).mlm_logits[0]  # [masks, V]
    probs, ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=top_k)
    return [
        list(zip(tokenizer.convert_ids_to_tokens(row_ids), row_probs, strict=True))
        for row_ids, row_probs in zip(ids.numpy().tolist(), probs.numpy().tolist(), strict=True)
    ]


@dataclasses.dataclass
class PredictConfig:
    bert_config_file: str
    init_checkpoint: str
    vocab_file: str
    text: list[str]
    do_lower_case: bool | None = None  # None: the vocab's tokenizer spec
    allow_dictionary_mismatch: bool = False
    top_k: int = 5
    json: bool = False


def define_flags() -> None:
    """Defines the flags (defaults from PredictConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(PredictConfig)}
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
    flags.DEFINE_string("init_checkpoint", None, "Checkpoint prefix or directory (its latest).")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab the model was trained with.")
    shared_flags.define_tokenizer_flags(d)
    flags.DEFINE_multi_string("text", None, "Sentence with one or more [MASK]; repeatable.")
    flags.DEFINE_integer("top_k", d["top_k"], "Predictions per [MASK].")
    flags.DEFINE_bool("json", d["json"], "Print one JSON object per text instead of lines.")
    for name in ("bert_config_file", "init_checkpoint", "vocab_file", "text"):
        flags.mark_flag_as_required(name)


def run(config: PredictConfig) -> int:
    """Prints the predictions for each text; returns the exit status."""
    devices.use_one_gpu()
    tokenizer = load_tokenizer(config.vocab_file, config.do_lower_case,
                               config.allow_dictionary_mismatch)
    if not 1 <= config.top_k <= tokenizer.vocab_size:
        raise ValueError(f"--top_k={config.top_k} must be between 1 and the {tokenizer.vocab_size} "
                         f"tokens of --vocab_file={config.vocab_file}")
    model = load_model(config.bert_config_file, config.init_checkpoint)
    for text in config.text:
        predictions = predict_masked(model, tokenizer, text, config.top_k)
        if config.json:
            print(json.dumps({"text": text, "predictions": predictions}))
            continue
        print(text)
        for i, candidates in enumerate(predictions):
            words = ", ".join(f"{token} ({prob:.3f})" for token, prob in candidates)
            print(f"  {MASK} #{i + 1}: {words}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, PredictConfig, run, errors=(
        BertConfigError, VocabError, checkpoints.CheckpointError, ValueError))
