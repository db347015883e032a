"""Fine-tune a pretrained BERT on a task (`python -m bert_tf finetune` or run_finetuning.py):
parses the flags (bert_tf/train/finetune_config.py) and runs bert_tf.train.finetune.

    python -m bert_tf finetune --task_name=pos --data_dir=ud/ --do_train --do_eval \
        --bert_config_file=runs/phase2/bert_config.json --init_checkpoint=runs/phase2 \
        --vocab_file=vocab.txt --output_dir=runs/pos
    horovodrun -np 4 python run_finetuning.py ...   # the same, data parallel
"""

import bert_tf
from bert_tf.train import finetune, finetune_config


def run(config: finetune_config.FinetuningConfig) -> int:
    finetune.run(config)
    return 0


if __name__ == "__main__":
    bert_tf.run_command(finetune_config.define_finetuning_flags,
                        finetune_config.finetuning_config_from_flags, run,
                        errors=finetune.USER_ERRORS)
