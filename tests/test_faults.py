"""Faults of a single training run (issue 19): a stop signal, a corrupt checkpoint, a truncated
TFRecord, stale checkpoint temporaries, two runs in one --output_dir, and smaller bad inputs.
Real processes, signals and files cut on disk; the tiny model and data of test_training.py.
A signal or kill to a running multi-process job, and a 2-rank run resumed on 1 rank:
test_preemption.py."""

import dataclasses
import json
import os
import re
import resource
import signal
import socket
import stat
import subprocess
import sys

import pytest
import test_training
from test_training import _config, pretraining_command
from tiny import ONE_THREAD, TINY_BERT

from bert_tf import __main__ as bert_tf_main
from bert_tf.data import records
from bert_tf.data.files import InputDataError
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig, BertConfigError
from bert_tf.tools import estimate
from bert_tf.train import distributed, faults, loop, run_data, run_setup
from bert_tf.train.config import PretrainingConfigError
from bert_tf.train.report import OutputDirError

data = test_training.data  # the tiny records and bert_config (a session fixture)
LONG = 900  # seconds a multi-process run may take on a busy shared machine


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


# ------------------------------------------------------------------------- preemption
# (the multi-process cases are in test_preemption.py)


def test_stop_signals_record_the_first_and_exit_on_the_second():
    with faults.StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.received == "SIGINT"
        with pytest.raises(SystemExit) as exit_info:
            os.kill(os.getpid(), signal.SIGTERM)
        assert exit_info.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


# ------------------------------------------------------------------ corrupt checkpoint


