"""`export --format=onnx`: model.onnx converted by tf2onnx from the SavedModel's `encode`
function (bert_tf/tools/export_savedmodel.py), for ONNX Runtime and other ONNX consumers.

Inputs are TF Hub's int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids`; outputs
`pooled_output`, `sequence_output` (encoder) or `logits`, `probabilities`, `label_ids` (task
models). ONNX has no tokenizer ops: vocab.txt and export.json (do_lower_case, max_seq_length,
labels) say how to make the ids, e.g. with bert_tf's FullTokenizer.
"""

import os

import tensorflow as tf

from bert_tf.tools.export_savedmodel import ServingModule, id_signature
from bert_tf.tools.export_source import ExportError, ExportSource, write_common_files

MODEL_FILE = "model.onnx"
# ONNX opset 17 has LayerNormalization and runs on every onnxruntime since 1.14.
OPSET = 17


def _gelu_with_erf(x):
    """Exact GELU as x/2 (1 + erf(x/sqrt 2)): tf.nn.gelu(approximate=False) computes it with
    Erfc, an op tf2onnx 1.17 cannot convert; ONNX has Erf. The two agree to float32 rounding
    (tests/test_export.py compares the ONNX model's outputs with bert_tf's)."""
    return 0.5 * x * (1.0 + tf.math.erf(x * tf.cast(0.7071067811865476, x.dtype)))


def _check_converted(model_proto) -> None:
    """tf2onnx logs ops it cannot convert and writes the model anyway: refuse it instead."""
    unconverted = sorted({node.op_type for node in model_proto.graph.node
                          if node.domain not in ("", "ai.onnx", "com.microsoft")})
    if unconverted:
        raise ExportError(f"tf2onnx could not convert the TensorFlow op(s) {unconverted} to "
                          f"ONNX opset {OPSET}; export --format=savedmodel instead")


def export(source: ExportSource, directory: str) -> None:
    """Writes model.onnx (and export.json, bert_config.json, vocab.txt) into `directory`."""
    import tf2onnx  # imported here: it takes seconds, and only this format needs it

    model = source.build_model()
    encoder = getattr(model, "bert", model)
    if source.bert_config.hidden_act == "gelu":
        for layer in encoder.layers:
            layer.activation = _gelu_with_erf
    module = ServingModule(source, model)
    signature = [tf.TensorSpec(spec.shape, spec.dtype, name)
                 for name, spec in id_signature().items()]

    @tf.function(input_signature=signature)
    def encode(input_word_ids, input_mask, input_type_ids):
        return module.encode({"input_word_ids": input_word_ids, "input_mask": input_mask,
                              "input_type_ids": input_type_ids})

    model_proto, _ = tf2onnx.convert.from_function(encode, input_signature=signature,
                                                   opset=OPSET)
    _check_converted(model_proto)
    with open(os.path.join(directory, MODEL_FILE), "wb") as f:
        f.write(model_proto.SerializeToString())
    write_common_files(source, directory, "onnx")
