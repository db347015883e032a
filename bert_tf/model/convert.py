"""Convert BERT weights between Hugging Face and our (Google-named) checkpoints.

`hf_to_tf(hf_dir, output_dir)`: hf_dir has config.json and model.safetensors (BertModel or
BertForPreTraining keys); output_dir gets model.ckpt-0 (+ `checkpoint` file), bert_config.json
and, if hf_dir has one, vocab.txt. Heads absent from hf_dir are freshly initialised.
`tf_to_hf(checkpoint, output_dir)`: checkpoint is a prefix or directory (ours or Google's
bert_model.ckpt); output_dir gets config.json and model.safetensors for
transformers.BertForPreTraining. The command line is `python -m bert_tf convert`
(bert_tf/tools/convert.py).

Layout facts: HF Linear weights are [out, in] (Google kernels are [in, out]);
HF LayerNorm is weight/bias (old releases: gamma/beta); the MLM decoder weight is
tied to the word embeddings and its bias is `cls.predictions.bias`.
"""

import json
import os
import re
import shutil
import tempfile
from typing import NamedTuple

import ml_dtypes  # noqa: F401  (lets numpy, hence safetensors, read bfloat16 tensors)
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from bert_tf.model.checkpoints import resolve_checkpoint, restore, save_checkpoint
from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.model.modeling import POOLER_SCOPE, BertForPreTraining, variables_by_name

HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
BERT_CONFIG = "bert_config.json"
VOCAB = "vocab.txt"
LAYER_NORM_EPSILON = 1e-12
# Google names without an exact HF counterpart of the generic rule.
SPECIAL_HF_KEYS = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",  # both [2, H]
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}
# Other HF spellings: old LayerNorm names, and the decoder's copy of the MLM bias.
LEGACY_SUFFIXES = {".weight": ".gamma", ".bias": ".beta"}
ALTERNATIVE_KEYS = {"cls.predictions.bias": "cls.predictions.decoder.bias"}
# HF keys that carry no weights of their own (a buffer and tied copies).
IGNORED_HF_KEYS = re.compile(
    r"^(bert\.)?embeddings\.position_ids$|^cls\.predictions\.decoder\.bias$")
TIED_DECODER_KEY = "cls.predictions.decoder.weight"


class ConversionError(Exception):
    """Input that cannot be converted (the message names the file and the fix)."""


class ConversionReport(NamedTuple):
    converted: list  # Google names written to the output
    fresh: list  # Google names absent from the input (heads left freshly initialised)
    unused: list  # input names that were not converted


def hf_key(google_name):
    """(HF BertForPreTraining key, whether the tensor is transposed) for a Google name."""
    if google_name in SPECIAL_HF_KEYS:
        return SPECIAL_HF_KEYS[google_name], False
    parts = [re.sub(r"^layer_(\d+)$", r"layer.\1", p) for p in google_name.split("/")]
    last = parts[-1]
    if last == "kernel":
        return ".".join(parts[:-1] + ["weight"]), True
    if last in ("gamma", "beta"):
        return ".".join(parts[:-1] + ["weight" if last == "gamma" else "bias"]), False
    if last == "bias":
        return ".".join(parts), False
    return ".".join(parts + ["weight"]), False  # the embedding tables


def _is_head(google_name):
    # Parts a plain BertModel export may lack; they start fresh when absent.
    return google_name.startswith(("cls/", POOLER_SCOPE))


def config_from_hf(hf_config, source):
    """BertConfig from a Hugging Face BERT config.json dict; rejects what BERT here can't run."""
    if hf_config.get("model_type", "bert") != "bert":
        raise ConversionError(f"{source}: model_type is {hf_config['model_type']!r}, not 'bert'")
    eps = hf_config.get("layer_norm_eps", LAYER_NORM_EPSILON)
    if not np.isclose(eps, LAYER_NORM_EPSILON, rtol=1e-3, atol=0):
        raise ConversionError(f"{source}: layer_norm_eps is {eps}; this BERT uses "
                              f"{LAYER_NORM_EPSILON} (Google's)")
    position_type = hf_config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConversionError(f"{source}: position_embedding_type {position_type!r} is not "
                              "supported (only 'absolute')")
    fields = {k: hf_config[k] for k in BertConfig.__dataclass_fields__ if k in hf_config}
    if fields.get("hidden_act") == "gelu_pytorch_tanh":  # the same tanh approximation
        fields["hidden_act"] = "gelu_new"
    try:
        return BertConfig.from_dict(fields, source=source)
    except BertConfigError as e:
        raise ConversionError(str(e)) from None


def _read_hf_dir(hf_dir):
    """(BertConfig, {HF key: array}, weights path) from an HF directory."""
    hf_dir = os.fspath(hf_dir)
    config_path = os.path.join(hf_dir, HF_CONFIG)
    weights_path = os.path.join(hf_dir, HF_WEIGHTS)
    for path in (config_path, weights_path):
        if not os.path.isfile(path):
            raise ConversionError(f"{path} not found; --hf_dir must hold {HF_CONFIG} and "
                                  f"{HF_WEIGHTS} (save with safe_serialization=True)")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = config_from_hf(json.load(f), config_path)
    except json.JSONDecodeError as e:
        raise ConversionError(f"{config_path}: not valid JSON ({e})") from None
    try:
        tensors = load_file(weights_path)
    except (SafetensorError, OSError) as e:
        raise ConversionError(f"{weights_path}: cannot read safetensors ({e})") from None
    return config, tensors, weights_path


