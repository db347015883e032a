"""mpirun (Open MPI) with the binding and environment forwarding Horovod documents."""

import os

from launchers.common import (
    REPO,
    LaunchConfig,
    across_hosts,
    host_list,
    identity_file,
    training_args,
)

# Forwarded to every rank by mpirun (Horovod's documented set).
MPI_FORWARDED_ENV = ("NCCL_DEBUG", "LD_LIBRARY_PATH", "PATH")
# Also forwarded by mpirun when set where it starts, since ranks on other nodes would not see
# them: NCCL's, Horovod's, UCX's tuning (NCCL_IB_HCA, HOROVOD_FUSION_THRESHOLD, UCX_TLS, ...),
# TensorFlow's and XLA's settings (XLA_FLAGS, which `doctor` may advise, TF_CPP_MIN_LOG_LEVEL,
# ...), the OpenMP/oneDNN thread settings and CUDA's. horovodrun forwards the whole environment
# but CUDA_VISIBLE_DEVICES and a few names (horovod/runner/common/util/env.py IGNORE_REGEXES);
# mpirun gets these named families instead, so that a login shell's own variables (SSH_*,
# HOSTNAME, DISPLAY, OMPI_*) do not override the other nodes'.
MPI_FORWARDED_PREFIXES = ("NCCL_", "HOROVOD_", "UCX_", "TF_", "XLA_", "OMP_", "KMP_", "CUDA_",
                          "PYTHONPATH")
# Each node's own: Slurm or the node's scheduler sets it.
MPI_NOT_FORWARDED = ("CUDA_VISIBLE_DEVICES",)
# Interfaces that are up on a node but route nowhere: Open MPI and NCCL hang on them (Horovod's
# docs/mpi.rst, "Hangs due to non-routed network interfaces", excludes these two).
NON_ROUTED_INTERFACES = "lo,docker0"


def mpirun_command(config: LaunchConfig, repo=REPO) -> list[str]:
    """The mpirun command; `repo`: where the nodes have the checkout (the image's for mpijob)."""
    hosts, world = host_list(config)
    command = ["mpirun", "-np", str(world), "-H", hosts]
    if config.allow_run_as_root:
        command.append("--allow-run-as-root")
    # No core binding (each rank runs many threads), ranks fill a host's slots in
    # order, TCP/shared-memory byte transfer layer (not the openib one).
    command += ["-bind-to", "none", "-map-by", "slot"]
    # CPU affinity: not by mpirun but by each rank, to the cores of its GPU's NUMA node
    # (bert_tf/model/devices.py, as NVIDIA's TF2 run_pretraining.py does).
    for name in MPI_FORWARDED_ENV:
        command += ["-x", name]
    command += ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
    command += mpirun_cluster_args(config)
    return command + [config.python] + training_args(config, world, repo)


def mpirun_cluster_args(config: LaunchConfig) -> list[str]:
    """Open MPI's options for ranks on other nodes: the environment they need (mpirun
    forwards only -x names), the interface for its byte transfer and out-of-band layers,
    and how its daemons are started over ssh."""
    tuning = [name for name in sorted(os.environ) if name.startswith(MPI_FORWARDED_PREFIXES)
              and name not in MPI_NOT_FORWARDED]
    args = [a for name in dict.fromkeys([*config.forward_env, *tuning])
            if name not in MPI_FORWARDED_ENV for a in ("-x", name)]
    if config.network_interface:
        interfaces = ",".join(config.network_interface)
        # NCCL picks its own interface otherwise (horovodrun --network-interfaces sets this).
        if "NCCL_SOCKET_IFNAME" not in os.environ:
            args += ["-x", f"NCCL_SOCKET_IFNAME={interfaces}"]
        args += ["-mca", "btl_tcp_if_include", interfaces,
                 "-mca", "oob_tcp_if_include", interfaces]
    elif across_hosts(config):
        if "NCCL_SOCKET_IFNAME" not in os.environ:
            args += ["-x", f"NCCL_SOCKET_IFNAME=^{NON_ROUTED_INTERFACES}"]
        args += ["-mca", "btl_tcp_if_exclude", NON_ROUTED_INTERFACES]
    key = identity_file(config)
    ssh = (["-i", key] if key else []) + (["-p", str(config.ssh_port)] if config.ssh_port else [])
    if ssh:
        args += ["-mca", "plm_rsh_args", " ".join(ssh)]
    return args
