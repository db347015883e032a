# Two commands do everything: `make demo` and `make test` (see README.md).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.bert_tf-installed
# The NGC image's TensorFlow (Dockerfile) in a second venv, for `make test-ngc`.
NGC_VENV := .venv-tf2.17
NGC_STAMP := $(NGC_VENV)/.bert_tf-installed
PATCH := install/horovod-0.28.1-tf2.21.patch

.PHONY: demo test test-ngc test-cluster test-container lint bench convergence time-to-quality venv clean

venv: $(STAMP)

$(STAMP): install/setup_env.sh install/horovod_wheel.sh install/requirements.txt install/requirements-export.txt $(PATCH) setup.py
	bash install/setup_env.sh

$(NGC_STAMP): install/setup_env.sh install/horovod_wheel.sh install/requirements.txt install/requirements-tf2.17.txt $(PATCH) setup.py
	bash install/setup_env.sh install/requirements-tf2.17.txt $(NGC_VENV)

# Our code must also run on Python 3.10 (setup.py); no 3.10 interpreter here, so
# ruff (target-version py310: syntax) and vermin (standard library names) check it.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/vermin -q -t=3.10- --no-tips --violations --eval-annotations \
	  bert_tf tests bench launch *.py
	$(VENV)/bin/hadolint Dockerfile

# pytest-xdist: a worker per core (each holds a TensorFlow, hence at most 4), whole files per
# worker so that a module's fixtures are made once (tests/README.md, "Speed").
XDIST := -n auto --maxprocesses=4 --dist loadfile

test: lint
	$(PY) -m pytest -q $(XDIST) tests --ignore=tests/test_cluster.py --ignore=tests/test_container.py \
	  --ignore=tests/test_ray.py

# TensorFlow 2.17 (the NGC image's) on Python 3.11: the tests marked `ngc`, which cover
# the TensorFlow and Horovod APIs we use (see README.md, "Supported TensorFlow").
test-ngc: $(NGC_STAMP)
	$(NGC_VENV)/bin/python -m pytest -q $(XDIST) -m ngc tests --ignore=tests/test_cluster.py \
	  --ignore=tests/test_container.py

# Two nodes x two ranks on network namespaces with sshd (needs root); see docs/running.md. And
# launch.py --launcher=ray on a two-node local Ray cluster on loopback (tests/test_ray.py).
test-cluster: venv
	$(PY) -m pytest -q tests/test_cluster.py tests/test_ray.py

# The job in NGC's container: our Dockerfile on a CPU stand-in for NGC's image, run with podman
# (needs root; installs podman, runc, debootstrap); docs/running.md, "Docker".
test-container: venv
	CONTAINERS_CONF=$(CURDIR)/install/podman-containers.conf $(PY) -m pytest -q tests/test_container.py

demo: venv
	$(PY) -m bert_tf demo

bench: venv
	$(PY) bench/run_all.py

# Not part of `make test`: learning curves of bert_tf (1 and 2 ranks), Hugging Face and Model
# Garden from the same weights and records (24 min on the 2-core CPU; bench/README.md).
convergence: venv
	$(PY) bench/convergence.py

# Not part of `make test` (bench/README.md, "Time to quality"): the downstream score of the
# classic and budget recipes, each budget change alone, HF run_mlm and random init after 2.5
# and 10 minutes of pretraining (about 80 min per round on the 2-core CPU).
time-to-quality: venv
	bash bench/setup_peers.sh hf
	$(PY) bench/time_to_quality.py --budgets=150,600 --rounds=1

clean:
	rm -rf $(VENV) $(NGC_VENV) demo_output bench/results
