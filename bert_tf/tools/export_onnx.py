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


def _convert(encode, signature):
    """The ONNX model of the tf.function `encode`, made by tf2onnx's own steps chosen for
    memory: 4.7 GiB at most for BERT-base, where tf2onnx.convert.from_function went past
    12 GiB (peak RSS of `export --format=onnx`, also reported by bench/inference.py;
    docs/export.md, "Memory", says where from_function's memory goes).

    The weights are frozen the way tf2onnx's large_model mode freezes them (functions inlined
    before the variables become constants; no grappler pass over the constants) and kept out
    of the TensorFlow graph that is converted (compress_graph_def hands them over directly).
    tf2onnx's ONNX optimizers are skipped: every pass re-copies every weight into protobuf
    arenas that keep the old copies, and ONNX Runtime makes the same rewrites when it loads the
    model (the optimized graphs run as fast; docs/export.md)."""
    # Imported here: tf2onnx takes seconds to import, and only this format needs it.
    from tf2onnx import tf_loader, tf_utils
    from tf2onnx.convert import tensor_names_from_structed
    from tf2onnx.tfonnx import process_tf_graph

    function = encode.get_concrete_function(*signature)
    inputs = [t.name for t in function.inputs if t.dtype != tf.resource]
    outputs = [t.name for t in function.outputs if t.dtype != tf.resource]
    frozen = tf_loader.from_function(function, inputs, outputs, large_model=True)
    with tf.Graph().as_default() as graph:
        weights = tf_utils.compress_graph_def(frozen)
        tf.import_graph_def(frozen, name="")
        # continue_on_error as from_function has it: _check_converted names what is left.
        onnx_graph = process_tf_graph(
            graph, continue_on_error=True, opset=OPSET, input_names=inputs,
            output_names=outputs, const_node_values=weights,
            tensors_to_rename=tensor_names_from_structed(function, inputs, outputs))
    return onnx_graph.make_model(f"bert_tf export of {function.name}")


def export(source: ExportSource, directory: str) -> None:
    """Writes model.onnx (and export.json, bert_config.json, vocab.txt) into `directory`."""
    model = source.build_model()
    encoder = getattr(model, "bert", model)
    if source.bert_config.hidden_act == "gelu":
        for layer in encoder.layers:
            layer.activation = _gelu_with_erf
    module = ServingModule(source, model)
    signature = [tf.TensorSpec(spec.shape, spec.dtype, name)
                 for name, spec in id_signature().items()]

    @tf.function(input_signature=signature, autograph=False)
    def encode(input_word_ids, input_mask, input_type_ids):
        return module.encode({"input_word_ids": input_word_ids, "input_mask": input_mask,
                              "input_type_ids": input_type_ids})

    model_proto = _convert(encode, signature)
    _check_converted(model_proto)
    with open(os.path.join(directory, MODEL_FILE), "wb") as f:
        f.write(model_proto.SerializeToString())
    write_common_files(source, directory, "onnx")
