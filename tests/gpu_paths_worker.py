"""Run by tests/test_gpu_paths.py under `horovodrun -np 2`: one update with --fp16_allreduce
at a loss scale whose scaled gradients pass float16's 65504 (fp32 compute, so the backward pass
itself cannot overflow: only the compressed allreduce could). Prints `finite=<bool>` per rank."""

import numpy as np
import tensorflow as tf
import tiny

from bert_tf.model.config import BertConfig
from bert_tf.train import distributed
from bert_tf.train.config import PretrainingConfig
from bert_tf.train.loop import PretrainingState

LOSS_SCALE = 2.0**24


def main():
    distributed.init()
    tf.random.set_seed(7)
    config = PretrainingConfig(
        bert_config_file="unused", output_dir="unused", input_files="unused", do_train=True,
        train_batch_size=2, max_seq_length=tiny.SEQ, max_predictions_per_seq=tiny.PREDICTIONS,
        num_train_steps=10, num_warmup_steps=0, learning_rate=1e-3, fp16_allreduce=True)
    state = PretrainingState(BertConfig(**tiny.TINY_BERT), config)
    distributed.broadcast_variables(list(state.checkpoint_variables().values()))
    # What an fp16 run's dynamic scale reaches after enough good updates.
    state.loss_scale.scale.assign(LOSS_SCALE)
    rng = np.random.default_rng(distributed.rank())
    metrics = state.update([tiny.random_batch(rng, 2)])
    print(f"rank {distributed.rank()} finite={metrics['finite']} "
          f"grad_norm={metrics['grad_norm']:.4g}", flush=True)


if __name__ == "__main__":
    main()
