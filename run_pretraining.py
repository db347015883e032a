"""Pretrain BERT: parses the flags (bert_tf/flags.py) and runs bert_tf.training.

    horovodrun -np 4 python run_pretraining.py --flagfile=launch/... --output_dir=...

Rerunning the same command resumes from the latest checkpoint in --output_dir.
"""

from absl import app, flags

from bert_tf import flags as pretraining_flags
from bert_tf import training

pretraining_flags.define_pretraining_flags()
flags.adopt_module_key_flags(pretraining_flags)  # so --help lists them


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    training.main(pretraining_flags.pretraining_config_from_flags(flags.FLAGS))


if __name__ == "__main__":
    app.run(main)
