"""A run_pretraining flagfile (launch/recipes/*.flags) as the estimate's defaults."""

import dataclasses
import re
from pathlib import Path

import bert_tf
from bert_tf.train.config import PRECISIONS, PretrainingConfig


class RecipeError(ValueError):
    """An unreadable recipe or a bad value in it; the message names the file and flag."""


def _bool(text):
    if text.lower() in ("true", "1", ""):
        return True
    if text.lower() in ("false", "0"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _precision(text):
    if text not in PRECISIONS:
        raise ValueError(f"{text!r} is not one of {', '.join(PRECISIONS)}")
    return text


# run_pretraining.py flags an estimate takes from a recipe, with their parsers (the estimate
# checks the numbers' ranges, naming the recipe: estimate.checked_config).
RECIPE_FLAGS = {"bert_config_file": str, "max_seq_length": int, "max_predictions_per_seq": int,
                "train_batch_size": int, "num_accumulation_steps": int, "num_train_steps": int,
                "global_batch_size": int, "precision": _precision, "use_xla": _bool,
                "fp16_allreduce": _bool}
_RUN_DEFAULTS = bert_tf.flag_defaults(PretrainingConfig)


def read_recipe(path) -> dict:
    """{flag: text} of a flagfile's `--name=value` lines; its `# global_batch_size: N`
    comment (launch/launch.py's convention) gives global_batch_size."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise RecipeError(f"--recipe={path}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError:
        raise RecipeError(f"--recipe={path}: not a text flagfile (not UTF-8); pass a "
                          "run_pretraining flagfile such as launch/recipes/*.flags") from None
    values = dict(re.findall(r"^--(\w+)=(.*?)\s*$", text, re.MULTILINE))
    comment = re.search(r"^#\s*global_batch_size:\s*(\d+)", text, re.MULTILINE)
    if comment:
        values.setdefault("global_batch_size", comment.group(1))
    return values


def _recipe_path(recipe, relative):
    """A path the recipe names, as given or relative to the repository holding the recipe
    (launch/recipes/x.flags names launch/configs/y.json)."""
    if Path(relative).exists():
        return relative
    in_repo = Path(recipe).resolve().parents[2] / relative
    return str(in_repo) if in_repo.exists() else relative


def with_recipe(config):
    """The config (a dataclass with the estimate's fields: recipe, num_sequences, ...) with
    fields left None taken from its --recipe, then from run_pretraining.py's defaults."""
    values = read_recipe(config.recipe) if config.recipe else {}
    if config.num_sequences is not None or config.corpus_tokens is not None:
        values.pop("num_train_steps", None)  # the training amount was given another way
    if config.model:
        values.pop("bert_config_file", None)
    updates = {}
    for name, parse in RECIPE_FLAGS.items():
        if getattr(config, name) is None and name in values:
            try:
                updates[name] = parse(values[name])
            except ValueError as e:
                raise RecipeError(f"--recipe={config.recipe}: --{name}: {e}") from None
    if "bert_config_file" in updates:
        updates["bert_config_file"] = _recipe_path(config.recipe, updates["bert_config_file"])
    for name in ("max_seq_length", "max_predictions_per_seq", "num_accumulation_steps",
                 "precision", "use_xla", "fp16_allreduce"):
        if getattr(config, name) is None and name not in updates:
            updates[name] = _RUN_DEFAULTS[name]
    return dataclasses.replace(config, **updates)
