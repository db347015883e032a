"""Finding input files: comma-separated globs, local or on TensorFlow's file systems."""

import glob
import os


class InputDataError(ValueError):
    """Input files are missing or hold records that disagree with the flags."""


def expand_patterns(input_patterns):
    """Comma-separated string or list of globs -> sorted, de-duplicated file list."""
    if isinstance(input_patterns, str | os.PathLike):
        input_patterns = str(input_patterns).split(",")
    files, empty = [], []
    for pattern in input_patterns:
        pattern = str(pattern).strip()
        if not pattern:
            continue
        if "://" in pattern:  # gs://, hdfs://, ...: only TensorFlow's file system knows them
            import tensorflow as tf

            matches = sorted(tf.io.gfile.glob(pattern))
        else:
            matches = sorted(glob.glob(pattern))
        if not matches:
            empty.append(pattern)
        files.extend(matches)
    if empty or not files:
        raise InputDataError(f"no input files match {', '.join(empty) or input_patterns!r}; "
                             "check the input file pattern(s) (comma-separated globs)")
    return sorted(set(files))
