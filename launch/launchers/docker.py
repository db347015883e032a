"""docker/podman run of our image; horovodrun (this launcher again) inside for several GPUs."""

import os

from launchers.common import (
    CONTAINER_REPO,
    LaunchConfig,
    LaunchError,
    in_repo,
    passed_value,
    read_recipe,
    training_args,
)


def docker_command(config: LaunchConfig) -> list[str]:
    if config.hosts:
        raise LaunchError("--launcher=docker runs one node; for several use --launcher=slurm "
                          "with --container_image")
    check_output_mounted(config)
    command = [config.container_engine, "run", "--rm", "-u", config.container_user]
    if config.container_gpus:
        # Podman has no --gpus; NVIDIA's Container Toolkit gives it the GPUs as CDI devices.
        podman = os.path.basename(config.container_engine) == "podman"
        command += ["--device", "nvidia.com/gpu=all"] if podman else ["--gpus", "all"]
    command += ["--ipc=host"] if config.ipc_host else ["--shm-size=1g"]
    command += [a for limit in config.container_ulimits for a in ("--ulimit", limit)]
    command += [a for name in dict.fromkeys(config.forward_env) for a in ("-e", name)]
    for host_dir, mount in ((config.data_dir, "/data"), (config.results_dir, "/results")):
        if host_dir:
            command += ["-v", f"{os.path.abspath(host_dir)}:{mount}"]
    command.append(config.image)
    # The image's own interpreter, whatever --python says for the host.
    if config.num_gpus == 1:
        return command + ["python"] + training_args(config, 1, CONTAINER_REPO)
    # This launcher again inside, so that a stop signal (which the engine passes to it) reaches
    # the training processes rather than horovodrun.
    inner = ["python", os.path.join(CONTAINER_REPO, "launch", "launch.py"),
             "--launcher=horovodrun", f"--num_gpus={config.num_gpus}"]
    if config.recipe:
        inner.append(f"--recipe={in_repo(config.recipe, CONTAINER_REPO)}")
    for name in ("global_batch_size", "train_batch_size", "controller"):
        if getattr(config, name):
            inner.append(f"--{name}={getattr(config, name)}")
    return command + inner + config.training_flags


def check_output_mounted(config: LaunchConfig) -> None:
    """The container's files go with it (--rm): --output_dir must be in the --results_dir mount."""
    output_dir = passed_value(config.training_flags, "output_dir")
    if output_dir is None and config.recipe:
        output_dir = read_recipe(config.recipe)[0].get("output_dir")
    inside = output_dir is not None and os.path.commonpath(
        ["/results", os.path.normpath(os.path.join(CONTAINER_REPO, output_dir))]) == "/results"
    if not inside or not config.results_dir:
        raise LaunchError(f"--output_dir={output_dir} would be lost with the container: pass "
                          "--results_dir=HOST_DIR (mounted at /results) and --output_dir="
                          "/results/NAME")
