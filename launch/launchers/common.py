"""What every launcher shares: the launch's settings (LaunchConfig), the recipe, and the
run_pretraining.py command line with the accumulation steps that keep the global batch."""

import dataclasses
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTAINER_REPO = "/workspace/bert_tf"  # WORKDIR of our Dockerfile
# docker run --ulimit values NGC recommends: unlimited pinned memory, 64 MiB stacks.
NGC_ULIMITS = ("memlock=-1", "stack=67108864")


@dataclasses.dataclass
class LaunchConfig:
    """What to start: the launcher's flags and the run_pretraining flags passed through."""

    launcher: str
    recipe: str | None = None
    num_gpus: int = 1
    num_nodes: int = 1
    hosts: list[str] | None = None
    global_batch_size: int | None = None
    train_batch_size: int | None = None
    controller: str | None = None
    python: str = "python"
    allow_run_as_root: bool = dataclasses.field(default_factory=lambda: os.geteuid() == 0)
    image: str = "bert_tf"
    container_engine: str = "docker"
    container_gpus: bool = True
    container_user: str = dataclasses.field(default_factory=lambda: f"{os.getuid()}:{os.getgid()}")
    container_ulimits: list[str] = dataclasses.field(default_factory=lambda: list(NGC_ULIMITS))
    ipc_host: bool = True
    data_dir: str | None = None
    results_dir: str | None = None
    job_name: str = "bert_tf"
    time_limit: str = "24:00:00"
    partition: str | None = None
    container_image: str | None = None
    container_mounts: str | None = None
    sbatch_script: str | None = None
    dry_run: bool = False
    network_interface: list[str] | None = None
    ssh_identity_file: str | None = None
    ssh_port: int | None = None
    forward_env: list[str] = dataclasses.field(default_factory=list)
    min_np: int | None = None
    start_np: int | None = None
    max_np: int | None = None
    host_discovery_script: str | None = None
    num_workers: int = 1
    pvc_name: str = "bert-tf-shared"
    manifest: str | None = None
    ray_address: str | None = None
    ray_cpus_per_worker: int = 1
    ray_gpus_per_worker: int | None = None
    # Flags this launcher does not define, for run_pretraining.py (after the recipe: they win).
    training_flags: list[str] = dataclasses.field(default_factory=list)


class LaunchError(ValueError):
    """A launch that cannot work; the message names the flag and the fix."""


def read_recipe(path) -> tuple[dict, int | None]:
    """The --name=value flags of a flagfile and its `# global_batch_size: N` line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise LaunchError(f"--recipe={path}: cannot read it ({e.strerror})") from None
    values, global_batch = {}, None
    for line in lines:
        line = line.strip()
        match = re.fullmatch(r"#\s*global_batch_size:\s*(\d+)", line)
        if match:
            global_batch = int(match.group(1))
        elif line.startswith("--"):
            name, _, value = line[2:].partition("=")
            values[name] = value
    return values, global_batch


def passed_value(args, name):
    """The last --name=value among pass-through args (absl: the last one wins)."""
    value = None
    for arg in args:
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value


def accumulation_steps(global_batch_size, train_batch_size, world_size) -> int:
    if global_batch_size % world_size:
        raise LaunchError(f"--global_batch_size={global_batch_size} does not split evenly over "
                          f"{world_size} GPUs: use a GPU count that divides it, or set "
                          "--global_batch_size")
    per_micro_batch = train_batch_size * world_size
    if global_batch_size % per_micro_batch:
        fitting = [b for b in range(1, 2 * train_batch_size + 1)
                   if global_batch_size % (b * world_size) == 0]
        hint = (f"; the nearest that does is --train_batch_size="
                f"{min(fitting, key=lambda b: abs(b - train_batch_size))}" if fitting else "")
        raise LaunchError(
            f"--global_batch_size={global_batch_size} is not a multiple of train_batch_size x "
            f"GPUs = {train_batch_size} x {world_size} = {per_micro_batch}{hint}")
    return global_batch_size // per_micro_batch


def training_args(config: LaunchConfig, world_size, repo=REPO) -> list[str]:
    """run_pretraining.py and its flags: the recipe, then the computed batch flags,
    then the user's own flags (which win)."""
    args = []
    recipe_values, recipe_global = {}, None
    if config.recipe:
        recipe_values, recipe_global = read_recipe(config.recipe)
        args.append(f"--flagfile={in_repo(config.recipe, repo)}")
        bert_config = recipe_values.get("bert_config_file")
        if (repo == REPO and bert_config and not os.path.isfile(bert_config)
                and passed_value(config.training_flags, "bert_config_file") is None):
            raise LaunchError(f"--recipe={config.recipe} names --bert_config_file={bert_config}, "
                              f"which is not found from {os.getcwd()}: run from the repository "
                              f"root ({REPO}) or pass --bert_config_file")
    batch = config.train_batch_size or passed_value(config.training_flags, "train_batch_size") \
        or recipe_values.get("train_batch_size")
    if config.train_batch_size:
        args.append(f"--train_batch_size={config.train_batch_size}")
    global_batch = config.global_batch_size or recipe_global
    if config.host_discovery_script:
        args += elastic_batch_args(config, global_batch, batch)
    elif config.launcher == "ray" and config.min_np:
        args += elastic_batch_args(config, global_batch, batch, "--min_np (elastic Ray)")
    elif global_batch and passed_value(config.training_flags, "num_accumulation_steps") is None:
        if not batch:
            raise LaunchError("--global_batch_size needs a --train_batch_size (flag or recipe)")
        steps = accumulation_steps(global_batch, int(batch), world_size)
        args.append(f"--num_accumulation_steps={steps}")
    return [in_repo(os.path.join(REPO, "run_pretraining.py"), repo)] + args + config.training_flags


