"""launch/launch.py --launcher=mpijob: the MPIJob it writes passes the MPI Operator's CRD schema
(launch/schemas, which embeds the core PodTemplateSpec schema) for the recipes' GPU counts, the
launcher pod runs our mpirun launcher's command, and bad flag combinations are refused."""

import gzip
import importlib.util
import os

import jsonschema
import pytest
import yaml
from conftest import REPO

LAUNCH = REPO / "launch" / "launch.py"
RECIPES = REPO / "launch" / "recipes"
CRD = REPO / "launch" / "schemas" / "kubeflow.org_mpijobs.yaml.gz"
DATA = ["--input_files=/data/phase1/*", "--output_dir=/results/phase1"]

_spec = importlib.util.spec_from_file_location("launch", LAUNCH)
launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launch)
from launchers.mpirun import MPI_FORWARDED_PREFIXES, mpirun_command  # noqa: E402


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    for name in list(os.environ):
        if name.startswith(MPI_FORWARDED_PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def mpijob_schema():
    with gzip.open(CRD, "rt", encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v2beta1"]
    return version["schema"]["openAPIV3Schema"]


def manifest(tmp_path, capsys, **fields):
    """(exit code, the MPIJob written, stdout, stderr)."""
    path = tmp_path / "job.yaml"
    config = launch.LaunchConfig(launcher="mpijob", manifest=str(path), image="nvcr.io/me/bert_tf",
                                 **{"training_flags": DATA, **fields})
    code = launch.launch(config)
    out, err = capsys.readouterr()
    job = yaml.safe_load(path.read_text()) if path.exists() else None
    return code, job, out, err


@pytest.mark.parametrize("recipe, workers, gpus", [
    ("bert_base_phase1", 1, 8), ("bert_large_phase1", 4, 8), ("bert_large_phase2", 2, 4)])
def test_mpijob_passes_the_crd_schema(tmp_path, capsys, mpijob_schema, recipe, workers, gpus):
    code, job, out, err = manifest(tmp_path, capsys, recipe=str(RECIPES / f"{recipe}.flags"),
                                   num_workers=workers, num_gpus=gpus)
    assert code == 0, err
    assert out.strip() == f"kubectl apply -f {tmp_path / 'job.yaml'}"
    jsonschema.validate(job, mpijob_schema)
    spec = job["spec"]
    assert spec["slotsPerWorker"] == gpus
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == workers
    (worker,) = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == gpus
    command = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["mpirun", "-np", str(workers * gpus)]


def test_the_launcher_pod_runs_our_mpirun_command(tmp_path, capsys):
    recipe = str(RECIPES / "bert_base_phase1.flags")
    _, job, _, _ = manifest(tmp_path, capsys, recipe=recipe, num_workers=2, num_gpus=8,
                            job_name="bert_tf")
    hosts = ["bert-tf-worker-0.bert-tf:8", "bert-tf-worker-1.bert-tf:8"]
    expected = mpirun_command(launch.LaunchConfig(
        launcher="mpirun", recipe=recipe, num_gpus=8, hosts=hosts, allow_run_as_root=True,
        training_flags=DATA), "/workspace/bert_tf")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"] == expected
    assert "/workspace/bert_tf/run_pretraining.py" in expected
    assert "--num_accumulation_steps=16" in expected  # 65536 / (256 x 16 GPUs)


def test_a_schema_violation_would_be_caught(tmp_path, capsys, mpijob_schema):
    """The schema fails a wrong manifest: the MPIJob's own field and the core container's."""
    _, job, _, _ = manifest(tmp_path, capsys, recipe=str(RECIPES / "bert_base_phase1.flags"))
    job["spec"]["slotsPerWorker"] = "8"
    with pytest.raises(jsonschema.ValidationError, match="slotsPerWorker|'8'"):
        jsonschema.validate(job, mpijob_schema)
    job["spec"]["slotsPerWorker"] = 8
    del job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(jsonschema.ValidationError, match="'name' is a required property"):
        jsonschema.validate(job, mpijob_schema)


@pytest.mark.parametrize("fields, named", [
    ({"num_workers": 0}, "--num_workers=0"),
    ({"num_gpus": 0}, "--num_gpus"),
    ({"hosts": ["node1"]}, "--hosts"),
    ({"job_name": "Bert Job"}, "--job_name"),
    ({"recipe": str(RECIPES / "bert_base_phase1.flags"), "num_workers": 3, "num_gpus": 8},
     "--global_batch_size=65536 does not split evenly over 24 GPUs"),
])
def test_bad_flags_are_refused_naming_the_flag(tmp_path, capsys, fields, named):
    code, job, out, err = manifest(tmp_path, capsys, **fields)
    assert code == 2
    assert named in err
    assert job is None and out == ""
