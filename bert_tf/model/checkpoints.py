"""Name-based checkpoints in TensorFlow's V2 bundle format (what TF1 Savers write).

Files are `model.ckpt-STEP.index` / `.data-00000-of-00001` plus the `checkpoint`
state file, so tf.train.load_checkpoint, tf.train.latest_checkpoint and Google's
or NVIDIA's BERT code read them, and Google's released `bert_model.ckpt` loads
here by name. Saving is atomic: tensors go to a temporary prefix (`.tmp-HEX-model.ckpt-STEP`),
are read back (TensorFlow checks each tensor's CRC32C), then renamed into place (index last);
then the state file is replaced. A checkpoint that fails to read on restore raises
CheckpointCorruptError; `set_aside` renames it to `*.corrupt` so the next-newest is used.
"""

import glob
import logging
import os
import re
import uuid
from typing import NamedTuple

import tensorflow as tf

log = logging.getLogger(__name__)

STATE_FILE = "checkpoint"
PREFIX_BASENAME = "model.ckpt"
CORRUPT_SUFFIX = ".corrupt"
# What save_checkpoint and _write_state_file leave behind when killed mid-write.
_TEMPORARY = re.compile(rf"^(\.tmp-[0-9a-f]{{32}}-{re.escape(PREFIX_BASENAME)}-\d+\..*"
                        rf"|{STATE_FILE}\.tmp-[0-9a-f]{{32}})$")


class CheckpointError(Exception):
    """A checkpoint that cannot be found, read or used."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint whose files are unreadable (truncated, bad checksum)."""

    def __init__(self, prefix, detail):
        super().__init__(f"checkpoint {prefix} is corrupt ({detail.strip()}): its files "
                         f"{prefix}.index / {prefix}.data-* cannot be read back")
        self.prefix = prefix


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
    """Prefixes named in directory/checkpoint, oldest first, as os.path.join(directory, name).

    tf.train.get_checkpoint_state already joins a relative entry onto `directory`; joining it
    again broke a relative --output_dir (nothing found, so a rerun restarted at step 0)."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return []
    return [os.path.join(directory, os.path.basename(p))
            for p in state.all_model_checkpoint_paths]


def listed_checkpoints(directory):
    """Prefixes listed in directory/checkpoint whose index exists, newest first."""
    return [p for p in reversed(_listed_checkpoints(os.fspath(directory)))
            if tf.io.gfile.exists(f"{p}.index")]


def set_aside(prefix):
    """Renames a corrupt checkpoint's files to `*.corrupt` and drops it from the state file,
    so it is never picked again; returns the new names."""
    directory = os.path.dirname(prefix)
    renamed = []
    for path in _checkpoint_files(prefix):
        tf.io.gfile.rename(path, path + CORRUPT_SUFFIX, overwrite=True)
        renamed.append(path + CORRUPT_SUFFIX)
    kept = [p for p in _listed_checkpoints(directory) if p != prefix]
    if kept:
        _write_state_file(directory, kept)
    else:
        _remove_files([os.path.join(directory, STATE_FILE)])
    return renamed


def remove_stale_temporaries(directory):
    """Removes the partial files a save killed mid-write left in `directory` (only names of
    our own temporaries); returns their paths. Call only while no other save can run there."""
    stale = [path for path in glob.glob(os.path.join(glob.escape(os.fspath(directory)), ".*"))
             + glob.glob(os.path.join(glob.escape(os.fspath(directory)), f"{STATE_FILE}.tmp-*"))
             if _TEMPORARY.match(os.path.basename(path))]
    _remove_files(stale)
    return sorted(stale)


def checkpoint_tensor(prefix, name):
    """The value of tensor `name` in checkpoint `prefix`, or None if it has none."""
    reader = tf.train.load_checkpoint(prefix)
    return reader.get_tensor(name) if reader.has_tensor(name) else None


def _verify(prefix):
    """Reads back every tensor, one at a time (each read checks its stored CRC32C)."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointCorruptError(prefix, str(e)) from None


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
        _verify(tmp_prefix)
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
        if isinstance(e, CheckpointCorruptError):
            raise CheckpointError(f"writing checkpoint {prefix} failed: what was written does "
                                  f"not read back ({e}); earlier checkpoints are unchanged"
                                  ) from None
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
        raise CheckpointCorruptError(prefix, str(e)) from None
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
            f"{', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}; "
            f"{_why_missing(missing, sorted(set(shapes) - set(variables_by_name)))}")
    if loaded:
        try:  # reads everything before assigning anything
            values = tf.raw_ops.RestoreV2(
                prefix=prefix, tensor_names=loaded, shape_and_slices=[""] * len(loaded),
                dtypes=[dtypes[n] for n in loaded])
        except tf.errors.OpError as e:
            raise CheckpointCorruptError(prefix, e.message) from None
        for name, value in zip(loaded, values, strict=True):
            variable = variables_by_name[name]
            variable.assign(tf.cast(value, variable.dtype))
    unused = sorted(set(shapes) - set(variables_by_name))
    return RestoreReport(loaded=loaded, missing=missing, unused=unused)


def _why_missing(missing, unused) -> str:
    """What a checkpoint lacking the model's `missing` variables was most likely written for."""
    heads = {"pretraining (masked-LM and next-sentence heads)": "cls/",
             "fine-tuning (a task head)": "output_"}
    has = [kind for kind, start in heads.items() if any(n.startswith(start) for n in unused)]
    if has and any(n.startswith(tuple(heads.values())) for n in missing):
        return f"it holds a model for {has[0]}, not this one"
    if any(n.startswith("bert/") for n in missing):
        return ("it was written with another bert_config.json (e.g. more num_hidden_layers "
                "there); pass the bert_config.json saved with it")
    return "it was written by another kind of run or an older bert_tf"


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
