"""bert_tf: pretrain BERT from scratch with TensorFlow 2 and Horovod."""

__version__ = "0.1.0"
