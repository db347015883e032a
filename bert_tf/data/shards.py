"""Output shards that are complete or absent: the bookkeeping that makes a data job resumable.

A shard is written under `NAME.tmp`; when it is complete its counts go to
`DIR/.counts/NAME.json` and then the shard is renamed to NAME. A shard is done when both NAME
and its counts exist, so a job killed at any moment (even by SIGKILL) leaves only shards that are
done, and stray `*.tmp` files that the next run overwrites or removes. Each worker finishes its
own shards, so this needs no coordination between processes or MPI ranks.

A job's `manifest.json` records what its output depends on: the inputs by content (sha256, not
path and size), the settings and more; `claimed_output_dir` refuses a rerun with anything else
(mixing two datasets in one directory), holds the directory's lock, and turns a full disk into
a clear error that leaves no temporaries.
"""

import contextlib
import glob
import hashlib
import json
import os

import bert_tf
from bert_tf.data.files import OutputDirError
from bert_tf.data.output_dir import OutputDirLock, check_new_output_dir, is_out_of_space

MANIFEST = "manifest.json"


def write_json(path, payload):
    """Writes JSON atomically: a reader (or a rerun after a kill) never sees half a file."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
    os.replace(temporary, path)


def counts_path(path):
    return os.path.join(os.path.dirname(path), ".counts", os.path.basename(path) + ".json")


def temporary_path(path):
    return f"{path}.tmp"


def is_done(path):
    return os.path.exists(path) and os.path.exists(counts_path(path))


def read_counts(path):
    with open(counts_path(path), encoding="utf-8") as f:
        return json.load(f)


def finish(path, counts):
    """Records the counts of the complete `path.tmp`, then renames it to `path`."""
    os.makedirs(os.path.dirname(counts_path(path)), exist_ok=True)
    write_json(counts_path(path), counts)
    os.replace(temporary_path(path), path)


def remove_temporaries(directory):
    """Removes the `*.tmp` files a killed run left in `directory` (only our own naming)."""
    for path in glob.glob(os.path.join(glob.escape(directory), "*.tmp")) + glob.glob(
            os.path.join(glob.escape(directory), ".counts", "*.tmp")):
        os.remove(path)


def remove_all_temporaries(output_dir):
    """remove_temporaries in `output_dir` and every directory under it."""
    for directory, _, _ in os.walk(output_dir):
        remove_temporaries(directory)


def _finished_any(output_dir):
    return any(os.path.basename(d) == ".counts" and any(not n.endswith(".tmp") for n in names)
               for d, _, names in os.walk(output_dir))


# --------------------------------------------------------------------------- manifest


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def input_identities(paths):
    """The inputs as a job's output depends on them: their contents, in order (a moved or
    renamed file is the same input; a re-downloaded one with other bytes is not)."""
    return [file_sha256(p) for p in paths]


def check_manifest(output_dir, expected):
    """Refuses to add to an output directory made from other inputs or settings, or holding
    files but no manifest (another job's, or an older version's)."""
    path = os.path.join(output_dir, MANIFEST)
    if not os.path.exists(path):
        check_new_output_dir(output_dir, "output_dir", "this job's output")
        return
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError) as e:
        raise OutputDirError(f"{path} is unreadable ({e}); remove --output_dir={output_dir} "
                             "to start over") from e
    changed = [_describe_change(key, found.get(key), value) for key, value in expected.items()
               if found.get(key) != value]
    if changed:
        raise OutputDirError(
            f"--output_dir={output_dir} was made with other inputs or settings: "
            f"{'; '.join(changed)}. Rerun with the original flags, or choose a new --output_dir "
            "(mixing them would mix two datasets)")


def _describe_change(key, old, new):
    if key == "settings" and isinstance(old, dict):
        return ", ".join(f"--{k} was {old.get(k)!r}, now {new[k]!r}" for k in new
                         if old.get(k) != new[k])
    if key == "inputs" and isinstance(old, list):
        return (f"the inputs differ (were {len(old)} files, now {len(new)}, or their contents "
                "or order)")
    return f"{key} was {old!r}, now {new!r}"


def write_manifest(output_dir, expected, **extra):
    write_json(os.path.join(output_dir, MANIFEST),
               {**expected, **extra, "bert_tf_version": bert_tf.__version__})


@contextlib.contextmanager
def claimed_output_dir(output_dir, expected, enabled=True, **extra):
    """For the block: `output_dir` locked, checked against `expected` (check_manifest), its
    manifest written (with `extra`) and stale temporaries removed. If the block fails, the
    temporaries are removed; a full disk becomes an OutputDirError; and if no shard was
    finished, the manifest and the empty directories go too, so that a rerun with corrected
    inputs is not refused. Only one process of a job (`enabled`: MPI rank 0) claims the
    directory; the others do nothing here (they may call check_manifest before)."""
    if not enabled:
        yield
        return
    with OutputDirLock(output_dir):
        check_manifest(output_dir, expected)
        write_manifest(output_dir, expected, **extra)
        remove_all_temporaries(output_dir)
        try:
            yield
        except BaseException as e:
            _clean_up_after_failure(output_dir)
            if isinstance(e, Exception) and is_out_of_space(e):
                raise OutputDirError(
                    f"--output_dir={output_dir}: no room to write ({e}); finished shards are "
                    "kept: free some space and rerun the same command") from None
            raise


def _clean_up_after_failure(output_dir):
    remove_all_temporaries(output_dir)
    if _finished_any(output_dir):
        return
    os.remove(os.path.join(output_dir, MANIFEST))
    for directory, _, _ in sorted(os.walk(output_dir), reverse=True):
        if directory != output_dir:
            with contextlib.suppress(OSError):  # not empty: keep it
                os.rmdir(directory)
