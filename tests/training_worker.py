"""Run by tests/test_training.py under `horovodrun -np 2` (its helpers are
also used in-process for the one-rank references), on fixed records read in
file order so that every layout sees the same data:

    training_worker.py OUT BERT_CONFIG TFRECORDS

1. each rank takes its half (b) of every batch of 2b -> OUT/rank{r}.npy
2. fp16 with rank 1's local gradient poisoned in update 2 -> OUT/overflow{r}.{json,npy}
3. dropout 0.1: the local gradients of the same micro-batch accumulated at input
   positions 0 and 1 -> OUT/dropout{r}.npy (two rows)
4. rank 1 hangs; rank 0 waits in a barrier until its watchdog ends the job.

Weights are saved as one flat float32 vector (variables in name order).
"""

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from bert_tf.data import input_pipeline
from bert_tf.model.config import BertConfig
from bert_tf.train import distributed
from bert_tf.train.config import PretrainingConfig
from bert_tf.train.loop import PretrainingState

HALF_BATCH = 4
UPDATES = 3
SEQ, PREDICTIONS = 64, 10
WATCHDOG_SECONDS, HANG_SECONDS = 5, 120


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


def local_gradients_at_two_positions(out, config_file, files, features):
    """Dropout 0.1; the same micro-batch accumulated at input positions 0 and 1."""
    config = BertConfig.from_json_file(config_file)
    dropout_config = out / f"dropout_config{distributed.rank()}.json"
    dataclasses.replace(config, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1).to_json_file(dropout_config)
    state = build_state(str(dropout_config), files)
    totals = tf.stack([tf.reduce_sum(features["masked_lm_weights"]), float(HALF_BATCH)])

    def gradients():  # each call consumes one input position
        grads, _ = state.gradients(features, totals)
        return np.concatenate([g.numpy().ravel() for g in grads])

    return np.stack([gradients(), gradients()])


def rows(features, part):
    return {k: v[part * HALF_BATCH:(part + 1) * HALF_BATCH] for k, v in features.items()}


def flat_weights(state):
    return np.concatenate([state.params[n].numpy().ravel() for n in sorted(state.params)])


def main():
    out, config_file, files = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    distributed.init()
    rank = distributed.rank()
    batches = full_batches(files)

    # 1. Each rank takes its half of every double batch.
    state = build_state(config_file, files)
    for features in batches:
        state.update([rows(features, rank)])
    np.save(out / f"rank{rank}.npy", flat_weights(state))

    # 2. fp16: rank 1 poisons its local gradient sum in the second update.
    state = build_state(config_file, files, precision="fp16")
    state.loss_scale.scale.assign(1024.0)  # low enough that only the injected update overflows
    log = []
    for i, features in enumerate(batches):
        mine = rows(features, rank)
        (totals,) = distributed.allreduce_sum([tf.stack([
            tf.reduce_sum(mine["masked_lm_weights"]), float(HALF_BATCH)])])
        grads, metric_sums = state.gradients(mine, totals / state.micro_batches_per_update())
        if i == 1 and rank == 1:
            grads[3] += np.inf
        before = flat_weights(state)
        metrics = state.update_metrics(state.apply_update(grads, metric_sums))
        log.append({"update": i, "finite": metrics["finite"],
                    "global_step": int(state.global_step.numpy()),
                    "loss_scale_used": metrics["loss_scale"],
                    "loss_scale_after": float(state.loss_scale.scale.numpy()),
                    "weights_changed": bool(np.any(flat_weights(state) != before))})
    (out / f"overflow{rank}.json").write_text(json.dumps(log))
    np.save(out / f"overflow{rank}.npy", flat_weights(state))

    # 3. Dropout masks per rank and input position.
    np.save(out / f"dropout{rank}.npy",
            local_gradients_at_two_positions(out, config_file, files, rows(batches[0], 0)))
    print(f"rank {rank} done", flush=True)
    # Both ranks finish 1-3 first: a rank 1 still computing 3 when rank 0's 5 s watchdog starts
    # (a busy machine, or another pytest-xdist worker on the core) was taken for a hung one.
    distributed.barrier()

    # 4. Rank 1 hangs; rank 0's watchdog must end it (exit 3) while it waits in a collective.
    if rank == 1:
        time.sleep(HANG_SECONDS)
    else:
        with distributed.Watchdog(WATCHDOG_SECONDS) as watchdog:
            watchdog.beat()
            distributed.barrier()
    print(f"rank {rank} was not stopped", flush=True)


if __name__ == "__main__":
    main()
