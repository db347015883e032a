"""prepare_dataset: dump -> documents -> phase-1/phase-2 TFRecords, resumable and refused when
the flags change; the same bytes for 1 or 2 workers, mpirun -np 2, and a killed-and-rerun run."""

import bz2
import hashlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time

import psutil
import pytest
from conftest import PYTHON, REPO, run_command
from test_data_faults import assert_gone
from test_wikipedia import ENGLISH

FLAGS = ["--shard_mb=0.04", "--dupe_factor=1", "--phases=128:20,256:40", "--noprogress"]


@pytest.fixture(scope="module")
def small_dump(shared_data, tmp_path_factory):
    """The first 45 pages of the English slice, as a .xml.bz2 dump (a few seconds of work)."""
    raw = bz2.open(shared_data / ENGLISH).read()
    end = raw.index(b"<page>")
    for _ in range(45):
        end = raw.index(b"</page>", end) + len(b"</page>")
    path = tmp_path_factory.mktemp("dump") / "enwiki-small-pages-articles.xml.bz2"
    path.write_bytes(bz2.compress(raw[:end] + b"\n</mediawiki>\n"))
    return path


def command(dump, vocab, out, *extra):
    return [PYTHON, "-m", "bert_tf", "prepare_dataset", f"--input_files={dump}",
            f"--output_dir={out}", f"--vocab_file={vocab}", *FLAGS, *extra]


def outputs(out):
    """Every output file's bytes (documents, TFRecords, their counts), not the manifest."""
    files = {}
    for root, _, names in os.walk(out):
        for name in names:
            path = os.path.join(root, name)
            if name != "manifest.json":
                with open(path, "rb") as f:
                    files[os.path.relpath(path, out)] = f.read()
    return files


@pytest.fixture(scope="module")
def vocab(shared_data):
    return shared_data / "vocab/bert-base-uncased.txt"


@pytest.fixture(scope="module")
def reference(small_dump, vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    result = run_command(command(small_dump, vocab, out))
    return out, result


def test_build_and_manifest(reference, small_dump, vocab):
    out, result = reference
    files = outputs(out)
    records = sorted(f for f in files if f.endswith(".tfrecord"))
    documents = sorted(f for f in files if f.endswith(".txt"))
    assert len(documents) >= 3
    assert records == [f"phase{p}_seq{s}/part-{i:05d}.tfrecord" for p, s in ((1, 128), (2, 256))
                       for i in range(len(documents))]
    assert not [f for f in files if f.endswith(".tmp")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == [hashlib.sha256(small_dump.read_bytes()).hexdigest()]
    assert manifest["input_paths"] == [str(small_dump)]
    assert manifest["settings"]["dupe_factor"] == 1
    assert manifest["settings"]["phases"] == [[128, 20], [256, 40]]
    assert len(manifest["vocab_sha256"]) == 64 and manifest["bert_tf_version"]
    phase1 = manifest["stages"]["phase1_seq128"]
    assert set(phase1["shards"]) == {f"part-{i:05d}.tfrecord" for i in range(len(documents))}
    assert all(c["instances"] > 0 for c in phase1["shards"].values())
    assert phase1["total"]["documents"] == manifest["stages"]["documents"]["total"]["documents"]
    assert "phase2_seq256: " in result.stdout


def test_rerun_with_changed_flags_is_refused(reference, small_dump, vocab):
    out, _ = reference
    before = outputs(out)
    result = run_command(command(small_dump, vocab, out, "--dupe_factor=2"), check=False)
    assert result.returncode == 2
    assert "--dupe_factor was 1, now 2" in result.stderr
    assert f"--output_dir={out} was made with other inputs or settings" in result.stderr
    assert outputs(out) == before


def test_two_workers_and_mpirun_give_the_same_bytes(reference, small_dump, vocab, tmp_path):
    expected = outputs(reference[0])
    run_command(command(small_dump, vocab, tmp_path / "w2", "--num_workers=2"))
    assert outputs(tmp_path / "w2") == expected
    run_command(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                 *command(small_dump, vocab, tmp_path / "mpi")])
    assert outputs(tmp_path / "mpi") == expected


def test_killed_and_rerun_gives_identical_records(reference, small_dump, vocab, tmp_path):
    """SIGKILL the parent (2 workers) once phase 1 has finished shards; the workers die with
    it; the rerun finishes and the bytes equal the uninterrupted run's."""
    expected = outputs(reference[0])
    out = tmp_path / "killed"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(command(small_dump, vocab, out, "--num_workers=2"), cwd=REPO,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / "phase1_seq128/part-00000.tfrecord"
    deadline = time.time() + 300
    while not first.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "phase2_seq256/part-00000.tfrecord").exists()
    assert_gone(children)
    run_command(command(small_dump, vocab, out, "--num_workers=2"))
    assert outputs(out) == expected


ONE_PHASE = ["--phases=128:20"]


def test_a_dump_cut_short_is_refused_before_the_manifest_so_a_redownload_runs(small_dump,
                                                                            vocab, tmp_path):
    dump = tmp_path / small_dump.name
    dump.write_bytes(small_dump.read_bytes()[:-100])  # an interrupted download
    out = tmp_path / "out"
    result = run_command(command(dump, vocab, out, *ONE_PHASE), check=False)
    assert result.returncode == 2
    assert f"{dump} is not a complete MediaWiki XML dump: it ends without bzip2's " in (
        result.stderr)
    assert not (out / "manifest.json").exists()
    dump.write_bytes(small_dump.read_bytes())  # downloaded again
    run_command(command(dump, vocab, out, *ONE_PHASE))
    assert json.loads((out / "manifest.json").read_text())["stages"]["phase1_seq128"]


def test_a_second_run_in_the_same_directory_is_refused(small_dump, vocab, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(["sleep", "60"])
    try:
        (out / ".bert_tf.lock").write_text(f"{socket.gethostname()} {holder.pid}\n")
        result = run_command(command(small_dump, vocab, out, *ONE_PHASE), check=False)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2
    assert f"--output_dir={out} is in use by another run (process {holder.pid}" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [".bert_tf.lock"]


def _file_size_limit(limit):
    """A write past `limit` bytes fails as on a full disk (EFBIG; SIGXFSZ ignored)."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_no_room_to_write_is_a_clear_error_leaving_no_temporaries(small_dump, vocab, tmp_path):
    """Document shards (< 64 kB) fit and are kept, the first TFRecord shard (~ 100 kB) does not;
    the rerun with room finishes the job."""
    out = tmp_path / "out"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([str(a) for a in command(small_dump, vocab, out, *ONE_PHASE)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                            preexec_fn=_file_size_limit(80_000))
    assert result.returncode == 2, result.stderr
    assert re.search(rf"prepare_dataset: error: --output_dir={out}: no room to write \(.*File "
                     r"too large\); finished shards are kept", result.stderr), result.stderr
    assert not [p for p in out.rglob("*.tmp")]
    assert len(list((out / "documents").glob("wiki000-*.txt"))) >= 3
    run_command(command(small_dump, vocab, out, *ONE_PHASE))
    assert len(list((out / "phase1_seq128").glob("*.tfrecord"))) >= 3


def test_phases_must_be_pairs():
    from bert_tf.data.dataset import DatasetError, parse_phases

    assert parse_phases(["128:20", "512:80"]) == ((128, 20), (512, 80))
    for bad in (["128"], ["128:20:5"], ["x:1"], []):
        with pytest.raises(DatasetError, match="use max_seq_length:max_predictions pairs"):
            parse_phases(bad)
