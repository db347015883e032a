"""Peer for bench/convergence.py: trains Hugging Face `BertForPreTraining` (PyTorch) from the
given initial weights on the same masked records, with the update rule bert_tf applies, and
evaluates held-out masked-LM loss/accuracy and NSP accuracy every --eval_every updates.

Runs in the benchmark-only `hf` venv (bench/setup_peers.sh). The records come as .npz files
written by convergence.py from the TFRecords (this venv has no TensorFlow). Prints one
BENCH_JSON record with the curve.

Update rule, the same as bert_tf's (bert_tf/train/optimization.py), written out here because
no library optimizer is it:
- adamw: Google's AdamWeightDecayOptimizer: Adam WITHOUT bias correction, decoupled decay
  lr * rate * w (not on LayerNorm/bias), eps 1e-6, linear warmup then linear decay to 0.
  (torch.optim.AdamW corrects the bias, which makes the first updates ~3x larger.)
- lamb: bias-corrected Adam direction + decay, times the trust ratio ||w|| / ||update|| for
  variables not matching --exclude_from_layer_adaptation; poly decay power 0.5.
With --update_rule=hf_trainer instead: what Hugging Face's Trainer (and so run_mlm.py) applies
by default, from the libraries: torch.optim.AdamW (bias-corrected; decay on all but LayerNorm
and bias), transformers.get_linear_schedule_with_warmup and clip_grad_norm_ 1.0; eps 1e-8 as
TrainingArguments.adam_epsilon. That is the reference's own rule, not ours.
Gradients: the batch's mean masked-LM loss + mean NSP loss, clipped to global norm 1.0.
The masked-LM head runs on the masked positions only (as bert_tf and Google do), through
HF's own `cls.predictions` module; HF's loss over all positions with -100 labels is the same
mean, at 6x the head's cost.
"""

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def parse_args():
    parser = common.add_convergence_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--hf_dir", required=True, help="initial weights (tf_to_hf output)")
    parser.add_argument("--update_rule", choices=("bert_tf", "hf_trainer"), default="bert_tf")
    return parser.parse_args()


def learning_rate_at(step, args):
    """bert_tf's schedule (optimization.learning_rate_at)."""
    if step < args.num_warmup_steps:
        return args.learning_rate * step / args.num_warmup_steps
    power = 0.5 if args.optimizer_type == "lamb" else 1.0
    remaining = 1.0 - min(step, args.num_train_steps) / args.num_train_steps
    return args.learning_rate * remaining ** power


class GoogleUpdate:
    """Google's AdamW (no bias correction) or NVIDIA-style LAMB over named parameters."""

    def __init__(self, torch, named_params, args):
        self.torch, self.args = torch, args
        exclude_adapt = [p for p in args.exclude_from_layer_adaptation.split(",") if p]
        self.params = [p for _, p in named_params]
        self.decays = [bool(args.weight_decay_rate)
                       and not any(re.search(r, n) for r in EXCLUDE_FROM_WEIGHT_DECAY)
                       for n, _ in named_params]
        self.adapted = [not any(re.search(r, n) for r in exclude_adapt) for n, _ in named_params]
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @staticmethod
    def clip(torch, params):
        """Scales gradients to global norm <= 1 (tf.clip_by_global_norm)."""
        norm = torch.sqrt(sum((p.grad * p.grad).sum() for p in params))
        scale = 1.0 / max(float(norm), 1.0)
        for p in params:
            p.grad.mul_(scale)

    def apply(self, lr, step):
        """One update with the parameters' .grad; `step` updates came before."""
        torch, args = self.torch, self.args
        b1, b2, eps, lamb = 0.9, 0.999, 1e-6, args.optimizer_type == "lamb"
        with torch.no_grad():
            for i, p in enumerate(self.params):
                g = p.grad
                self.m[i].mul_(b1).add_(g, alpha=1 - b1)
                self.v[i].mul_(b2).addcmul_(g, g, value=1 - b2)
                if lamb:
                    t = step + 1
                    update = (self.m[i] / (1 - b1 ** t)) / (
                        torch.sqrt(self.v[i] / (1 - b2 ** t)) + eps)
                else:
                    update = self.m[i] / (torch.sqrt(self.v[i]) + eps)
                if self.decays[i]:
                    update = update + args.weight_decay_rate * p
                ratio = 1.0
                if lamb and self.adapted[i]:
                    w_norm, u_norm = float(p.norm()), float(update.norm())
                    ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                p.sub_(lr * ratio * update)


class TrainerUpdate:
    """Hugging Face Trainer's default update, from torch and transformers (adamw only)."""

    def __init__(self, torch, transformers, named_params, args):
        decay = [p for n, p in named_params
                 if not any(re.search(r, n) for r in EXCLUDE_FROM_WEIGHT_DECAY)]
        no_decay = [p for n, p in named_params
                    if any(re.search(r, n) for r in EXCLUDE_FROM_WEIGHT_DECAY)]
        self.torch = torch
        self.params = decay + no_decay
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay_rate},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-8)
        self.schedule = transformers.get_linear_schedule_with_warmup(
            self.optimizer, args.num_warmup_steps, args.num_train_steps)

    def step(self):
        self.torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.schedule.step()


