"""fp16 tracks fp32: the same BERT, initial weights, micro-batches and updates in float16 (with
dynamic loss scaling) and in float32, through bert_tf's own update (PretrainingState.update with
--accumulation micro-batches, the path whose gradient magnitudes issue 24 fixed). Prints both
loss curves, the share of the first update's gradient elements that are zero in fp16 but not in
fp32 (flushed by float16's range), and one BENCH_JSON line; exits 1 when fp16's loss strays
from fp32's by more than --tolerance (relative) at any update, or when more than --max_skipped
fp16 updates are skipped.

    python bench/fp16_tracks_fp32.py --shape base --batch_size 32 --accumulation 4 --xla
    python bench/fp16_tracks_fp32.py --shape tiny --batch_size 2 --updates 4   # CPU, seconds

Run by bench/gpu_check.sh. The micro-batches are synthetic (bench/common.py), the same few
every update: the loss falls as the model memorises them, which is all a comparison needs.
"""

import argparse
import sys

import common
import numpy as np


def loss_curve(args, precision):
    """Losses, skipped updates and the first update's accumulated gradients (None for one
    micro-batch) of `args.updates` updates at `precision`."""
    import tensorflow as tf

    from bert_tf.model.config import BertConfig
    from bert_tf.train.config import PretrainingConfig
    from bert_tf.train.loop import PretrainingState

    shape = {k: v for k, v in common.SHAPES[args.shape].items() if k != "name"}
    config = PretrainingConfig(
        bert_config_file="", output_dir="", train_batch_size=args.batch_size,
        max_seq_length=args.seq_length, max_predictions_per_seq=args.masked_positions,
        num_train_steps=10**6, num_warmup_steps=0, learning_rate=args.learning_rate,
        optimizer_type="lamb", precision=precision, use_xla=args.xla,
        num_accumulation_steps=args.accumulation)
    tf.random.set_seed(args.seed)  # the same initial weights at both precisions
    state = PretrainingState(BertConfig(vocab_size=common.VOCAB_SIZE, **shape), config)
    if args.loss_scale and precision == "fp16":
        state.loss_scale.scale.assign(args.loss_scale)
    micro_batches = [
        {name: tf.constant(value) for name, value in common.synthetic_batch(
            args.batch_size, args.seq_length, args.masked_positions, seed=i).items()}
        for i in range(args.accumulation)]
    losses, skipped, first_gradients = [], 0, None
    for _ in range(args.updates):
        metrics = state.update(micro_batches)
        losses.append(metrics["loss"])
        skipped += not metrics["finite"]
        if first_gradients is None and state.accumulators:
            first_gradients = np.concatenate([a.numpy().ravel() for a in state.accumulators])
    return losses, skipped, first_gradients


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(common.SHAPES), default="base")
    parser.add_argument("--batch_size", type=int, default=32, help="sequences per micro-batch")
    parser.add_argument("--accumulation", type=int, default=4, help="micro-batches per update")
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--masked_positions", type=int, default=20)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--loss_scale", type=float, default=None,
                        help="fp16's initial loss scale (default: bert_tf's, 2^15)")
    parser.add_argument("--max_skipped", type=int, default=3,
                        help="fp16 updates the loss scale may skip while it finds its level")
    args = parser.parse_args()

    import bert_tf

    bert_tf.use_onednn_by_default()  # before TensorFlow loads, as run_pretraining.py does
    from bert_tf.train import distributed

    distributed.init()
    distributed.pin_gpu_to_local_rank()
    fp32, _, gradients32 = loss_curve(args, "fp32")
    fp16, skipped, gradients16 = loss_curve(args, "fp16")
    worst = max(abs(a - b) / b for a, b in zip(fp16, fp32, strict=True))
    for i, (a, b) in enumerate(zip(fp16, fp32, strict=True)):
        print(f"update {i + 1:3d}: fp32 loss {b:.4f}  fp16 loss {a:.4f}")
    flushed = None
    if gradients32 is not None:
        flushed = float(np.mean(gradients16[gradients32 != 0] == 0))
        print(f"update 1: {flushed:.4%} of the gradient elements non-zero in fp32 are zero in fp16")
    ok = worst <= args.tolerance and skipped <= args.max_skipped
    print(f"fp16 tracks fp32: largest relative loss difference {worst:.2%} (tolerance "
          f"{args.tolerance:.0%}), {skipped} fp16 update(s) skipped: {'OK' if ok else 'FAIL'}")
    common.print_json({**vars(args), "fp32_losses": fp32, "fp16_losses": fp16,
                       "fp16_skipped": skipped, "worst_relative_difference": worst,
                       "flushed_share": flushed, "ok": ok})
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
