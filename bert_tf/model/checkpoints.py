"""Name-based checkpoints in TensorFlow's V2 bundle format (what TF1 Savers write).

Files are `model.ckpt-STEP.index` / `.data-00000-of-00001` plus the `checkpoint`
state file, so tf.train.load_checkpoint, tf.train.latest_checkpoint and Google's
or NVIDIA's BERT code read them, and Google's released `bert_model.ckpt` loads
here by name. Saving is atomic: tensors go to a temporary prefix that is renamed
into place (index last), then the state file is replaced.
"""

import logging
import os
import uuid
from typing import NamedTuple

import tensorflow as tf

log = logging.getLogger(__name__)

STATE_FILE = "checkpoint"
PREFIX_BASENAME = "model.ckpt"


class CheckpointError(Exception):
    """A checkpoint that cannot be found, read or used."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint whose variables don't fit the model (shape, dtype or missing)."""


class RestoreReport(NamedTuple):
    loaded: list  # names restored from the checkpoint
    missing: list  # model names absent from the checkpoint (left as they were)
    unused: list  # checkpoint names the model doesn't have


def latest_checkpoint(directory):
    """Prefix of the newest checkpoint listed in `directory/checkpoint`, or None."""
    return tf.train.latest_checkpoint(os.fspath(directory))


def _checkpoint_files(prefix):
    return tf.io.gfile.glob(f"{prefix}.index") + tf.io.gfile.glob(f"{prefix}.data-*")


def _remove_files(paths):
    for path in paths:
        try:
            tf.io.gfile.remove(path)
        except tf.errors.NotFoundError:
            pass


def _write_state_file(directory, prefixes):
    """Atomically replaces directory/checkpoint listing `prefixes` (newest last)."""
    names = [os.path.basename(p) for p in prefixes]
    lines = [f'model_checkpoint_path: "{names[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{name}"' for name in names]
    path = os.path.join(directory, STATE_FILE)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        tf.io.gfile.rename(tmp, path, overwrite=True)
    finally:
        _remove_files(tf.io.gfile.glob(tmp))


def _listed_checkpoints(directory):
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return []
    return [p if os.path.isabs(p) else os.path.join(directory, p)
            for p in state.all_model_checkpoint_paths]


def save_checkpoint(tensors_by_name, directory, step, keep_max=None):
    """Writes `directory/model.ckpt-STEP` holding every (name, tensor/variable).

    Keeps the newest `keep_max` checkpoints listed in the state file (all if None).
    If anything fails, earlier checkpoints and the state file are untouched.
    Returns the new prefix.
    """
    directory = os.fspath(directory)
    if not tensors_by_name:
        raise CheckpointError("save_checkpoint: nothing to save (empty tensors_by_name)")
    if keep_max is not None and keep_max < 1:
        raise CheckpointError(f"save_checkpoint: keep_max must be >= 1 or None, got {keep_max}")
    try:
        tf.io.gfile.makedirs(directory)
    except tf.errors.OpError as e:
        raise CheckpointError(f"cannot create checkpoint directory {directory}: {e.message}"
                              ) from None
    prefix = os.path.join(directory, f"{PREFIX_BASENAME}-{int(step)}")
    tmp_prefix = os.path.join(directory, f".tmp-{uuid.uuid4().hex}-{PREFIX_BASENAME}-{int(step)}")
    names = list(tensors_by_name)
    moved = []  # files already renamed to the final prefix, removed again on failure
    try:
        tf.raw_ops.SaveV2(
            prefix=tmp_prefix, tensor_names=names, shape_and_slices=[""] * len(names),
            tensors=[tf.convert_to_tensor(tensors_by_name[n]) for n in names])
        # Data first, index last: the index is what marks a checkpoint as present.
        renames = [(f, prefix + f[len(tmp_prefix):])
                   for f in tf.io.gfile.glob(f"{tmp_prefix}.data-*")]
        renames.append((f"{tmp_prefix}.index", f"{prefix}.index"))
        for src, dst in renames:
            tf.io.gfile.rename(src, dst, overwrite=True)
            moved.append(dst)
        listed = [p for p in _listed_checkpoints(directory) if p != prefix] + [prefix]
        kept = listed[-keep_max:] if keep_max else listed
        _write_state_file(directory, kept)
    except BaseException as e:
        _remove_files(moved)
        if isinstance(e, tf.errors.OpError):
            raise CheckpointError(f"writing checkpoint {prefix} failed: {e.message}; "
                                  "earlier checkpoints are unchanged") from None
        raise
    finally:
        _remove_files(_checkpoint_files(tmp_prefix))
    for old in listed[: len(listed) - len(kept)]:
        _remove_files(_checkpoint_files(old))
    return prefix


