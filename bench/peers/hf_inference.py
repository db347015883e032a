"""Peer row of bench/inference.py: Hugging Face `pipeline("text-classification")` on PyTorch,
a BERT-base BertForSequenceClassification with random weights and the uncased vocab's fast
tokenizer, truncating to SEQ tokens. Runs in the `hf` venv (bench/setup_peers.sh) and answers
the parent's timing requests like our rows (inference.serve_requests).

    python bench/peers/hf_inference.py TEXTS.json THREADS SEQ
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402
import inference  # noqa: E402


def main(texts_file: str, threads: str, seq: str) -> None:
    import torch
    import transformers

    torch.set_num_threads(int(threads))
    torch.manual_seed(0)
    shape = {k: v for k, v in common.BERT_BASE.items() if k != "name"}
    model = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=common.VOCAB_SIZE, num_labels=2, **shape)).eval()
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(inference.VOCAB),
                                               do_lower_case=True)
    classify = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                     device="cpu")
    texts = json.loads(Path(texts_file).read_text())

    def run(batch):
        with torch.inference_mode():
            return classify(batch, batch_size=len(batch), truncation=True, max_length=int(seq))
    inference.serve_requests(run, texts)


if __name__ == "__main__":
    main(*sys.argv[1:])
