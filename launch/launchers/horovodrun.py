"""horovodrun: one node, several (--hosts), or elastic (--host_discovery_script)."""

import os

from launchers.common import (
    REPO,
    LaunchConfig,
    LaunchError,
    host_list,
    identity_file,
    training_args,
)


def horovodrun_command(config: LaunchConfig, repo=REPO, python=None) -> list[str]:
    if config.host_discovery_script:
        return horovodrun_elastic_command(config, repo, python)
    hosts, world = host_list(config)
    command = ["horovodrun", "-np", str(world), "-H", hosts]
    if config.controller:
        command.append(f"--{config.controller}")
    command += horovodrun_cluster_args(config)
    return command + [python or config.python] + training_args(config, world, repo)


def horovodrun_elastic_command(config: LaunchConfig, repo=REPO, python=None) -> list[str]:
    """horovodrun in elastic mode (Gloo only): hosts from the discovery script, starting once
    --min_np slots are listed."""
    if config.hosts:
        raise LaunchError("--hosts and --host_discovery_script exclude each other: in an elastic "
                          "run the script lists the hosts")
    if config.controller == "mpi":
        raise LaunchError("--host_discovery_script (elastic Horovod) needs --controller=gloo")
    start = config.start_np or config.min_np
    if not config.min_np or not config.min_np <= start <= (config.max_np or start):
        raise LaunchError(f"--host_discovery_script needs --min_np >= 1 and --min_np <= "
                          f"--start_np <= --max_np (got --min_np={config.min_np}, --start_np="
                          f"{config.start_np}, --max_np={config.max_np})")
    script = checked_discovery_script(config.host_discovery_script)
    command = ["horovodrun", "-np", str(start), "--min-np", str(config.min_np)]
    if config.max_np:
        command += ["--max-np", str(config.max_np)]
    command += ["--host-discovery-script", script, "--gloo"]
    command += horovodrun_cluster_args(config)
    return command + [python or config.python] + training_args(config, config.min_np, repo)


def horovodrun_cluster_args(config: LaunchConfig) -> list[str]:
    """horovodrun's options for ranks on other nodes: interface and ssh."""
    args = []
    if config.network_interface:
        args += ["--network-interfaces", ",".join(config.network_interface)]
    key = identity_file(config)
    if key:
        args += ["--ssh-identity-file", key]
    if config.ssh_port:
        args += ["-p", str(config.ssh_port)]
    return args


def checked_discovery_script(path: str) -> str:
    """The absolute path of --host_discovery_script, an executable file (horovodrun runs it
    every second; a missing one would only show as a run that never starts)."""
    absolute = os.path.abspath(path)
    if not os.path.isfile(absolute):
        raise LaunchError(f"--host_discovery_script={path}: no such file; give the script "
                          "that prints the available hosts, one 'host:slots' a line")
    if not os.access(absolute, os.X_OK):
        raise LaunchError(f"--host_discovery_script={path} is not executable: chmod +x it "
                          "(horovodrun runs it directly)")
    return absolute