def test_corrupt_latest_checkpoint_is_set_aside_and_the_older_one_resumed(data, tmp_path,
                                                                         capsys, monkeypatch):
    output_dir = tmp_path / "out"
    loop.run(_config(data, output_dir, num_train_steps=4, save_checkpoints_steps=2))
    _truncate(output_dir / "model.ckpt-4.data-00000-of-00001", 1_000_000)
    capsys.readouterr()

    loop.run(_config(data, output_dir, num_train_steps=6, save_checkpoints_steps=2))
    out = capsys.readouterr().out
    assert f"warning: checkpoint {output_dir}/model.ckpt-4 is corrupt" in out, out
    assert f"resumed from {output_dir}/model.ckpt-2 (step 2" in out, out
    assert (output_dir / "model.ckpt-4.data-00000-of-00001.corrupt").exists()
    assert (output_dir / "model.ckpt-4.index.corrupt").exists()
    assert checkpoints.latest_checkpoint(output_dir).endswith("model.ckpt-6")

    # `python -m bert_tf predict` on a corrupt checkpoint: a clear error naming it, no
    # traceback (an exception, here). The dispatch runs in this process, as in test_convert.py:
    # a process of its own would only import TensorFlow again.
    _truncate(output_dir / "model.ckpt-6.data-00000-of-00001", 1_000_000)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the dispatch replaces them
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1"))
    with pytest.raises(SystemExit) as exit_info:
        bert_tf_main.main(["python -m bert_tf", "predict", f"--bert_config_file={data.config}",
                           f"--init_checkpoint={output_dir / 'model.ckpt-6'}",
                           f"--vocab_file={data.vocab}", "--text=the [MASK] sat"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1, err
    assert f"predict: error: checkpoint {output_dir / 'model.ckpt-6'} is corrupt" in err, err


def test_only_corrupt_checkpoints_stop_the_run_naming_them(data, tmp_path):
    output_dir = tmp_path / "out"
    loop.run(_config(data, output_dir, num_train_steps=2))
    _truncate(output_dir / "model.ckpt-2.data-00000-of-00001", 1_000_000)
    with pytest.raises(loop.TrainingError, match=r"no checkpoint .* reads back .*model.ckpt-2"):
        loop.run(_config(data, output_dir, num_train_steps=4))
    assert (output_dir / "model.ckpt-2.index").exists()  # nothing renamed: no fallback


# ------------------------------------------------------------------ truncated records


def test_truncated_tfrecord_is_named_at_start_up_and_mid_run(data, tmp_path):
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(data.train.read_bytes()[:200_000])
    offset = records.truncated_at(str(cut))
    assert offset is not None and 0 < offset < 200_000
    assert records.truncated_at(str(data.train)) is None

    with pytest.raises(InputDataError, match=rf"--input_files: {cut} is truncated: its record "
                                             rf"at byte {offset}"):
        loop.run(_config(data, tmp_path / "out", input_files=str(cut)))

    # Mid-run (the file cut after the start-up check): the update names file and offset.
    distributed.init()
    config = _config(data, tmp_path / "out", input_files=str(cut), num_train_steps=1000)
    state = loop.PretrainingState(BertConfig.from_json_file(data.config), config)
    batches = iter(run_setup.train_dataset(config, [str(cut)], 0, 1))
    with pytest.raises(loop.TrainingError) as error:
        for _ in range(1000):
            faults.guarded_update(state, batches, config)
    message = str(error.value)
    assert f"{cut} is truncated: its record at byte {offset}" in message, message
    assert "rerun the same command to resume" in message, message


def test_junk_and_damaged_records_are_named_with_their_flag(data, tmp_path):
    """Issue 37: a file of other data was called "truncated"; a record failing its checksum
    in --eval_files was an unnamed DataLossError."""
    junk = tmp_path / "notes.tfrecord"
    junk.write_bytes(b"just some text, not records\n" * 100)
    with pytest.raises(InputDataError, match=rf"--input_files: {junk} is not a whole TFRecord "
                                             "file: at byte 0 of its 2800 there is no record"):
        loop.run(_config(data, tmp_path / "out", input_files=str(junk)))
    raw = bytearray(data.eval.read_bytes())
    offset = 0
    for _ in range(records.RECORDS_CHECKED_PER_FILE + 4):  # past what the start-up check reads
        offset += 16 + int.from_bytes(raw[offset:offset + 8], "little")
    raw[offset + 20] ^= 0xFF  # in the record's data: its headers still hold
    damaged = tmp_path / "eval.tfrecord"
    damaged.write_bytes(bytes(raw))
    with pytest.raises(loop.TrainingError, match=f"--eval_files: {damaged} holds a damaged "
                                                 "record"):
        loop.run(_config(data, tmp_path / "out", do_train=False, do_eval=True,
                         eval_files=str(damaged), max_eval_steps=1000))


# ------------------------------------------------------------------ stale temporaries


def test_stale_checkpoint_temporaries_are_removed_on_the_next_start(data, tmp_path, capsys):
    output_dir = tmp_path / "out"
    loop.run(_config(data, output_dir, num_train_steps=2))
    # What a kill during SaveV2 leaves: a partial data file under our temporary prefix.
    partial = output_dir / (".tmp-" + "0" * 32 + "-model.ckpt-4.data-00000-of-00001"
                            ".tempstate123")
    partial.write_bytes((output_dir / "model.ckpt-2.data-00000-of-00001").read_bytes()[:50_000])
    state_tmp = output_dir / ("checkpoint.tmp-" + "1" * 32)
    state_tmp.write_text("partial")
    foreign = output_dir / ".tmp-notours"
    foreign.write_text("someone else's")
    capsys.readouterr()

    loop.run(_config(data, output_dir, num_train_steps=4))
    out = capsys.readouterr().out
    assert "removed 2 partial file(s) left by an interrupted checkpoint write" in out, out
    assert not partial.exists() and not state_tmp.exists()
    assert foreign.exists()


# ------------------------------------------------------------------ output_dir lock


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_output_dir_lock_refuses_a_live_holder_and_takes_over_a_dead_one(data, tmp_path,
                                                                         capsys):
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    lock = output_dir / faults.LOCK_FILE
    holder = subprocess.Popen(["sleep", "60"])
    try:
        lock.write_text(f"{socket.gethostname()} {holder.pid}\n")
        with pytest.raises(OutputDirError, match=rf"in use by another run \(process "
                                                 rf"{holder.pid} on host {socket.gethostname()}"):
            loop.run(_config(data, output_dir))
        assert lock.read_text().split()[1] == str(holder.pid)  # still the holder's
        assert checkpoints.latest_checkpoint(output_dir) is None
    finally:
        holder.kill()
        holder.wait()

    lock.write_text(f"{socket.gethostname()} {_dead_pid()}\n")
    capsys.readouterr()
    loop.run(_config(data, output_dir))
    assert "took over the stale lock" in capsys.readouterr().out
    assert not lock.exists()  # released at the end
    assert checkpoints.latest_checkpoint(output_dir).endswith("model.ckpt-2")


# ------------------------------------------------------------------ smaller ones


@pytest.mark.parametrize("flag, value, message", [
    ("learning_rate", float("nan"), "--learning_rate must be a finite number > 0, got nan"),
    # issue 37: nan weight decay ran 25 skipped updates, then blamed the learning rate
    ("weight_decay_rate", float("nan"), "--weight_decay_rate must be a finite number >= 0, "
                                        "got nan"),
    ("max_seq_length", 0, "--max_seq_length must be an integer >= 1, got 0"),
])
def test_nan_or_out_of_range_numbers_are_refused_before_anything_is_written(
        data, tmp_path, flag, value, message):
    with pytest.raises(PretrainingConfigError, match=f"^{re.escape(message)}$"):
        loop.run(_config(data, tmp_path / "out", **{flag: value}))
    assert not (tmp_path / "out").exists()


def test_missing_attention_heads_is_named_as_a_missing_key(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({k: v for k, v in TINY_BERT.items()
                                if k != "num_attention_heads"}))
    with pytest.raises(BertConfigError, match=rf"{path}: field\(s\) 'num_attention_heads' "
                                              "missing"):
        BertConfig.from_json_file(path)


def test_eval_files_matching_nothing_names_the_flag(data, tmp_path):
    with pytest.raises(InputDataError, match="--eval_files: "):
        loop.run(_config(data, tmp_path / "out", do_train=False, do_eval=True,
                         eval_files=str(tmp_path / "none*.tfrecord")))


def test_estimate_skips_a_last_line_cut_by_a_kill(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "sequences_per_second": 100.0 * s, "num_ranks": 2})
             for s in (1, 2, 3)]
    path.write_text("\n".join(lines) + "\n" + lines[0][:20])
    assert estimate.throughput_from_metrics(str(path)) == pytest.approx(125.0)
    path.write_text(lines[0] + "\n" + lines[1][:20] + "\n" + lines[2] + "\n")
    with pytest.raises(estimate.EstimateError, match=":2: not JSON"):
        estimate.throughput_from_metrics(str(path))


