r"""Convert BERT weights between Hugging Face and Google-named TensorFlow checkpoints.

    python -m bert_tf convert hf_to_tf --hf_dir=DIR --output_dir=OUT
        DIR has config.json and model.safetensors (BertModel or BertForPreTraining keys).
        OUT (new or empty) gets model.ckpt-0 (+ `checkpoint` file), bert_config.json and, if
        DIR has one, vocab.txt. Heads absent from DIR are freshly initialised.
    python -m bert_tf convert tf_to_hf --checkpoint=CKPT --output_dir=OUT [--vocab_file=V]
        CKPT is a prefix or directory (ours or Google's bert_model.ckpt); OUT (new or empty)
        gets config.json and model.safetensors for transformers.BertForPreTraining and, with
        the vocab (--vocab_file, default vocab.txt beside CKPT), the tokenizer files that make
        transformers' AutoTokenizer split text as the vocab's tokenizer spec says
        (bert_tf/data/hf_tokenizer.py; mecab-ko needs trust_remote_code=True).

The sub-command comes first, then its --flags. The conversions are bert_tf.model.convert.
"""

import dataclasses
import json
import os
import sys

from absl import flags

import bert_tf
from bert_tf.data import hf_tokenizer, workers
from bert_tf.data.files import OutputDirError
from bert_tf.data.output_dir import new_files_in
from bert_tf.data.tokenizer_spec import TokenizerSpecError
from bert_tf.model import devices
from bert_tf.model.checkpoints import CheckpointError, resolve_checkpoint
from bert_tf.model.config import BertConfigError
from bert_tf.model.convert import (
    HF_CONFIG,
    ConversionError,
    ConversionReport,
    hf_to_tf,
    tf_to_hf,
)

# Sub-command -> (what it does, the flags it needs).
SUBCOMMANDS = {
    "hf_to_tf": ("HF directory -> checkpoint + bert_config.json", ("hf_dir", "output_dir")),
    "tf_to_hf": ("checkpoint -> HF directory", ("checkpoint", "output_dir")),
}


class ConvertUsageError(ValueError):
    """A command line that names no sub-command or lacks a flag it needs."""


@dataclasses.dataclass
class ConvertConfig:
    command: str
    output_dir: str | None = None
    hf_dir: str | None = None
    checkpoint: str | None = None
    bert_config_file: str | None = None
    vocab_file: str | None = None

    def validate(self) -> None:
        if self.command not in SUBCOMMANDS:
            raise ConvertUsageError(f"unknown sub-command {self.command!r}: give one of "
                                    f"{', '.join(SUBCOMMANDS)} first")
        for name in SUBCOMMANDS[self.command][1]:
            if not getattr(self, name):
                raise ConvertUsageError(f"{self.command} needs --{name}")


def define_flags(flag_values: flags.FlagValues) -> None:
    flags.DEFINE_string("hf_dir", None, "hf_to_tf: directory with config.json and "
                        "model.safetensors.", flag_values=flag_values)
    flags.DEFINE_string("checkpoint", None, "tf_to_hf: checkpoint prefix (e.g. "
                        "out/model.ckpt-1000) or directory (its latest).", flag_values=flag_values)
    flags.DEFINE_string("bert_config_file", None, "tf_to_hf: bert_config.json (default: next "
                        "to the checkpoint).", flag_values=flag_values)
    flags.DEFINE_string("vocab_file", None, "tf_to_hf: the model's vocab (its tokenizer spec "
                        "beside it) for the tokenizer files (default: vocab.txt next to the "
                        "checkpoint, if any).", flag_values=flag_values)
    flags.DEFINE_string("output_dir", None, "Where to write the checkpoint (hf_to_tf) or the "
                        "HF files (tf_to_hf).", flag_values=flag_values)


def usage(flag_values: flags.FlagValues) -> str:
    lines = [__doc__.strip(), "", "sub-commands:"]
    lines += [f"  {name:<10} {summary}" for name, (summary, _) in SUBCOMMANDS.items()]
    return "\n".join(lines + ["", "flags:", flag_values.get_help()])


