"""`python -m bert_tf COMMAND [--flags]`: the short form of every command-line tool.

    python -m bert_tf format_text --input_files='books/*.txt' --output_dir=text
    python -m bert_tf doctor --flagfile=launch/recipes/bert_base_phase1.flags

Each command is a module with its own absl flags (`python -m bert_tf COMMAND --help`);
`python -m bert_tf.data.format_text` etc. work as well.
"""

import runpy
import sys

import bert_tf

COMMANDS = {
    "format_text": ("bert_tf.data.format_text", "raw text -> one sentence per line, shards"),
    "wikipedia": ("bert_tf.data.wikipedia", "Wikipedia XML dumps -> documents, shards"),
    "prepare_dataset": ("bert_tf.data.dataset",
                        "dumps/text -> phase-1 and phase-2 TFRecords, resumable"),
    "build_vocab": ("bert_tf.data.build_vocab",
                    "learn a vocab (WordPiece, MeCab, Mecab-ko, SentencePiece) and its spec"),
    "tokenize": ("bert_tf.tools.tokenize_text", "show how a vocab's tokenizer splits text"),
    "convert": ("bert_tf.tools.convert", "Hugging Face <-> Google-format checkpoints"),
    "doctor": ("bert_tf.tools.doctor", "preflight the machine and a training recipe"),
    "estimate": ("bert_tf.tools.estimate", "time, cost and memory of a run"),
    "finetune": ("bert_tf.tools.finetune", "fine-tune and evaluate on a task (POS, GLUE, TSV)"),
    "export": ("bert_tf.tools.export",
               "a checkpoint as a SavedModel, KerasHub preset or ONNX model"),
    "predict": ("bert_tf.tools.predict", "fill [MASK] tokens with a checkpoint"),
    "analyze_attention": ("bert_tf.analysis.analyze_attention", "what the attention heads do"),
    "probe_syntax": ("bert_tf.analysis.probe_syntax",
                     "how much syntax attention and word vectors hold (UAS, UPOS probes)"),
    "demo": ("bert_tf.tools.demo", "pretrain a small BERT on Gutenberg books, end to end"),
}


def usage() -> str:
    lines = ["usage: python -m bert_tf COMMAND [--flags]   (COMMAND --help for its flags)", ""]
    lines += [f"  {name:<18} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if len(argv) >= 2 else 2)
    if argv[1] not in COMMANDS:
        print(f"python -m bert_tf: unknown command {argv[1]!r}\n\n{usage()}", file=sys.stderr)
        sys.exit(2)
    module, _ = COMMANDS[argv[1]]
    bert_tf.use_onednn_by_default()
    sys.argv = [f"python -m bert_tf {argv[1]}", *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
