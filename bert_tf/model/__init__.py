"""BERT as plain tf.Modules under Google's names, its config, checkpoints and conversions.

Knows nothing of Horovod, files of training data or flags.
"""