def config_from_argv(argv: list[str]) -> ConvertConfig:
    """ConvertConfig from `SUBCOMMAND --flag=value ...`; ConvertUsageError if it cannot work.

    The flags live in their own FlagValues, not absl's global one, so that main() is a plain
    function of its arguments (the tests call it in-process) and the sub-command may precede
    them.
    """
    flag_values = flags.FlagValues()
    define_flags(flag_values)
    try:
        positional = flag_values(["convert", *argv])[1:]
    except flags.Error as e:
        raise ConvertUsageError(str(e)) from None
    if len(positional) != 1:
        raise ConvertUsageError(f"give exactly one sub-command ({'|'.join(SUBCOMMANDS)}) "
                                f"before the --flags, got {positional}")
    config = bert_tf.config_from_flags(ConvertConfig, flag_values, command=positional[0])
    config.validate()
    return config


def convert(config: ConvertConfig) -> ConversionReport:
    # checked empty and writable before the model is read
    with new_files_in(config.output_dir, "output_dir", "the converted model") as staging:
        return _convert(config, staging)


def _convert(config: ConvertConfig, output_dir: str) -> ConversionReport:
    if config.command == "hf_to_tf":
        return hf_to_tf(config.hf_dir, output_dir)
    vocab = _export_vocab(config)
    if vocab:  # refused specs fail here, before anything is written
        hf_tokenizer.vocab_tokenizer_config(vocab)
    report = tf_to_hf(config.checkpoint, output_dir, config.bert_config_file)
    if vocab:
        tokenizer = hf_tokenizer.write_hf_tokenizer(vocab, output_dir)
        path = os.path.join(output_dir, HF_CONFIG)
        with open(path, encoding="utf-8") as f:
            model_config = json.load(f)
        model_config["tokenizer_class"] = tokenizer["tokenizer_class"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(model_config, f, indent=2, sort_keys=True)
            f.write("\n")
    return report


def _export_vocab(config: ConvertConfig) -> str | None:
    """--vocab_file (it must exist), else vocab.txt beside the checkpoint, else None."""
    if config.vocab_file:
        if not os.path.isfile(config.vocab_file):
            raise ConversionError(f"--vocab_file={config.vocab_file}: no such file")
        return config.vocab_file
    beside = os.path.join(os.path.dirname(resolve_checkpoint(config.checkpoint)),
                          hf_tokenizer.VOCAB)
    return beside if os.path.isfile(beside) else None


def print_report(report: ConversionReport, output_dir: str) -> None:
    print(f"converted {len(report.converted)} tensors -> {output_dir}")
    if report.fresh:
        print(f"not in the input, left freshly initialised ({len(report.fresh)}): "
              f"{', '.join(report.fresh)}")
    if report.unused:
        print(f"input tensors not converted ({len(report.unused)}): {', '.join(report.unused)}")


def main(argv: list[str]) -> int:
    """Runs `python -m bert_tf convert` with argv (the words after `convert`); returns the
    exit code: 0 done, 1 the conversion failed, 2 a bad command line."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        flag_values = flags.FlagValues()
        define_flags(flag_values)
        print(usage(flag_values))
        return 0 if argv else 2
    try:
        config = config_from_argv(argv)
    except ConvertUsageError as e:
        print(f"convert: error: {e} (python -m bert_tf convert --help)", file=sys.stderr)
        return 2
    devices.use_one_gpu()
    try:
        report = convert(config)
    except workers.Interrupted as e:
        return workers.stopped_status(
            "convert", e, f"nothing was left in --output_dir={config.output_dir}")
    except (ConversionError, CheckpointError, BertConfigError, OutputDirError,
            hf_tokenizer.HfTokenizerError, TokenizerSpecError) as e:
        print(f"convert: error: {e}", file=sys.stderr)
        return 1
    print_report(report, config.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