def forward_sums(torch, model, batch):
    """Sums of masked-LM loss/weight/correct and NSP loss/correct over a batch (bert_tf's
    pretraining_loss), plus the batch's loss (mean MLM + mean NSP)."""
    out = model.bert(input_ids=batch["input_ids"], attention_mask=batch["input_mask"],
                     token_type_ids=batch["segment_ids"])
    seq, pooled = out[0], out[1]
    positions = batch["masked_lm_positions"]
    gathered = torch.gather(seq, 1, positions[:, :, None].expand(-1, -1, seq.shape[-1]))
    mlm_logits = model.cls.predictions(gathered)
    nsp_logits = model.cls.seq_relationship(pooled)
    weights = batch["masked_lm_weights"]
    nll = torch.nn.functional.cross_entropy(
        mlm_logits.reshape(-1, mlm_logits.shape[-1]), batch["masked_lm_ids"].reshape(-1),
        reduction="none").reshape(weights.shape)
    nsp_nll = torch.nn.functional.cross_entropy(nsp_logits, batch["next_sentence_labels"],
                                                reduction="none")
    sums = {
        "mlm_loss_sum": (weights * nll).sum(), "mlm_weight_sum": weights.sum(),
        "mlm_correct_sum": (weights * (mlm_logits.argmax(-1) == batch["masked_lm_ids"])).sum(),
        "nsp_loss_sum": nsp_nll.sum(),
        "nsp_correct_sum": (nsp_logits.argmax(-1) == batch["next_sentence_labels"]).sum(),
        "num_examples": float(len(nsp_nll)),
    }
    loss = sums["mlm_loss_sum"] / (sums["mlm_weight_sum"] + 1e-5) + nsp_nll.mean()
    return sums, loss


def load_npz(torch, path):
    data = dict(__import__("numpy").load(path))
    out = {k: torch.from_numpy(v).long() for k, v in data.items()}
    out["masked_lm_weights"] = torch.from_numpy(data["masked_lm_weights"]).float()
    out["next_sentence_labels"] = out["next_sentence_labels"].reshape(-1)
    return out


def evaluate(torch, model, eval_data, batch_size):
    """bert_tf's eval metrics (metrics_from_sums) over every held-out record."""
    model.eval()
    totals = {}
    n = len(eval_data["input_ids"])
    with torch.no_grad():
        for start in range(0, n - batch_size + 1, batch_size):
            batch = {k: v[start:start + batch_size] for k, v in eval_data.items()}
            sums, _ = forward_sums(torch, model, batch)
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + float(v)
    model.train()
    weight = totals["mlm_weight_sum"] + 1e-5
    return {"masked_lm_loss": totals["mlm_loss_sum"] / weight,
            "masked_lm_accuracy": totals["mlm_correct_sum"] / weight,
            "next_sentence_loss": totals["nsp_loss_sum"] / totals["num_examples"],
            "next_sentence_accuracy": totals["nsp_correct_sum"] / totals["num_examples"]}


def main():
    args = parse_args()
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = transformers.BertForPreTraining.from_pretrained(args.hf_dir)
    model.train()  # dropout on, as in bert_tf's training
    train, eval_data = load_npz(torch, args.train_npz), load_npz(torch, args.eval_npz)
    named = list(model.named_parameters())  # tied decoder/word embeddings listed once
    if args.update_rule == "hf_trainer":
        if args.optimizer_type != "adamw":
            common.fail("--update_rule=hf_trainer is torch's AdamW: use --optimizer_type=adamw")
        trainer = TrainerUpdate(torch, transformers, named, args)
    else:
        optimizer = GoogleUpdate(torch, named, args)
    generator = torch.Generator().manual_seed(args.seed)
    num_records = len(train["input_ids"])
    order, cursor = torch.randperm(num_records, generator=generator), 0
    curve = [{"step": 0, **evaluate(torch, model, eval_data, args.eval_batch_size)}]
    start = time.time()
    for step in range(args.num_train_steps):
        if cursor + args.batch_size > num_records:
            order, cursor = torch.randperm(num_records, generator=generator), 0
        index = order[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        _, loss = forward_sums(torch, model, {k: v[index] for k, v in train.items()})
        model.zero_grad(set_to_none=False)
        loss.backward()
        if args.update_rule == "hf_trainer":
            trainer.step()
        else:
            GoogleUpdate.clip(torch, optimizer.params)
            optimizer.apply(learning_rate_at(step, args), step)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.num_train_steps:
            point = {"step": step + 1, "train_loss": float(loss),
                     **evaluate(torch, model, eval_data, args.eval_batch_size)}
            curve.append(point)
            if args.curve_file:
                Path(args.curve_file).write_text(json.dumps(curve))
            print(f"hf step {step + 1}: {json.dumps(point)}", file=sys.stderr, flush=True)
        if not math.isfinite(float(loss)):
            break
    common.print_json({"framework": "hf-torch", "update_rule": args.update_rule,
                       "torch": torch.__version__,
                       "transformers": transformers.__version__, "curve": curve,
                       "train_seconds": time.time() - start})


if __name__ == "__main__":
    main()