def elastic_batch_args(config: LaunchConfig, global_batch, batch,
                       mode="--host_discovery_script (elastic)") -> list[str]:
    """--elastic and the global batch it keeps; checked at the smallest and largest world."""
    if not global_batch or not batch:
        raise LaunchError(f"{mode} needs --global_batch_size and "
                          "--train_batch_size (flags or recipe): the global batch is kept at "
                          "every world size by adjusting the accumulation steps")
    for world_size in {config.min_np, config.max_np} - {None}:
        accumulation_steps(global_batch, int(batch), world_size)
    return ["--elastic", f"--global_batch_size={global_batch}"]


def in_repo(path, repo):
    """`path` as seen from a checkout at `repo` (the container's copy for docker)."""
    absolute = os.path.abspath(path)
    if repo == REPO:
        return absolute
    if os.path.commonpath([absolute, REPO]) != REPO:
        raise LaunchError(f"{path} is outside the repository, so the image does not have it: "
                          "copy it into launch/recipes/ and rebuild, or mount it")
    return os.path.join(repo, os.path.relpath(absolute, REPO))


_SLOTS = re.compile(r"[0-9]+")


def host_slots(config: LaunchConfig) -> list[tuple[str, int]]:
    """--hosts as (host, ranks): a host's own `host:slots` (the form doctor --hosts takes),
    else --num_gpus; localhost when unset."""
    slots = []
    for entry in config.hosts or ["localhost"]:
        host, colon, count = entry.partition(":")
        if not host or colon and not (_SLOTS.fullmatch(count) and int(count) > 0):
            raise LaunchError(f"--hosts: {entry!r} is not host or host:slots (e.g. node1:8)")
        slots.append((host, int(count) if colon else config.num_gpus))
    return slots


def host_list(config: LaunchConfig) -> tuple[str, int]:
    """(the -H value of horovodrun and mpirun, the ranks it starts)."""
    slots = host_slots(config)
    return ",".join(f"{host}:{count}" for host, count in slots), sum(c for _, c in slots)


def across_hosts(config: LaunchConfig) -> bool:
    """Whether ranks run on other nodes than this one."""
    return any(host not in ("localhost", "127.0.0.1") for host, _ in host_slots(config))


# Characters that ssh's command line cannot carry: Open MPI splits plm_rsh_args at spaces
# without honouring quotes (checked with Open MPI 4.1.4 and a logging plm_rsh_agent), and
# horovodrun puts the path unquoted into a shell command (horovod/runner/util/remote.py).
_UNSAFE_IN_SSH_ARGS = re.compile(r"[\s'\"\\$`;&|<>()*?]")


def identity_file(config: LaunchConfig) -> str | None:
    """--ssh_identity_file, refused when ssh's command line cannot carry it."""
    key = config.ssh_identity_file
    if key and _UNSAFE_IN_SSH_ARGS.search(key):
        raise LaunchError(f"--ssh_identity_file={key!r}: mpirun and horovodrun split ssh's "
                          "options at spaces and pass them through a shell, so the path must "
                          "have no spaces, quotes or shell characters: link it from such a "
                          "path (ln -s) or name it as IdentityFile in ~/.ssh/config instead")
    return key
