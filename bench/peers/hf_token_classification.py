"""Hugging Face peer of bench/finetune.py (runs in the `hf` benchmark venv): training steps of
transformers' BertForTokenClassification on the rows bert_tf encoded (first word pieces
labelled, others ignored), AdamW, clipping to norm 1.0. Prints one JSON record: sequences/s
over --steps timed steps after 3 warm-up steps.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

WARMUP_STEPS = 3


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hf_dir", required=True)
    parser.add_argument("--rows", required=True, help="JSON of bert_tf's encoded rows")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--num_labels", type=int, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = {k: torch.tensor(v) for k, v in json.loads(Path(args.rows).read_text()).items()}
    labels = torch.where(rows["label_weights"] > 0, rows["label_ids"], -100)
    model = transformers.BertForTokenClassification.from_pretrained(
        args.hf_dir, num_labels=args.num_labels)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    num_rows = len(labels)

    def step(i):
        chosen = torch.arange(i * args.batch_size, (i + 1) * args.batch_size) % num_rows
        loss = model(input_ids=rows["input_ids"][chosen],
                     attention_mask=rows["input_mask"][chosen],
                     token_type_ids=rows["segment_ids"][chosen], labels=labels[chosen]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return float(loss)

    for i in range(WARMUP_STEPS):
        step(i)
    started = time.perf_counter()
    for i in range(WARMUP_STEPS, WARMUP_STEPS + args.steps):
        loss = step(i)
    seconds = time.perf_counter() - started
    common.print_json({"framework": "hf", "torch": torch.__version__,
                       "transformers": transformers.__version__,
                       "sequences_per_second": args.steps * args.batch_size / seconds,
                       "step_s": seconds / args.steps, "final_loss": loss,
                       "seq_length": rows["input_ids"].shape[1], "batch_size": args.batch_size})


if __name__ == "__main__":
    main()
