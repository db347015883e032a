"""BERT model configuration, read from and written to Google's bert_config.json."""

import dataclasses
import json
import os
import tempfile

ACTIVATIONS = ("gelu", "gelu_new", "relu", "tanh", "linear")
# Keys a bert_config.json must have: a default here would silently change the model's shape.
REQUIRED_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size")


# Bytes per element of the dtypes the model computes in.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def attention_probs_dtype(compute_dtype: str) -> str:
    """The dtype BertModel keeps attention probabilities in (the softmax's output, which its
    gradient reads) at a compute dtype. modeling.py casts the softmax to it, and the memory
    estimate (bert_tf/tools/model_size.py) counts it: one place for both.

    Args:
      compute_dtype: the model's compute dtype name ("float32", "float16", "bfloat16").

    Returns:
      The compute dtype's name: half-precision models keep 2-byte probabilities (the softmax
      sums in float32; modeling.attention_probabilities).
    """
    return compute_dtype


class BertConfigError(ValueError):
    """An invalid BERT configuration (the message names the file and field)."""


@dataclasses.dataclass
class BertConfig:
    """Google's BERT hyperparameters; defaults are BERT-base except vocab_size."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    def __post_init__(self):
        self.validate()

    def validate(self, source="BertConfig"):
        """Raises BertConfigError for the first invalid field, naming `source`."""

        def fail(field, problem):
            raise BertConfigError(f"{source}: field '{field}' {problem}")

        for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                fail(field, f"must be an integer, got {value!r}")
            if value <= 0:
                fail(field, f"must be positive, got {value}")
        if self.hidden_size % self.num_attention_heads:
            fail("hidden_size", f"({self.hidden_size}) must be divisible by num_attention_heads "
                 f"({self.num_attention_heads})")
        if self.hidden_act not in ACTIVATIONS:
            fail("hidden_act", f"is {self.hidden_act!r}; supported: {', '.join(ACTIVATIONS)}")
        for field in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                fail(field, f"must be a number in [0, 1), got {value!r}")
        value = self.initializer_range
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            fail("initializer_range", f"must be a positive number, got {value!r}")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d, source="config dict"):
        """Builds a config from a dict with Google's keys; unknown keys are errors."""
        if not isinstance(d, dict):
            raise BertConfigError(f"{source}: expected a JSON object, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise BertConfigError(
                f"{source}: unknown field(s) {', '.join(unknown)}; known fields: "
                f"{', '.join(sorted(known))}")
        missing = [name for name in REQUIRED_FIELDS if name not in d]
        if missing:
            raise BertConfigError(
                f"{source}: field(s) {', '.join(repr(m) for m in missing)} missing; they are "
                "required (the model's shape has no sensible default): add them")
        config = cls.__new__(cls)
        for f in dataclasses.fields(cls):
            value = d.get(f.name, f.default)
            setattr(config, f.name, value)
        config.validate(source)
        return config

    @classmethod
    def from_json_file(cls, path):
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except FileNotFoundError:
            raise BertConfigError(f"{path}: file not found; pass an existing bert_config.json"
                                  ) from None
        except IsADirectoryError:
            raise BertConfigError(f"{path}: a directory, not a file; pass the model's "
                                  "bert_config.json (e.g. {path}/bert_config.json)") from None
        except OSError as e:
            raise BertConfigError(f"{path}: cannot read it ({e.strerror})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BertConfigError(f"{path}: not valid JSON text ({e}); pass the model's "
                                  "bert_config.json") from None
        if not isinstance(d, dict):
            raise BertConfigError(f"{path}: holds a JSON {type(d).__name__}, not an object of "
                                  "BERT's fields; pass the model's bert_config.json")
        return cls.from_dict(d, source=path)

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json_string(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path):
        """Writes bert_config.json atomically (temporary file, then rename)."""
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".bert_config.", suffix=".tmp", dir=directory)
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a config is for sharing
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.to_json_string())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise


def _umask() -> int:
    """The process umask (reading it means setting it; set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
