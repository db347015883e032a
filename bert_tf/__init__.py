"""bert_tf: pretrain BERT from scratch with TensorFlow 2 and Horovod."""

import dataclasses
import os

from absl import app, flags

__version__ = "0.1.0"


def use_onednn_by_default() -> None:
    """Turns TensorFlow's oneDNN CPU kernels on unless the environment says otherwise.

    Call it before TensorFlow is imported (TF reads the variable once, at import); the entry
    points do. TF enables oneDNN by default only on CPUs with AVX512_VNNI/AVX512_BF16/AMX, yet
    on an AVX2-only CPU it runs a BERT-base forward/backward about 1.2x faster than the Eigen
    kernels (bench/compare_train.py), and the CPU bfloat16 mixed-precision rewrite
    (--precision=amp) exists only with it. An explicit TF_ENABLE_ONEDNN_OPTS=0 wins.
    """
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def config_from_flags(config_class, flag_values, **values):
    """The dataclass `config_class` with each field read from the parsed absl flag of the
    same name, except those given in `values`: how every entry point turns its flags into
    the configuration its library functions take.

    Args:
      config_class: a dataclass whose field names are flag names.
      flag_values: parsed absl FlagValues (e.g. absl.flags.FLAGS).
      **values: fields that are not flags (e.g. positional arguments).

    Returns:
      An instance of config_class.
    """
    for field in dataclasses.fields(config_class):
        if field.name not in values:
            values[field.name] = flag_values[field.name].value
    return config_class(**values)


def run_command(define_flags, config, run) -> None:
    """The entry point of every command: defines its absl flags, parses them into its
    configuration and exits with what `run` returns.

    Args:
      define_flags: defines the command's flags on absl's FLAGS.
      config: the dataclass the flags become (see config_from_flags), or a function from
        the parsed FlagValues to the configuration.
      run: takes the configuration; returns the exit status.
    """
    def main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments {argv[1:]}; all options are --flags")
        if dataclasses.is_dataclass(config):
            return run(config_from_flags(config, flags.FLAGS))
        return run(config(flags.FLAGS))

    define_flags()
    app.run(main)
