"""KerasHub classes for a BERT whose feed-forward activation is not KerasHub's tanh GELU.

KerasHub's BertBackbone always builds its transformer layers with the tanh approximation of
GELU (keras_hub/src/models/bert/bert_backbone.py), which is right for hidden_act "gelu_new"
only; bert_tf's default "gelu" is the exact erf form, and on all-MiniLM-L6-v2 the difference
reaches 7.3e-3 in the sequence output. `ActivationBertBackbone` is that backbone with the
activation of the model's bert_config.json (`activation` in the preset's config.json).

`export --format=keras_hub` copies this file into the preset as `bert_tf_keras_hub.py` and names
these classes in its config.json, task.json, preprocessor.json and tokenizer.json. KerasHub's
`from_preset` finds a class only among those registered with Keras
(keras_hub/src/utils/preset_utils.py `check_config_class`), so a process imports this file once
before loading such a preset:

    import sys; sys.path.insert(0, "export/minilm_kh")
    import bert_tf_keras_hub  # registers bert_tf>ActivationBertBackbone and the others
    backbone = keras_hub.models.BertBackbone.from_preset("export/minilm_kh")

It needs keras and keras_hub only (not bert_tf). The task, preprocessor and tokenizer
subclasses change nothing but `backbone_cls`: KerasHub's `from_preset` on BertTextClassifier,
BertTextClassifierPreprocessor or BertTokenizer looks for a registered subclass whose
backbone_cls is the preset's backbone class (preset_utils.find_subclass).
"""

import keras
import keras_hub

PACKAGE = "bert_tf"  # the registered names are bert_tf>CLASS
# bert_config.json hidden_act -> the Keras activation (gelu_new is the stock backbone's).
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "linear": "linear"}


def _exact_gelu(x):
    return keras.activations.gelu(x, approximate=False)


def _activation(name):
    if name not in ACTIVATIONS:
        raise ValueError(f"activation={name!r}: one of {', '.join(ACTIVATIONS)} (bert_config.json "
                         "hidden_act; gelu_new is keras_hub.models.BertBackbone itself)")
    return _exact_gelu if name == "gelu" else keras.activations.get(name)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ActivationBertBackbone(keras_hub.models.BertBackbone):
    """keras_hub.models.BertBackbone with `activation` in its feed-forward layers.

    Args:
      activation: bert_config.json's hidden_act: "gelu" (exact, erf), "relu", "tanh" or
        "linear".
      **kwargs: BertBackbone's arguments.
    """

    def __init__(self, *args, activation="gelu", **kwargs):
        function = _activation(activation)
        super().__init__(*args, **kwargs)
        # The functional graph calls each layer again on every call, and a Dense layer
        # applies whatever `activation` holds then: setting it here changes every call.
        for layer in self.transformer_layers:
            layer.activation = function
            layer._feedforward_intermediate_dense.activation = function
        self.feedforward_activation = activation

    def get_config(self):
        return {**super().get_config(), "activation": self.feedforward_activation}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ActivationBertTokenizer(keras_hub.models.BertTokenizer):
    """KerasHub's BertTokenizer, for presets of ActivationBertBackbone."""

    backbone_cls = ActivationBertBackbone


@keras.saving.register_keras_serializable(package=PACKAGE)
class ActivationBertTextClassifierPreprocessor(
        keras_hub.models.BertTextClassifierPreprocessor):
    """KerasHub's BertTextClassifierPreprocessor, for presets of ActivationBertBackbone."""

    backbone_cls = ActivationBertBackbone
    tokenizer_cls = ActivationBertTokenizer


@keras.saving.register_keras_serializable(package=PACKAGE)
class ActivationBertTextClassifier(keras_hub.models.BertTextClassifier):
    """KerasHub's BertTextClassifier, for presets of ActivationBertBackbone."""

    backbone_cls = ActivationBertBackbone
    preprocessor_cls = ActivationBertTextClassifierPreprocessor
