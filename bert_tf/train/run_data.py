"""What a checkpoint's input position counts in: --max_seq_length and the training files.

Saved with every checkpoint of a run; a resume in the same --output_dir with another sequence
length or other files is refused, since the position would skip into data it never saw (the
usual case: phase 2 started in phase 1's directory instead of a new one with
--init_checkpoint)."""

import hashlib
import json
import os

import tensorflow as tf

from bert_tf.data.files import expand_patterns
from bert_tf.model import checkpoints

RUN_DATA = "run_data"


def describe(config) -> dict:
    """--max_seq_length and the training files (names and sizes, not paths: a moved copy is the
    same data); fine-tuning has no --input_files."""
    patterns = getattr(config, "input_files", "") if config.do_train else ""
    files = expand_patterns(patterns) if patterns else []
    listing = [[os.path.basename(f), tf.io.gfile.stat(f).length] for f in files]
    return {"max_seq_length": config.max_seq_length, "input_files": len(files),
            "inputs_sha256": hashlib.sha256(json.dumps(listing).encode()).hexdigest()}


def tensor(config) -> tf.Tensor:
    return tf.constant(json.dumps(describe(config), sort_keys=True))


def check(prefix: str, config) -> None:
    """Refuses to resume `prefix` with another --max_seq_length or other training files."""
    saved = checkpoints.checkpoint_tensor(prefix, RUN_DATA)
    if saved is None:  # written before this was saved
        return
    was, now = json.loads(saved.decode()), describe(config)
    changed = []
    if was["max_seq_length"] != now["max_seq_length"]:
        changed.append(f"--max_seq_length was {was['max_seq_length']}, now "
                       f"{now['max_seq_length']}")
    if was["inputs_sha256"] != now["inputs_sha256"]:
        changed.append(f"the --input_files differ (were {was['input_files']} files, now "
                       f"{now['input_files']}, or their names or sizes)")
    if changed:
        raise checkpoints.CheckpointMismatchError(
            f"{prefix} was trained on other data: {'; '.join(changed)}. Its input position "
            "would skip into data it never saw: rerun with the original flags, or start the new "
            f"phase in a new --output_dir with --init_checkpoint={prefix}")
