"""Run by tests/test_training.py, alone or under horovodrun, on fixed records
(read in file order, no shuffling) so that every layout sees the same data:

    training_worker.py single   OUT CONFIG FILES   1 rank x 2b, and 2 micro-batches x b
    training_worker.py ranks    OUT CONFIG FILES   each of 2 ranks takes its half (b)
    training_worker.py overflow OUT CONFIG FILES   fp16; rank 1 poisons update 2

Weights are written as one flat float32 vector per layout (npy, names sorted);
overflow writes a JSON line per update per rank.
"""

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from bert_tf import distributed, input_pipeline
from bert_tf.config import BertConfig
from bert_tf.flags import PretrainingConfig
from bert_tf.training import PretrainingState, update_metrics

HALF_BATCH = 4
UPDATES = 3
SEQ, PREDICTIONS = 64, 10


def build_state(config_file, files, **overrides):
    tf.random.set_seed(7)  # the same initial weights in every process
    settings = dict(bert_config_file=config_file, output_dir="unused", input_files=files,
                    do_train=True, train_batch_size=HALF_BATCH, max_seq_length=SEQ,
                    max_predictions_per_seq=PREDICTIONS, num_train_steps=20,
                    num_warmup_steps=0, learning_rate=1e-3, optimizer_type="lamb")
    settings.update(overrides)
    state = PretrainingState(BertConfig.from_json_file(config_file),
                             PretrainingConfig(**settings))
    distributed.broadcast_variables(list(state.checkpoint_variables().values()))
    return state


def full_batches(files):
    dataset = input_pipeline.pretraining_dataset(
        files, batch_size=2 * HALF_BATCH, max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS,
        is_training=False)
    return list(dataset.take(UPDATES))


def rows(features, part):
    return {k: v[part * HALF_BATCH:(part + 1) * HALF_BATCH] for k, v in features.items()}


def flat_weights(state):
    return np.concatenate([state.params[n].numpy().ravel() for n in sorted(state.params)])


def main():
    mode, out, config_file, files = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    distributed.init()
    rank = distributed.rank()
    batches = full_batches(files)
    if mode == "single":
        whole = build_state(config_file, files, train_batch_size=2 * HALF_BATCH)
        accumulated = build_state(config_file, files, num_accumulation_steps=2)
        for features in batches:
            whole.update([features])
            accumulated.update([rows(features, 0), rows(features, 1)])
        np.save(out / "single.npy", flat_weights(whole))
        np.save(out / "accumulated.npy", flat_weights(accumulated))
    elif mode == "ranks":
        state = build_state(config_file, files)
        for features in batches:
            state.update([rows(features, rank)])
        np.save(out / f"rank{rank}.npy", flat_weights(state))
    elif mode == "overflow":
        state = build_state(config_file, files, precision="fp16")
        state.loss_scale.scale.assign(1024.0)  # low enough that only the injected update overflows
        log = []
        for i, features in enumerate(batches):
            mine = rows(features, rank)
            (totals,) = distributed.allreduce_sum([tf.stack([
                tf.reduce_sum(mine["masked_lm_weights"]), float(HALF_BATCH)])])
            state.accumulate(mine, totals)
            if i == 1 and rank == 1:
                state.accumulators[3].assign(state.accumulators[3] + np.inf)
            before = flat_weights(state)
            metrics = update_metrics(state.apply_update())
            log.append({"update": i, "finite": metrics["finite"],
                        "global_step": int(state.global_step.numpy()),
                        "loss_scale_used": metrics["loss_scale"],
                        "loss_scale_after": float(state.loss_scale.scale.numpy()),
                        "weights_changed": bool(np.any(flat_weights(state) != before))})
        (out / f"overflow{rank}.json").write_text(json.dumps(log))
        np.save(out / f"overflow{rank}.npy", flat_weights(state))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
