"""`export --format=keras_hub`: a KerasHub preset directory, written by KerasHub itself.

The weights are copied into KerasHub's own `BertBackbone` (and `BertTextClassifier` for a
fine-tuned classifier), which then save themselves with `save_to_preset`: config.json,
model.weights.h5, tokenizer.json with assets/tokenizer/vocabulary.txt, metadata.json (and
task.json, task.weights.h5, preprocessor.json for the classifier), so that
`keras_hub.models.BertBackbone.from_preset(DIR)` and `BertTextClassifier.from_preset(DIR)` load
it with KerasHub's `BertTokenizer`.

The weight layout follows KerasHub's BERT (keras_hub/src/models/bert/bert_backbone.py and
keras_hub/src/layers/modeling/transformer_encoder.py): attention projections are Keras
EinsumDense kernels [hidden, heads, head_size] and [heads, head_size, hidden]; everything else is
Google's [in, out] layout. KerasHub's BertBackbone always uses the tanh approximation of GELU,
which is our hidden_act "gelu_new"; any other activation (our default "gelu" is the erf form,
7.3e-3 off on all-MiniLM-L6-v2's sequence output with the tanh one) is exported with the
subclasses of bert_tf/tools/export_keras_hub_classes.py, which the preset holds as
bert_tf_keras_hub.py and a loading process must import first (KerasHub finds only classes
registered with Keras). KerasHub's tokenizer lower-cases with Unicode case folding, which maps
a few characters (such as U+1D35, modifier letter capital I) differently from Google's. A tagger
has no KerasHub BERT task to load into, so it is refused.
"""

import os
import shutil

import numpy as np

from bert_tf.model.modeling import variables_by_name
from bert_tf.tools.export_source import ExportError, ExportSource, write_common_files


def _check_exportable(source: ExportSource) -> None:
    if source.kind == "tagger":
        raise ExportError("KerasHub has no BERT token-classification task to load a tagger "
                          "into: export it with --format=savedmodel or --format=onnx")
    if not source.raw_text:
        raise ExportError(f"KerasHub's BertTokenizer cannot split words with "
                          f"{source.word_splitter!r}: use --format=savedmodel (token ids)")


CLASSES_FILE = "bert_tf_keras_hub.py"  # the preset's copy of export_keras_hub_classes.py


def _classes(hidden_act: str) -> dict:
    """The classes the preset is made of: KerasHub's own for "gelu_new" (its tanh GELU), else
    bert_tf's subclasses with the model's activation (export_keras_hub_classes.py)."""
    import keras_hub

    if hidden_act == "gelu_new":
        module, prefix, options = keras_hub.models, "", {}
    else:
        from bert_tf.tools import export_keras_hub_classes as module

        prefix, options = "Activation", {"activation": hidden_act}
    return {"backbone": getattr(module, f"{prefix}BertBackbone"),
            "tokenizer": getattr(module, f"{prefix}BertTokenizer"),
            "preprocessor": getattr(module, f"{prefix}BertTextClassifierPreprocessor"),
            "classifier": getattr(module, f"{prefix}BertTextClassifier"),
            "backbone_options": options}


def _backbone(source: ExportSource, weights: dict, classes: dict):
    config = source.bert_config
    backbone = classes["backbone"](
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size, **classes["backbone_options"])
    heads, head_size = config.num_attention_heads, config.head_size

    def set_dense(layer, scope, kernel_shape=None, bias_shape=None):
        kernel, bias = weights[f"{scope}/kernel"], weights[f"{scope}/bias"]
        layer.kernel.assign(kernel.reshape(kernel_shape or kernel.shape))
        layer.bias.assign(bias.reshape(bias_shape or bias.shape))

    def set_norm(layer, scope):
        layer.gamma.assign(weights[f"{scope}/gamma"])
        layer.beta.assign(weights[f"{scope}/beta"])

    backbone.token_embedding.embeddings.assign(weights["bert/embeddings/word_embeddings"])
    backbone.position_embedding.position_embeddings.assign(
        weights["bert/embeddings/position_embeddings"])
    backbone.segment_embedding.embeddings.assign(weights["bert/embeddings/token_type_embeddings"])
    set_norm(backbone.embeddings_layer_norm, "bert/embeddings/LayerNorm")
    hidden = config.hidden_size
    for i, layer in enumerate(backbone.transformer_layers):
        scope = f"bert/encoder/layer_{i}"
        attention = layer._self_attention_layer
        for dense, name in ((attention._query_dense, "query"), (attention._key_dense, "key"),
                            (attention._value_dense, "value")):
            set_dense(dense, f"{scope}/attention/self/{name}", (hidden, heads, head_size),
                      (heads, head_size))
        set_dense(attention._output_dense, f"{scope}/attention/output/dense",
                  (heads, head_size, hidden))
        set_norm(layer._self_attention_layer_norm, f"{scope}/attention/output/LayerNorm")
        set_dense(layer._feedforward_intermediate_dense, f"{scope}/intermediate/dense")
        set_dense(layer._feedforward_output_dense, f"{scope}/output/dense")
        set_norm(layer._feedforward_layer_norm, f"{scope}/output/LayerNorm")
    set_dense(backbone.pooled_dense, "bert/pooler/dense")
    return backbone


def export(source: ExportSource, directory: str) -> None:
    """Writes the preset (and export.json, bert_config.json, vocab.txt, and for an activation
    other than "gelu_new" bert_tf_keras_hub.py) into `directory`."""
    _check_exportable(source)
    classes = _classes(source.bert_config.hidden_act)
    weights = {name: variable.numpy()
               for name, variable in variables_by_name(source.build_model()).items()}
    backbone = _backbone(source, weights, classes)
    tokenizer = classes["tokenizer"](
        vocabulary=source.vocab, lowercase=source.do_lower_case,
        strip_accents=source.do_lower_case)
    if source.kind == "encoder":
        backbone.save_to_preset(directory)
        tokenizer.save_to_preset(directory)
    else:
        preprocessor = classes["preprocessor"](
            tokenizer, sequence_length=source.max_seq_length)
        classifier = classes["classifier"](
            backbone, num_classes=len(source.labels), preprocessor=preprocessor,
            dropout=source.bert_config.hidden_dropout_prob)
        classifier.output_dense.kernel.assign(np.transpose(weights["output_weights"]))
        classifier.output_dense.bias.assign(weights["output_bias"])
        classifier.save_to_preset(directory)
    if classes["backbone_options"]:
        from bert_tf.tools import export_keras_hub_classes

        shutil.copyfile(export_keras_hub_classes.__file__, os.path.join(directory, CLASSES_FILE))
    write_common_files(source, directory, "keras_hub")


def loading_note(hidden_act: str, directory: str) -> str | None:
    """What a process must do before from_preset(directory), or None (nothing)."""
    if hidden_act == "gelu_new":
        return None
    directory = os.path.abspath(directory)
    return (f"note: hidden_act {hidden_act!r} is not KerasHub's tanh GELU: the preset's "
            f"classes are in {os.path.join(directory, CLASSES_FILE)}; import it before "
            f"from_preset: import sys; sys.path.insert(0, {directory!r}); "
            "import bert_tf_keras_hub (docs/export.md, keras_hub)")
