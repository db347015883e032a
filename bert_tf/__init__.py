"""bert_tf: pretrain BERT from scratch with TensorFlow 2 and Horovod."""

import dataclasses
import os
import sys

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


def flag_defaults(config_class) -> dict:
    """{field: default} of a config dataclass, None for a field without one (a flag that
    has no default): what the shared flag groups (define_*_flags) take, so each command's
    flags default to its own config's values."""
    return {field.name: None if field.default is dataclasses.MISSING else field.default
            for field in dataclasses.fields(config_class)}


def run_command(define_flags, config, run, errors=(), error_status=1, positional=None) -> None:
    """The entry point of every command: defines its absl flags, parses them into its
    configuration and exits with what `run` returns, or with `COMMAND: error: ...` on
    stderr and error_status when `run` or the parsing into the configuration raises one of
    `errors` (bad input, said in words).

    Args:
      define_flags: defines the command's flags on absl's FLAGS.
      config: the dataclass the flags become (see config_from_flags), or a function from
        the parsed FlagValues to the configuration (it may raise one of `errors`).
      run: takes the configuration; returns the exit status.
      errors: exception types whose message is the whole story for the user.
      error_status: the exit status for them.
      positional: the field of a dataclass `config` that takes the command's positional
        arguments (a list); None: the command takes none.
    """
    def main(argv):
        if len(argv) > 1 and positional is None:
            raise app.UsageError(f"unexpected arguments {argv[1:]}; all options are --flags")
        try:
            if dataclasses.is_dataclass(config):
                parsed = config_from_flags(
                    config, flags.FLAGS, **({positional: argv[1:]} if positional else {}))
            else:
                parsed = config(flags.FLAGS)
            return run(parsed)
        except errors as e:
            print(f"{command_name()}: error: {e}", file=sys.stderr)
            return error_status

    defined_before = set(flags.FLAGS)
    define_flags()
    _list_in_help(set(flags.FLAGS) - defined_before)
    app.run(main)


def _list_in_help(names) -> None:
    """--help lists the key flags of the program's main module; a command's flags defined
    elsewhere (the shared groups, a config module) are made its key flags so it lists them."""
    for name in names:
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])


def command_name() -> str:
    """The command being run: `estimate` for `python -m bert_tf estimate`, for
    `python -m bert_tf.tools.estimate` and for `.../estimate.py`; `prepare_dataset` for
    `.../data/dataset.py` (the name the command has in bert_tf.__main__.COMMANDS)."""
    script = os.path.abspath(sys.argv[0].split()[-1])
    from bert_tf.__main__ import COMMANDS  # its commands run under its guard, not at import

    for command, (module, _) in COMMANDS.items():
        path = os.path.join(*module.split(".")) + ".py"
        if script.endswith(os.sep + path):
            return command
    return os.path.basename(script).removesuffix(".py")
