"""Pretrain BERT: parses the flags (bert_tf/train/config.py) and runs bert_tf.train.loop.

    horovodrun -np 4 python run_pretraining.py --flagfile=launch/... --output_dir=...

Rerunning the same command resumes from the latest checkpoint in --output_dir.
"""

from absl import app, flags

import bert_tf

bert_tf.use_onednn_by_default()  # before TensorFlow is imported
from bert_tf.train import config, loop  # noqa: E402

config.define_pretraining_flags()
flags.adopt_module_key_flags(config)  # so --help lists them


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    loop.main(config.pretraining_config_from_flags(flags.FLAGS))


if __name__ == "__main__":
    app.run(main)
