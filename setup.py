"""bert_tf package. Dependencies are pinned in install/requirements.txt and
installed by install/setup_env.sh (Horovod must be built from source against
the installed TensorFlow, which pip's resolver cannot do)."""

from setuptools import find_packages, setup

setup(
    name="bert_tf",
    version="0.1.0",
    description="Pretrain BERT from scratch with TensorFlow 2 and Horovod",
    packages=find_packages(include=["bert_tf", "bert_tf.*"]),
    package_data={"bert_tf.analysis": ["attention.html"]},
    py_modules=["run_pretraining", "create_pretraining_data"],
    python_requires=">=3.10",
)
