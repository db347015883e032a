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
from bert_tf.tools.export_source import ExportSource, write_common_files

MODEL_FILE = "model.onnx"
# ONNX opset 17 has LayerNormalization and runs on every onnxruntime since 1.14.
OPSET = 17


def export(source: ExportSource, directory: str) -> None:
    """Writes model.onnx (and export.json, bert_config.json, vocab.txt) into `directory`."""
    import tf2onnx  # imported here: it takes seconds, and only this format needs it

    module = ServingModule(source, source.build_model())
    signature = [tf.TensorSpec(spec.shape, spec.dtype, name)
                 for name, spec in id_signature().items()]

    @tf.function(input_signature=signature)
    def encode(input_word_ids, input_mask, input_type_ids):
        return module.encode({"input_word_ids": input_word_ids, "input_mask": input_mask,
                              "input_type_ids": input_type_ids})

    tf2onnx.convert.from_function(encode, input_signature=signature, opset=OPSET,
                                  output_path=os.path.join(directory, MODEL_FILE))
    write_common_files(source, directory, "onnx")