def resolve_checkpoint(path):
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        prefix = latest_checkpoint(path)
        if prefix is None:
            raise CheckpointError(
                f"no checkpoint in directory {path} (no '{STATE_FILE}' file naming one); "
                "pass a checkpoint prefix such as DIR/model.ckpt-1000 or DIR/bert_model.ckpt")
        return prefix
    if not tf.io.gfile.exists(f"{path}.index"):
        raise CheckpointError(
            f"checkpoint {path} not found (no {path}.index); pass a checkpoint prefix "
            "(the path without .index/.data-*) or a directory holding a 'checkpoint' file")
    return path


def restore(ckpt, variables_by_name, require_all=False) -> RestoreReport:
    """Assigns checkpoint tensors to the variables with the same names.

    `ckpt` is a prefix or a directory. Every shape is checked before anything is
    assigned, so a mismatch raises CheckpointMismatchError and changes nothing.
    With require_all, a variable missing from the checkpoint is also an error.
    """
    prefix = resolve_checkpoint(ckpt)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"cannot read checkpoint {prefix}: {e}") from None
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()

    loaded, missing = [], []
    for name, variable in variables_by_name.items():
        if name not in shapes:
            missing.append(name)
            continue
        if list(shapes[name]) != variable.shape.as_list():
            raise CheckpointMismatchError(
                f"checkpoint {prefix}: variable {name} has shape {list(shapes[name])} there "
                f"but {variable.shape.as_list()} in the model; check that bert_config.json "
                "(e.g. vocab_size, hidden_size) matches the checkpoint")
        if dtypes[name] != variable.dtype and not (dtypes[name].is_floating
                                                   and variable.dtype.is_floating):
            raise CheckpointMismatchError(
                f"checkpoint {prefix}: variable {name} is {dtypes[name].name} there "
                f"but {variable.dtype.name} in the model")
        loaded.append(name)
    if require_all and missing:
        raise CheckpointMismatchError(
            f"checkpoint {prefix} lacks {len(missing)} variable(s) needed to resume exactly: "
            f"{', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}")
    if loaded:
        values = tf.raw_ops.RestoreV2(
            prefix=prefix, tensor_names=loaded, shape_and_slices=[""] * len(loaded),
            dtypes=[dtypes[n] for n in loaded])
        for name, value in zip(loaded, values, strict=True):
            variable = variables_by_name[name]
            variable.assign(tf.cast(value, variable.dtype))
    unused = sorted(set(shapes) - set(variables_by_name))
    return RestoreReport(loaded=loaded, missing=missing, unused=unused)


def init_from_checkpoint(init_checkpoint, variables_by_name) -> RestoreReport:
    """Initialises a model from e.g. Google's bert_model.ckpt (`--init_checkpoint`).

    Logs which variables were loaded and which stay freshly initialised.
    """
    report = restore(init_checkpoint, variables_by_name)
    log.info("init_checkpoint %s: loaded %d variables, %d new (freshly initialised), "
             "%d in the checkpoint unused", init_checkpoint, len(report.loaded),
             len(report.missing), len(report.unused))
    for name in report.loaded:
        log.info("  loaded %s", name)
    for name in report.missing:
        log.info("  new    %s", name)
    if not report.loaded:
        raise CheckpointMismatchError(
            f"init_checkpoint {init_checkpoint}: no variable name matches the model "
            f"(checkpoint has e.g. {', '.join(report.unused[:3])}); is it a BERT checkpoint "
            "with Google's variable names?")
    return report
