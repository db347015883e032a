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


def describe(config) -> list[int]:
    """[--max_seq_length, training files, a 60-bit digest of their names and sizes (not paths:
    a moved copy is the same data)]; fine-tuning has no --input_files."""
    patterns = getattr(config, "input_files", "") if config.do_train else ""
    files = expand_patterns(patterns) if patterns else []
    listing = [[os.path.basename(f), tf.io.gfile.stat(f).length] for f in files]
    digest = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    return [config.max_seq_length, len(files), int(digest[:15], 16)]


def tensor(config) -> tf.Tensor:
    return tf.constant(describe(config), tf.int64)


def check(prefix: str, config) -> None:
    """Refuses to resume `prefix` with another --max_seq_length or other training files."""
    saved = checkpoints.checkpoint_tensor(prefix, RUN_DATA)
    if saved is None:  # written before this was saved
        return
    (was_length, was_files, was_digest), now = (int(v) for v in saved), describe(config)
    changed = []
    if was_length != now[0]:
        changed.append(f"--max_seq_length was {was_length}, now {now[0]}")
    if was_digest != now[2]:
        changed.append(f"the --input_files differ (were {was_files} files, now {now[1]}, or "
                       "their names or sizes)")
    if changed:
        raise checkpoints.CheckpointMismatchError(
            f"{prefix} was trained on other data: {'; '.join(changed)}. Its input position "
            "would skip into data it never saw: rerun with the original flags, or start the new "
            f"phase in a new --output_dir with --init_checkpoint={prefix}")
