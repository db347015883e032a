"""`export --format=savedmodel`: a TensorFlow SavedModel with TF Hub's BERT interface and a
`serving_default` signature that takes raw strings.

The interface follows TF Hub's BERT encoders (as Model Garden's official/nlp/tools/
export_tfhub_lib.py builds them): calling the object (what `hub.KerasLayer` does) takes a dict of
int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids` and returns
`pooled_output`, `sequence_output`, `encoder_outputs` (each layer's output) and `default`.
Where Model Garden ships the tokenizer as a second "preprocessing" SavedModel, this one holds
it: `serving_default` takes `text` (a [batch] string tensor) and tokenizes it in the graph with
graph_tokenization (FullTokenizer's ids), so TF Serving, or anything that loads a SavedModel,
needs no Python tokenizer. Signatures:

  serving_default  text -> encoder: pooled_output, sequence_output, input_mask
                           classifier: label, label_id, probabilities
                           tagger: words, tags, tag_ids, tag_probabilities (per word)
  encode           input_word_ids, input_mask, input_type_ids -> the same outputs per position
                   (encoder: pooled_output, sequence_output; task: logits, probabilities,
                   label_ids)
  tag_words        (tagger) words [batch, words], "" as padding -> tags per word, as
                   `finetune --do_predict` tags CoNLL-U words

A vocab whose words need a Python splitter (graph_tokenization.needs_python_word_splitter) gets
`encode` as its serving_default and no text signatures.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.data.graph_tokenization import GraphTokenizer
from bert_tf.tools.export_source import ExportSource, write_common_files

ID_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


def id_signature():
    """TF Hub's BERT inputs: int32 [batch, seq] tensors."""
    return {name: tf.TensorSpec([None, None], tf.int32, name) for name in ID_INPUTS}


class ServingModule(tf.Module):
    """The model, its tokenizer and labels, with the functions a SavedModel serves."""

    def __init__(self, source: ExportSource, model, jit_compile: bool = False):
        super().__init__()
        self.model = model
        self.kind = source.kind
        self.max_seq_length = source.max_seq_length
        self.label_names = tf.constant(source.labels or [""])
        vocab = source.vocab
        self.cls_id, self.sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
        self.tokenizer = GraphTokenizer(vocab, source.do_lower_case) if source.raw_text else None
        self.vocab_asset = tf.saved_model.Asset(source.vocab_file)
        self.forward = tf.function(self._forward, jit_compile=jit_compile, autograph=False)
        # Only the functions this kind of model has: saving traces every one it finds.
        if self.tokenizer is not None:
            self.serve_text = tf.function(
                self._serve_text, input_signature=[tf.TensorSpec([None], tf.string, "text")],
                autograph=False)
            if self.kind == "tagger":
                self.tag_words = tf.function(self._tag_words, input_signature=[
                    tf.TensorSpec([None, None], tf.string, "words")], autograph=False)

    def _forward(self, input_word_ids, input_mask, input_type_ids) -> dict:
        if self.kind == "encoder":
            outputs = self.model(input_word_ids, input_mask, input_type_ids)
            return {"pooled_output": outputs.pooled_output,
                    "sequence_output": outputs.sequence_output,
                    "encoder_outputs": list(outputs.hidden_states[1:])}
        logits = self.model({"input_ids": input_word_ids, "input_mask": input_mask,
                             "segment_ids": input_type_ids})
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}

    @tf.function(input_signature=[id_signature()], autograph=False)
    def __call__(self, inputs):
        """TF Hub's BERT call: the dict of ID_INPUTS -> the outputs (with `default`)."""
        outputs = self.forward(*(inputs[name] for name in ID_INPUTS))
        default = outputs.get("pooled_output", outputs.get("probabilities"))
        return {**outputs, "default": default}

    @tf.function(input_signature=[id_signature()], autograph=False)
    def encode(self, inputs):
        outputs = self.forward(*(inputs[name] for name in ID_INPUTS))
        outputs.pop("encoder_outputs", None)  # a list: signatures return flat dicts
        return outputs

    def _pack(self, pieces: tf.RaggedTensor) -> dict:
        """[B, (pieces)] ids -> [CLS] pieces [SEP], cut to max_seq_length, padded to the
        batch's longest."""
        pieces = pieces[:, :self.max_seq_length - 2]
        ids, types = tf_text.combine_segments([pieces], self.cls_id, self.sep_id)
        return {"input_word_ids": ids.to_tensor(0),
                "input_mask": tf.ones_like(ids).to_tensor(0),
                "input_type_ids": tf.cast(types, tf.int32).to_tensor(0)}

    def _serve_text(self, text):
        if self.kind == "tagger":
            return self._tag(self.tokenizer.split_words(text))
        inputs = self._pack(self.tokenizer.tokenize(text))
        outputs = self.forward(*(inputs[name] for name in ID_INPUTS))
        if self.kind == "encoder":
            return {"pooled_output": outputs["pooled_output"],
                    "sequence_output": outputs["sequence_output"],
                    "input_mask": inputs["input_mask"]}
        return {"label": tf.gather(self.label_names, outputs["label_ids"]),
                "label_id": outputs["label_ids"], "probabilities": outputs["probabilities"]}

    def _tag_words(self, words):
        return self._tag(tf.RaggedTensor.from_tensor(words, padding=""))

    def _tag(self, words: tf.RaggedTensor) -> dict:
        """Tags of [B, (words)]: the first word piece of each word carries its tag (as
        fine-tuning labels it); words past max_seq_length get tag "" and id -1."""
        pieces = self.tokenizer.tokenize_words(words)  # [B, (words), (pieces)]
        inputs = self._pack(pieces.merge_dims(1, 2))
        probabilities = self.forward(*(inputs[name] for name in ID_INPUTS))["probabilities"]
        # Where each word's first piece lands: after [CLS] and the pieces of the words before.
        starts = 1 + tf.cumsum(pieces.row_lengths(axis=2), axis=1, exclusive=True)
        flat_starts = tf.cast(starts.flat_values, tf.int32)
        fits = flat_starts < self.max_seq_length - 1
        at = tf.stack([tf.cast(starts.value_rowids(), tf.int32),
                       tf.minimum(flat_starts, tf.shape(probabilities)[1] - 1)], axis=1)
        word_probabilities = tf.gather_nd(probabilities, at)  # [words in the batch, labels]
        tag_ids = tf.where(fits, tf.argmax(word_probabilities, -1, output_type=tf.int32), -1)
        per_word = {"tags": (tf.where(fits, tf.gather(self.label_names, tf.maximum(tag_ids, 0)),
                                      ""), ""),
                    "tag_ids": (tag_ids, -1),
                    "tag_probabilities": (tf.reduce_max(word_probabilities, -1), 0.0)}
        outputs = {name: words.with_flat_values(values).to_tensor(padding)
                   for name, (values, padding) in per_word.items()}
        return {"words": words.to_tensor(""), **outputs}

    def signatures(self) -> dict:
        encode = self.encode.get_concrete_function()
        if self.tokenizer is None:
            return {"serving_default": encode, "encode": encode}
        signatures = {"serving_default": self.serve_text.get_concrete_function(),
                      "encode": encode}
        if self.kind == "tagger":
            signatures["tag_words"] = self.tag_words.get_concrete_function()
        return signatures


def export(source: ExportSource, directory: str, jit_compile: bool = False) -> None:
    """Writes the SavedModel (and export.json, bert_config.json, vocab.txt) into `directory`."""
    module = ServingModule(source, source.build_model(), jit_compile)
    tf.saved_model.save(module, directory, signatures=module.signatures())
    write_common_files(source, directory, "savedmodel")
