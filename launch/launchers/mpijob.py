"""Kubernetes: a Kubeflow MPI Operator MPIJob (kubeflow.org/v2beta1) running our image, one
launcher pod with the mpirun command of launchers.mpirun and --num_workers GPU worker pods."""

import dataclasses
import re

import yaml

from launchers.common import CONTAINER_REPO, LaunchConfig, LaunchError
from launchers.mpirun import mpirun_command

# Where the operator mounts the launcher's ssh keys: root's, as the NGC image runs as root.
SSH_AUTH_MOUNT = "/root/.ssh"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?")


def job_name(config: LaunchConfig) -> str:
    """--job_name as a Kubernetes name (a DNS label, '_' becomes '-')."""
    name = config.job_name.replace("_", "-")
    if not _DNS_LABEL.fullmatch(name):
        raise LaunchError(f"--job_name={config.job_name!r}: an MPIJob name is lower-case letters, "
                          "digits and '-' (at most 52), starting and ending alphanumeric")
    return name


def launcher_command(config: LaunchConfig, name: str) -> list[str]:
    """mpirun as our mpirun launcher builds it, over the worker pods' DNS names (the operator's
    headless service `name` gives each worker `name-worker-i.name`)."""
    workers = [f"{name}-worker-{i}.{name}:{config.num_gpus}" for i in range(config.num_workers)]
    inside = dataclasses.replace(config, hosts=workers, allow_run_as_root=True, python="python")
    return mpirun_command(inside, CONTAINER_REPO)


def check_mpijob_values(config: LaunchConfig) -> None:
    if config.num_workers < 1:
        raise LaunchError(f"--num_workers={config.num_workers}: an MPIJob needs at least one "
                          "worker pod")
    if config.hosts:
        raise LaunchError("--hosts is not for --launcher=mpijob: the worker pods are the hosts "
                          "(--num_workers, --num_gpus per worker)")


def mpijob_manifest(config: LaunchConfig) -> str:
    """The MPIJob as YAML."""
    check_mpijob_values(config)
    name = job_name(config)
    shared = [{"name": "shared", "mountPath": "/data", "subPath": "data"},
              {"name": "shared", "mountPath": "/results", "subPath": "results"}]
    launcher = {"name": "launcher", "image": config.image,
                "command": launcher_command(config, name),
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                "volumeMounts": shared}
    worker = {"name": "worker", "image": config.image,
              "resources": {"limits": {"nvidia.com/gpu": config.num_gpus}},
              # NCCL and the input pipeline need more than the container's 64 MiB /dev/shm.
              "volumeMounts": [*shared, {"name": "dshm", "mountPath": "/dev/shm"}]}
    volumes = [{"name": "shared", "persistentVolumeClaim": {"claimName": config.pvc_name}}]
    job = {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": config.num_gpus,
            "sshAuthMountPath": SSH_AUTH_MOUNT,
            "mpiImplementation": "OpenMPI",
            # Running pods go when the job ends; a failed job is not retried from scratch
            # (a rerun resumes from the checkpoint in /results).
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {
                    "containers": [launcher], "volumes": volumes}}},
                "Worker": {"replicas": config.num_workers, "template": {"spec": {
                    "containers": [worker],
                    "volumes": [*volumes, {"name": "dshm",
                                           "emptyDir": {"medium": "Memory"}}]}}},
            },
        },
    }
    return yaml.safe_dump(job, sort_keys=False)
