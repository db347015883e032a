"""Fine-tune a pretrained BERT on a task; the same as `python -m bert_tf finetune`
(bert_tf/tools/finetune.py has the flags).

    horovodrun -np 4 python run_finetuning.py --task_name=pos --data_dir=ud/ --do_train \
        --do_eval --bert_config_file=runs/phase2/bert_config.json \
        --init_checkpoint=runs/phase2 --vocab_file=vocab.txt --output_dir=runs/pos
"""

import bert_tf

bert_tf.use_onednn_by_default()  # before TensorFlow is imported
from bert_tf.tools import finetune  # noqa: E402
from bert_tf.train import finetune_config  # noqa: E402

if __name__ == "__main__":
    bert_tf.run_command(finetune_config.define_finetuning_flags,
                        finetune_config.finetuning_config_from_flags, finetune.run,
                        errors=finetune.finetune.USER_ERRORS)
