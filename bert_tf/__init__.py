"""bert_tf: pretrain BERT from scratch with TensorFlow 2 and Horovod."""

import os

__version__ = "0.1.0"

# Before TensorFlow loads (it reads this once): TF turns its oneDNN CPU kernels on by default
# only on CPUs with AVX512_VNNI/AVX512_BF16/AMX, yet on an AVX2-only CPU they run a BERT-base
# forward/backward about 1.2x faster than the default Eigen kernels (bench/compare_train.py),
# and the CPU bfloat16 mixed-precision rewrite (--precision=amp) exists only with them.
# An explicit TF_ENABLE_ONEDNN_OPTS=0 in the environment wins.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