def test_resumed_run_leaves_its_warm_up_updates_out_of_the_throughput(data, tmp_path):
    output_dir = tmp_path / "out"
    loop.run(_config(data, output_dir, num_train_steps=2))
    summary = loop.run(_config(data, output_dir, num_train_steps=4))["train"]
    assert summary["updates_this_run"] == 2 and summary["timed_updates"] == 0
    assert summary["avg_sequences_per_second"] is None
    assert summary["time_to_train_hours"] is None


def test_failed_run_removes_the_empty_output_dir_it_created(data, tmp_path):
    created = tmp_path / "new" / "out"
    with pytest.raises(InputDataError):
        loop.run(_config(data, created, input_files=str(tmp_path / "none*.tfrecord")))
    assert not created.exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(InputDataError):
        loop.run(_config(data, existing, input_files=str(tmp_path / "none*.tfrecord")))
    assert existing.is_dir() and os.listdir(existing) == []


def test_bert_config_json_follows_the_umask(data, tmp_path):
    old = os.umask(0o022)
    try:
        loop.run(_config(data, tmp_path / "out"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out" / "bert_config.json").stat().st_mode) == 0o644



def test_relative_output_dir_resumes_and_keeps_keep_checkpoint_max(data, tmp_path,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    loop.run(_config(data, "rel/out", num_train_steps=2, save_checkpoints_steps=1,
                     keep_checkpoint_max=1))
    assert sorted(p.name for p in (tmp_path / "rel/out").glob("*.index")) == [
        "model.ckpt-2.index"]
    summary = loop.run(_config(data, "rel/out", num_train_steps=3, save_checkpoints_steps=1,
                               keep_checkpoint_max=1))["train"]
    assert summary["updates_this_run"] == 1  # resumed at step 2, not retrained from 0
    assert sorted(p.name for p in (tmp_path / "rel/out").glob("*.index")) == [
        "model.ckpt-3.index"]


def test_metrics_jsonl_unwritable_mid_run_is_named_and_the_updates_are_saved(data, tmp_path):
    """A file-size limit (as a full disk or a quota) hits metrics.jsonl within a few records:
    the run stops with a clear error and a checkpoint of that update."""
    limit = 32 << 20  # above the tiny model's checkpoint (~24 MB with LAMB's slots)
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    line = json.dumps({"step": 0, "note": "x" * 1000}) + "\n"  # kept on a start at step 0
    (output_dir / "metrics.jsonl").write_text(line * ((limit - 100) // len(line)))

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    command = pretraining_command(data, output_dir, num_train_steps=4, log_every_n_steps=1,
                                  save_checkpoints_steps=100)
    proc = subprocess.run([str(a) for a in command], env={**os.environ, **ONE_THREAD,
                                                          "TF_CPP_MIN_LOG_LEVEL": "2"},
                          capture_output=True, text=True, timeout=LONG, preexec_fn=limited)
    assert proc.returncode == 1, proc.stderr
    failed = re.search(r"run_pretraining: error: cannot write .*metrics\.jsonl at step (\d) "
                       r"\(File too large\); the updates so far are saved", proc.stderr)
    assert failed, proc.stderr
    assert checkpoints.latest_checkpoint(output_dir).endswith(f"model.ckpt-{failed[1]}")


def test_resume_on_other_data_or_sequence_length_is_refused(data, tmp_path):
    """Phase 2 started in phase 1's --output_dir would resume at phase 1's input position in
    other files; it is refused, naming the change and the fix (a new dir, --init_checkpoint)."""
    output_dir = tmp_path / "out"
    config = _config(data, output_dir, num_train_steps=2)
    loop.run(config)
    prefix = checkpoints.latest_checkpoint(output_dir)
    with pytest.raises(checkpoints.CheckpointMismatchError,
                       match=r"model.ckpt-2 was trained on other data: the --input_files differ "
                             r"\(were 1 files, now 1, or their names or sizes\).*new "
                             "--output_dir with --init_checkpoint="):
        loop.run(_config(data, output_dir, num_train_steps=4, input_files=data.eval))
    with pytest.raises(checkpoints.CheckpointMismatchError,
                       match="--max_seq_length was 64, now 32"):
        run_data.check(prefix, dataclasses.replace(config, max_seq_length=32))
    assert checkpoints.latest_checkpoint(output_dir) == prefix
    loop.run(_config(data, output_dir, num_train_steps=4))  # the same data resumes
