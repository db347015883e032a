"""Fine-tune a pretrained BERT on a task (`python -m bert_tf finetune` or run_finetuning.py):
parses the flags (bert_tf/train/finetune_config.py) and runs bert_tf.train.finetune.

    python -m bert_tf finetune --task_name=pos --data_dir=ud/ --do_train --do_eval \
        --bert_config_file=runs/phase2/bert_config.json --init_checkpoint=runs/phase2 \
        --vocab_file=vocab.txt --output_dir=runs/pos
    horovodrun -np 4 python run_finetuning.py ...   # the same, data parallel
"""

from absl import app, flags

from bert_tf.train import finetune, finetune_config

finetune_config.define_finetuning_flags()
flags.adopt_module_key_flags(finetune_config)  # so --help lists them


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    finetune.main(finetune_config.finetuning_config_from_flags(flags.FLAGS))


if __name__ == "__main__":
    app.run(main)
