"""Peer for bench/time_to_quality.py: Hugging Face's `run_mlm.py` with its defaults, from
scratch, for a wall-clock budget.

What it does is what transformers' examples/pytorch/language-modeling/run_mlm.py does when a
user passes only the model config, the tokenizer, the text files and `--max_seq_length`
(read at huggingface/transformers 0055f83): every line tokenized with its [CLS]/[SEP], the
token lists of each 1,000 lines concatenated and cut into --max_seq_length blocks (the
remainder dropped), DataCollatorForLanguageModeling at mlm_probability 0.15 (masked anew for
every batch), BertForMaskedLM, and Trainer with TrainingArguments' defaults (AdamW 5e-5,
linear decay to 0 over 3 epochs, no warmup, batch 8, gradient clipping 1.0, dropout from the
config, 0.1). run_mlm.py itself needs the `datasets` library and a model card; this script
builds the same blocks in plain Python instead, so that the peer venv holds only torch,
transformers and accelerate.

The one thing added is the budget: a TrainerCallback stops training once --max_train_time
seconds of updates are spent (counted from the first update, as bert_tf counts its own). The
linear schedule stays run_mlm's 3 epochs, as a user who set no --max_steps would get.

Runs in the benchmark-only `hf` venv (bench/setup_peers.sh). Writes --output_dir
(config.json, model.safetensors) and prints one BENCH_JSON line with the updates done.
"""

import argparse
import glob
import json
import time
from itertools import chain

GROUP_LINES = 1000  # run_mlm.py's map(batched=True) batch: the unit group_texts concatenates
# run_mlm's model config for a BERT is the config file's; these are bert_config.json's names
# that differ in transformers.BertConfig.
BERT_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "hidden_act", "hidden_dropout_prob",
                    "attention_probs_dropout_prob", "max_position_embeddings",
                    "type_vocab_size", "initializer_range")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train_files", required=True, help="glob of text files, one sentence "
                        "per line (format_text's output)")
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--bert_config_file", required=True)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_train_time", type=float, required=True, help="seconds")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output_dir", required=True)
    return parser.parse_args()


def blocks(files, tokenizer, max_seq_length):
    """run_mlm.py's group_texts over every GROUP_LINES lines of `files`."""
    lines = [line for path in sorted(files) for line in open(path, encoding="utf-8")
             if line.strip()]
    out = []
    for start in range(0, len(lines), GROUP_LINES):
        encoded = tokenizer(lines[start:start + GROUP_LINES], return_special_tokens_mask=True)
        joined = {k: list(chain(*v)) for k, v in encoded.items()}
        length = len(joined["input_ids"]) // max_seq_length * max_seq_length
        out += [{k: v[i:i + max_seq_length] for k, v in joined.items()}
                for i in range(0, length, max_seq_length)]
    return out


def time_budget_callback(transformers, seconds):
    """A TrainerCallback that stops training after `seconds` of updates."""

    class TimeBudget(transformers.TrainerCallback):
        started = None

        def on_step_begin(self, args, state, control, **kwargs):
            if self.started is None:
                self.started = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - self.started >= seconds:
                control.should_training_stop = True
            return control

    return TimeBudget()


def main():
    args = parse_args()
    import transformers

    with open(args.bert_config_file, encoding="utf-8") as f:
        ours = json.load(f)
    config = transformers.BertConfig(**{k: ours[k] for k in BERT_CONFIG_KEYS if k in ours})
    tokenizer = transformers.BertTokenizerFast(args.vocab_file, do_lower_case=True)
    transformers.set_seed(args.seed)
    model = transformers.BertForMaskedLM(config)
    train = blocks(glob.glob(args.train_files), tokenizer, args.max_seq_length)
    training_args = transformers.TrainingArguments(
        output_dir=args.output_dir, seed=args.seed, save_strategy="no", report_to=[],
        logging_steps=100, disable_tqdm=True)
    trainer = transformers.Trainer(
        model=model, args=training_args, train_dataset=train,
        data_collator=transformers.DataCollatorForLanguageModeling(tokenizer,
                                                                   mlm_probability=0.15),
        callbacks=[time_budget_callback(transformers, args.max_train_time)])
    started = time.monotonic()
    result = trainer.train()
    seconds = time.monotonic() - started
    model.save_pretrained(args.output_dir)
    print("BENCH_JSON " + json.dumps({
        "updates": trainer.state.global_step, "train_seconds": seconds,
        "sequences": trainer.state.global_step * training_args.per_device_train_batch_size,
        "train_loss": result.training_loss, "blocks": len(train)}), flush=True)


if __name__ == "__main__":
    main()
