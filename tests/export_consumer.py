"""Loads exports with their real consumers, in a fresh process, for tests/test_export.py:

    python tests/export_consumer.py FORMAT INPUTS.json OUTPUTS.npz KIND=DIR [KIND=DIR ...]

FORMAT: savedmodel (tf.saved_model.load, and tensorflow_hub.KerasLayer for the encoder),
keras_hub (from_preset, after importing the preset's bert_tf_keras_hub.py if it has one, as
docs/export.md says; one fit step of the classifier) or onnx (onnxruntime). INPUTS.json
holds `texts`, `words` ([sentences][words], "" padded) and the id inputs; every output is saved
as KIND/NAME in OUTPUTS.npz. A keras_hub KIND starting with "encoder" is a backbone. Nothing of bert_tf is imported: a user's process would not have it.
"""

import json
import sys

import numpy as np

ID_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


def savedmodel(kind, path, inputs):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops before loading)

    model = tf.saved_model.load(path)
    ids = {name: tf.constant(inputs[name], tf.int32) for name in ID_INPUTS}
    outputs = {f"encode/{k}": v for k, v in model.signatures["encode"](**ids).items()}
    if kind == "tagger":
        outputs.update({f"tag_words/{k}": v for k, v in model.signatures["tag_words"](
            words=tf.constant(inputs["words"])).items()})
    outputs.update({f"text/{k}": v for k, v in model.signatures["serving_default"](
        text=tf.constant(inputs["texts"])).items()})
    if kind == "encoder":
        import tensorflow_hub as hub  # needs setuptools<82 (install/requirements.txt)

        hub_outputs = hub.KerasLayer(path)(ids)
        outputs["hub/pooled_output"] = hub_outputs["pooled_output"]
        outputs["hub/sequence_output"] = hub_outputs["sequence_output"]
        outputs["hub/num_encoder_outputs"] = len(hub_outputs["encoder_outputs"])
    return outputs


def keras_hub(kind, path, inputs):
    import importlib
    import os

    import keras
    import keras_hub

    if os.path.exists(os.path.join(path, "bert_tf_keras_hub.py")):
        # Registers the preset's classes with Keras, which from_preset then finds.
        sys.path.insert(0, path)
        importlib.import_module("bert_tf_keras_hub")
        sys.path.remove(path)
    if kind.startswith("encoder"):
        backbone = keras_hub.models.BertBackbone.from_preset(path)
        tokenizer = keras_hub.models.BertTokenizer.from_preset(path)
        outputs = backbone.predict({"token_ids": np.array(inputs["input_word_ids"]),
                                    "padding_mask": np.array(inputs["input_mask"]),
                                    "segment_ids": np.array(inputs["input_type_ids"])},
                                   verbose=0)
        token_ids = [np.asarray(ids).tolist() for ids in tokenizer(inputs["texts"])]
        width = max(map(len, token_ids))
        return {"pooled_output": outputs["pooled_output"],
                "sequence_output": outputs["sequence_output"],
                "token_ids": np.array([ids + [-1] * (width - len(ids)) for ids in token_ids])}
    classifier = keras_hub.models.BertTextClassifier.from_preset(path)
    logits = classifier.predict(inputs["texts"], verbose=0)
    classifier.compile(optimizer=keras.optimizers.Adam(1e-4),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = classifier.fit(x=inputs["texts"][:4], y=np.array([0, 1, 0, 1]), batch_size=4,
                             epochs=1, verbose=0)
    return {"logits": logits, "fit_loss": np.array(history.history["loss"])}


def onnx(kind, path, inputs):
    import onnxruntime

    session = onnxruntime.InferenceSession(f"{path}/model.onnx",
                                           providers=["CPUExecutionProvider"])
    feed = {name: np.array(inputs[name], np.int32) for name in ID_INPUTS}
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


def main(argv):
    export_format, inputs_path, outputs_path, *models = argv[1:]
    with open(inputs_path, encoding="utf-8") as f:
        inputs = json.load(f)
    consume = {"savedmodel": savedmodel, "keras_hub": keras_hub, "onnx": onnx}[export_format]
    saved = {}
    for model in models:
        kind, path = model.split("=", 1)
        for name, value in consume(kind, path, inputs).items():
            value = np.asarray(value)
            # Strings as bytes ("S"), which np.load reads without pickle.
            saved[f"{kind}/{name}"] = value.astype("S") if value.dtype == object else value
    np.savez(outputs_path, **saved)


if __name__ == "__main__":
    main(sys.argv)
