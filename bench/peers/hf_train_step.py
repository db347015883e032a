"""Peer row: one full BERT pretraining step with Hugging Face transformers on
PyTorch (BertForPreTraining from a fresh BertConfig: MLM + NSP loss, backward,
AdamW update), fp32 or bf16 autocast. Runs in the benchmark-only `hf` venv
(bench/setup_peers.sh) and prints one BENCH_JSON record.

HF's BertForPreTraining computes MLM logits at every position (it takes labels
with -100 for unmasked tokens), which is how users run it; the FLOPs credited
are still only those of the masked positions, the same for every row.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402


def torch_matmul_rate(torch, precision, size=512):
    """FLOP/s of one square matmul in the row's dtype (bf16 GEMMs are emulated,
    and very slow, on CPUs without AVX512_BF16/AMX)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(size, size).to(dtype)
    timing = common.time_step(lambda: a @ a, warmup=1, repeats=1)
    return 2 * size**3 / timing["step_s"]


def main():
    args = common.add_step_args(argparse.ArgumentParser(description=__doc__)).parse_args()
    if args.precision not in ("fp32", "bf16"):
        common.fail(f"--precision={args.precision}: this peer runs fp32 or bf16 (CPU autocast)")
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    reason = common.skip_reason(args, torch_matmul_rate(torch, args.precision))
    if reason:
        common.report_skip(args, {**vars(args), "framework": "hf-torch", "xla": False,
                                  "skipped": reason})
        return
    shape = common.SHAPES[args.shape]
    config = transformers.BertConfig(
        vocab_size=common.VOCAB_SIZE, hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=shape["num_attention_heads"],
        intermediate_size=shape["intermediate_size"], max_position_embeddings=512)
    model = transformers.BertForPreTraining(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    batch = common.synthetic_batch(args.batch_size, args.seq_length, args.masked_positions)
    labels = torch.full((args.batch_size, args.seq_length), -100, dtype=torch.long)
    positions = torch.from_numpy(batch["masked_lm_positions"]).long()
    labels.scatter_(1, positions, torch.from_numpy(batch["masked_lm_ids"]).long())
    inputs = dict(
        input_ids=torch.from_numpy(batch["input_ids"]).long(),
        attention_mask=torch.from_numpy(batch["input_mask"]).long(),
        token_type_ids=torch.from_numpy(batch["segment_ids"]).long(),
        labels=labels,
        next_sentence_label=torch.from_numpy(batch["next_sentence_labels"]).long(),
    )
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def step():
        with autocast:
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    loss = step()
    common.serve_rounds(step, args, lambda timing: common.step_record(
        args, timing, framework="hf-torch", xla=False, optimizer="AdamW",
        versions={"torch": torch.__version__, "transformers": transformers.__version__},
        attention=getattr(config, "_attn_implementation", None), loss=loss))


if __name__ == "__main__":
    main()