def hf_to_tf(hf_dir, output_dir) -> ConversionReport:
    """HF directory -> output_dir/model.ckpt-0 + bert_config.json (+ vocab.txt)."""
    config, tensors, weights_path = _read_hf_dir(hf_dir)
    # BertModel files have no 'bert.' prefix; BertForPreTraining ones do.
    has_prefix = any(k.startswith("bert.") for k in tensors)
    variables = variables_by_name(BertForPreTraining(config))
    converted, fresh, used = [], [], set()
    for name, variable in variables.items():
        key, transpose = hf_key(name)
        if not has_prefix:
            key = key.removeprefix("bert.")
        stem, _, suffix = key.rpartition(".")
        candidates = (key, stem + LEGACY_SUFFIXES.get("." + suffix, "." + suffix),
                      ALTERNATIVE_KEYS.get(key))
        key = next((k for k in candidates if k in tensors), None)
        if key is None:
            if not _is_head(name):
                raise ConversionError(f"{weights_path}: no tensor for {name} (expected key "
                                      f"{hf_key(name)[0]}); is it a BERT model?")
            fresh.append(name)
            continue
        value = np.asarray(tensors[key], dtype=np.float32)
        value = value.T if transpose else value
        if value.shape != tuple(variable.shape):
            raise ConversionError(f"{weights_path}: {key} has shape {list(value.shape)} but "
                                  f"{HF_CONFIG} implies {variable.shape.as_list()} for {name}")
        variable.assign(value)
        converted.append(name)
        used.add(key)
    os.makedirs(output_dir, exist_ok=True)
    save_checkpoint(variables, output_dir, step=0)
    config.to_json_file(os.path.join(output_dir, BERT_CONFIG))
    _copy_vocab(hf_dir, output_dir)
    word_embeddings = variables["bert/embeddings/word_embeddings"].numpy()
    if TIED_DECODER_KEY in tensors and np.array_equal(tensors[TIED_DECODER_KEY], word_embeddings):
        used.add(TIED_DECODER_KEY)  # a copy of the word embeddings (tied), not a weight of its own
    unused = sorted(k for k in tensors if k not in used and not IGNORED_HF_KEYS.match(k))
    return ConversionReport(converted=converted, fresh=fresh, unused=unused)


def tf_to_hf(checkpoint, output_dir, bert_config_file=None) -> ConversionReport:
    """Our (or Google's) checkpoint -> output_dir/config.json + model.safetensors."""
    prefix = resolve_checkpoint(checkpoint)
    bert_config_file = bert_config_file or os.path.join(os.path.dirname(prefix), BERT_CONFIG)
    config = BertConfig.from_json_file(bert_config_file)
    variables = variables_by_name(BertForPreTraining(config))
    restored = restore(prefix, variables)
    lacking = [name for name in restored.missing if not _is_head(name)]
    if lacking:
        raise ConversionError(f"checkpoint {prefix} lacks encoder weights: "
                              f"{', '.join(lacking[:5])}; is it a BERT checkpoint?")
    tensors = {}
    for name in restored.loaded:
        key, transpose = hf_key(name)
        value = variables[name].numpy()
        tensors[key] = np.ascontiguousarray(value.T if transpose else value)
    hf_config = {
        **config.to_dict(),
        "architectures": ["BertForPreTraining"],
        "model_type": "bert",
        "layer_norm_eps": LAYER_NORM_EPSILON,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }
    _write_hf_dir(output_dir, hf_config, tensors)
    _copy_vocab(os.path.dirname(prefix), output_dir)
    return ConversionReport(converted=restored.loaded, fresh=restored.missing,
                            unused=[n for n in restored.unused if not _is_training_state(n)])


def _is_training_state(name):
    return name.endswith(("/adam_m", "/adam_v")) or "/" not in name


def _write_hf_dir(output_dir, hf_config, tensors):
    os.makedirs(output_dir, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=".tmp-convert-", dir=output_dir)
    try:
        save_file(tensors, os.path.join(tmp_dir, HF_WEIGHTS), metadata={"format": "pt"})
        with open(os.path.join(tmp_dir, HF_CONFIG), "w", encoding="utf-8") as f:
            json.dump(hf_config, f, indent=2, sort_keys=True)
            f.write("\n")
        for name in (HF_WEIGHTS, HF_CONFIG):
            os.replace(os.path.join(tmp_dir, name), os.path.join(output_dir, name))
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _copy_vocab(src_dir, output_dir):
    src = os.path.join(src_dir, VOCAB)
    dst = os.path.join(output_dir, VOCAB)
    if os.path.isfile(src) and not os.path.exists(dst):
        shutil.copyfile(src, dst)
