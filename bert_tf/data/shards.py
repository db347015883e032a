"""Output shards that are complete or absent: the bookkeeping that makes a data job resumable.

A shard is written under `NAME.tmp`; when it is complete its counts go to
`DIR/.counts/NAME.json` and then the shard is renamed to NAME. A shard is done when both NAME
and its counts exist, so a job killed at any moment (even by SIGKILL) leaves only shards that are
done, and stray `*.tmp` files that the next run overwrites or removes. Each worker finishes its
own shards, so this needs no coordination between processes or MPI ranks.
"""

import glob
import json
import os


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
