#!/usr/bin/env python3
r"""Starts run_pretraining.py on one or many GPUs/nodes, or prints the command.

    launch/launch.py --launcher=horovodrun --num_gpus=8 \
        --recipe=launch/recipes/bert_large_phase1.flags \
        --input_files='/data/phase1/*.tfrecord' --output_dir=/results/phase1 --dry_run

Launchers: horovodrun (one node, or several with --hosts), mpirun (Open MPI with
the binding and environment forwarding Horovod documents), slurm (writes an
sbatch script that starts one task per GPU with srun), docker (docker run of our
image, horovodrun inside). Every option is a named flag; flags this launcher does
not define (--input_files, --output_dir, --init_checkpoint, ...) are passed to
run_pretraining.py after the recipe, so they override it.

A recipe is a run_pretraining flagfile. Its `# global_batch_size: N` line (or
--global_batch_size) sets the sequences per optimizer update; the launcher sets
--num_accumulation_steps = global_batch_size / (train_batch_size * total GPUs).
"""

import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import psutil
from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTAINER_REPO = "/workspace/bert_tf"  # WORKDIR of our Dockerfile
LAUNCHERS = ("horovodrun", "mpirun", "slurm", "docker")
# Forwarded to every rank by mpirun (Horovod's documented set).
MPI_FORWARDED_ENV = ("NCCL_DEBUG", "LD_LIBRARY_PATH", "PATH")
# Also forwarded by mpirun when set where it starts: NCCL's and Horovod's tuning (NCCL_IB_HCA,
# NCCL_SOCKET_IFNAME, HOROVOD_FUSION_THRESHOLD, ...), which ranks on other nodes would not see.
MPI_FORWARDED_PREFIXES = ("NCCL_", "HOROVOD_")
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
    # Flags this launcher does not define, for run_pretraining.py (after the recipe: they win).
    training_flags: list[str] = dataclasses.field(default_factory=list)


def define_flags() -> None:
    """Defines the launcher's flags (defaults from LaunchConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(LaunchConfig)}
    flags.DEFINE_enum("launcher", None, LAUNCHERS, "How to start the ranks.")
    flags.DEFINE_string("recipe", None, "run_pretraining flagfile (launch/recipes/*.flags).")
    flags.DEFINE_integer("num_gpus", d["num_gpus"],
                         "Ranks per node: one per GPU (on CPU, processes).")
    flags.DEFINE_integer("num_nodes", d["num_nodes"],
                         "Nodes (slurm; horovodrun/mpirun take --hosts).")
    flags.DEFINE_list("hosts", None, "Node host names for multi-node horovodrun/mpirun; each "
                      "runs --num_gpus ranks (localhost when unset).")
    flags.DEFINE_integer("global_batch_size", None,
                         "Sequences per optimizer update over all GPUs; default: the recipe's.")
    flags.DEFINE_integer("train_batch_size", None,
                         "Sequences per GPU per micro-batch; default: the recipe's.")
    flags.DEFINE_enum("controller", None, ["gloo", "mpi"],
                      "horovodrun controller (--gloo or --mpi); default: Horovod's choice.")
    flags.DEFINE_string("python", d["python"], "Python interpreter on the nodes.")
    flags.DEFINE_bool("allow_run_as_root", os.geteuid() == 0,
                      "Pass --allow-run-as-root to mpirun (needed as root, e.g. in containers).")
    flags.DEFINE_string("image", d["image"], "docker: image built from our Dockerfile.")
    flags.DEFINE_string("container_engine", d["container_engine"],
                        "docker: the engine's command, docker or podman (GPUs through CDI).")
    flags.DEFINE_bool("container_gpus", d["container_gpus"],
                      "docker: give the container every GPU; --nocontainer_gpus on a CPU machine.")
    flags.DEFINE_string("container_user", f"{os.getuid()}:{os.getgid()}",
                        "docker: uid:gid the container runs as (docker run -u), so files it "
                        "writes to the mounts are yours; default: yours.")
    flags.DEFINE_list("container_ulimits", list(NGC_ULIMITS),
                      "docker: --ulimit values (NGC's recommended); empty: the engine's defaults, "
                      "where the host forbids raising limits.")
    flags.DEFINE_bool("ipc_host", d["ipc_host"],
                      "docker: share the host IPC namespace (--ipc=host, as NGC documents); "
                      "--noipc_host gives the container a 1 GiB /dev/shm instead "
                      "(--shm-size=1g, as NVIDIA's BERT scripts; Docker ignores --shm-size "
                      "under --ipc=host).")
    flags.DEFINE_string("data_dir", None, "docker: host directory mounted at /data.")
    flags.DEFINE_string("results_dir", None, "docker: host directory mounted at /results.")
    flags.DEFINE_string("job_name", d["job_name"], "slurm: job name.")
    flags.DEFINE_string("time_limit", d["time_limit"], "slurm: --time of the job.")
    flags.DEFINE_string("partition", None, "slurm: partition.")
    flags.DEFINE_string("container_image", None,
                        "slurm: run inside this image with pyxis/enroot (srun --container-image).")
    flags.DEFINE_string("container_mounts", None, "slurm: srun --container-mounts value.")
    flags.DEFINE_string("sbatch_script", None,
                        "slurm: where to write the job script (default: ./<job_name>.sbatch).")
    flags.DEFINE_bool("dry_run", d["dry_run"], "Print the command (and the sbatch script) only.")
    flags.DEFINE_list("network_interface", None,
                      "horovodrun/mpirun across --hosts: the network interface(s) the ranks talk "
                      "over, the same name on every node (horovodrun --network-interfaces; mpirun "
                      "btl_tcp_if_include, oob_tcp_if_include and NCCL_SOCKET_IFNAME). Default: "
                      "the launchers' choice.")
    flags.DEFINE_string("ssh_identity_file", None,
                        "horovodrun/mpirun across --hosts: private key for ssh to the nodes.")
    flags.DEFINE_integer("ssh_port", None,
                         "horovodrun/mpirun across --hosts: ssh port of the nodes.")
    flags.DEFINE_list("forward_env", [],
                      "mpirun: more environment variables to forward to every rank (-x NAME), "
                      "e.g. PYTHONPATH,OMP_NUM_THREADS; NCCL_* and HOROVOD_* ones set here are "
                      "forwarded anyway. docker: to the container (-e NAME). horovodrun "
                      "forwards the whole environment.")
    flags.DEFINE_string("host_discovery_script", None,
                        "horovodrun: run elastic (--elastic training keeping --global_batch_size) "
                        "with this executable printing the available hosts, one 'host:slots' a "
                        "line; replaces --hosts. Needs --min_np.")
    flags.DEFINE_integer("min_np", None, "Elastic (--host_discovery_script): the fewest ranks to "
                         "train with; it starts once this many slots are listed.")
    flags.DEFINE_integer("start_np", None, "Elastic: the ranks to start with (horovodrun -np); "
                         "it waits until that many slots are listed. Default: --min_np.")
    flags.DEFINE_integer("max_np", None, "Elastic (--host_discovery_script): the most ranks to "
                         "train with (default: every listed slot).")


def config_from_flags(flag_values, training_flags) -> LaunchConfig:
    """A LaunchConfig from parsed flags and the arguments absl left unparsed."""
    names = [f.name for f in dataclasses.fields(LaunchConfig) if f.name != "training_flags"]
    return LaunchConfig(**{name: flag_values[name].value for name in names},
                        training_flags=list(training_flags))


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
        args.append(f"--flagfile={_in_repo(config.recipe, repo)}")
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
    elif global_batch and passed_value(config.training_flags, "num_accumulation_steps") is None:
        if not batch:
            raise LaunchError("--global_batch_size needs a --train_batch_size (flag or recipe)")
        steps = accumulation_steps(global_batch, int(batch), world_size)
        args.append(f"--num_accumulation_steps={steps}")
    return [_in_repo(os.path.join(REPO, "run_pretraining.py"), repo)] + args + config.training_flags


def elastic_batch_args(config: LaunchConfig, global_batch, batch) -> list[str]:
    """--elastic and the global batch it keeps; checked at the smallest and largest world."""
    if not global_batch or not batch:
        raise LaunchError("--host_discovery_script (elastic) needs --global_batch_size and "
                          "--train_batch_size (flags or recipe): the global batch is kept at "
                          "every world size by adjusting the accumulation steps")
    for world_size in {config.min_np, config.max_np} - {None}:
        accumulation_steps(global_batch, int(batch), world_size)
    return ["--elastic", f"--global_batch_size={global_batch}"]


def _in_repo(path, repo):
    """`path` as seen from a checkout at `repo` (the container's copy for docker)."""
    absolute = os.path.abspath(path)
    if repo == REPO:
        return absolute
    if os.path.commonpath([absolute, REPO]) != REPO:
        raise LaunchError(f"{path} is outside the repository, so the image does not have it: "
                          "copy it into launch/recipes/ and rebuild, or mount it")
    return os.path.join(repo, os.path.relpath(absolute, REPO))


def host_list(config: LaunchConfig):
    hosts = config.hosts or ["localhost"]
    return ",".join(f"{h}:{config.num_gpus}" for h in hosts), len(hosts)


def horovodrun_command(config: LaunchConfig, repo=REPO, python=None) -> list[str]:
    if config.host_discovery_script:
        return horovodrun_elastic_command(config, repo, python)
    hosts, num_hosts = host_list(config)
    world = config.num_gpus * num_hosts
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
    command = ["horovodrun", "-np", str(start), "--min-np", str(config.min_np)]
    if config.max_np:
        command += ["--max-np", str(config.max_np)]
    command += ["--host-discovery-script", os.path.abspath(config.host_discovery_script), "--gloo"]
    command += horovodrun_cluster_args(config)
    return command + [python or config.python] + training_args(config, config.min_np, repo)


def mpirun_command(config: LaunchConfig) -> list[str]:
    hosts, num_hosts = host_list(config)
    world = config.num_gpus * num_hosts
    command = ["mpirun", "-np", str(world), "-H", hosts]
    if config.allow_run_as_root:
        command.append("--allow-run-as-root")
    # No core binding (each rank runs many threads), ranks fill a host's slots in
    # order, TCP/shared-memory byte transfer layer (not the openib one).
    command += ["-bind-to", "none", "-map-by", "slot"]
    # CPU affinity: not by mpirun but by each rank, to the cores of its GPU's NUMA node
    # (bert_tf/devices.py, as NVIDIA's TF2 run_pretraining.py does).
    for name in MPI_FORWARDED_ENV:
        command += ["-x", name]
    command += ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
    command += mpirun_cluster_args(config)
    return command + [config.python] + training_args(config, world)


def horovodrun_cluster_args(config: LaunchConfig) -> list[str]:
    """horovodrun's options for ranks on other nodes: interface and ssh."""
    args = []
    if config.network_interface:
        args += ["--network-interfaces", ",".join(config.network_interface)]
    if config.ssh_identity_file:
        args += ["--ssh-identity-file", config.ssh_identity_file]
    if config.ssh_port:
        args += ["-p", str(config.ssh_port)]
    return args


def mpirun_cluster_args(config: LaunchConfig) -> list[str]:
    """Open MPI's options for ranks on other nodes: the environment they need (mpirun
    forwards only -x names), the interface for its byte transfer and out-of-band layers,
    and how its daemons are started over ssh."""
    tuning = [name for name in sorted(os.environ) if name.startswith(MPI_FORWARDED_PREFIXES)]
    args = [a for name in dict.fromkeys([*config.forward_env, *tuning])
            if name not in MPI_FORWARDED_ENV for a in ("-x", name)]
    if config.network_interface:
        interfaces = ",".join(config.network_interface)
        # NCCL picks its own interface otherwise (horovodrun --network-interfaces sets this).
        if "NCCL_SOCKET_IFNAME" not in os.environ:
            args += ["-x", f"NCCL_SOCKET_IFNAME={interfaces}"]
        args += ["-mca", "btl_tcp_if_include", interfaces,
                 "-mca", "oob_tcp_if_include", interfaces]
    ssh = (["-i", config.ssh_identity_file] if config.ssh_identity_file else []) + \
        (["-p", str(config.ssh_port)] if config.ssh_port else [])
    if ssh:
        args += ["-mca", "plm_rsh_args", shlex.join(ssh)]
    return args


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
        inner.append(f"--recipe={_in_repo(config.recipe, CONTAINER_REPO)}")
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


def sbatch_script(config: LaunchConfig) -> str:
    world = config.num_gpus * config.num_nodes
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={config.job_name}",
        f"#SBATCH --nodes={config.num_nodes}",
        f"#SBATCH --ntasks-per-node={config.num_gpus}",
        f"#SBATCH --gpus-per-node={config.num_gpus}",
        f"#SBATCH --time={config.time_limit}",
        "#SBATCH --exclusive",
        # SIGTERM to every task 120 s before --time runs out: run_pretraining.py finishes the
        # update, saves a checkpoint and exits 0, so the rerun resumes from there.
        "#SBATCH --signal=TERM@120",
    ]
    if config.partition:
        lines.append(f"#SBATCH --partition={config.partition}")
    srun = ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1"]
    repo = REPO
    if config.container_image:
        repo = CONTAINER_REPO
        srun.append(f"--container-image={config.container_image}")
        if config.container_mounts:
            srun.append(f"--container-mounts={config.container_mounts}")
        srun.append(f"--container-workdir={CONTAINER_REPO}")
    lines += [
        "# One task per GPU; Horovod takes rank and size from Slurm's MPI (PMI2).",
        "set -euo pipefail",
        f"cd {shlex.quote(REPO)}",
        shlex.join(srun + [config.python] + training_args(config, world, repo)),
    ]
    return "\n".join(lines) + "\n"


# Parses and validates run_pretraining's flags with its own definitions (bert_tf/train/config.py,
# which imports neither TensorFlow nor Horovod), in a child process: this launcher's flags live
# in absl's global registry and some names are the same.
_CHECK_TRAINING_FLAGS = """
import sys
from absl import flags
from bert_tf.train import config
config.define_pretraining_flags()
try:
    flags.FLAGS(["run_pretraining.py", *sys.argv[1:]])
    config.pretraining_config_from_flags(flags.FLAGS).validate()
except (flags.Error, config.PretrainingConfigError) as e:
    sys.exit(str(e))
"""


def check_training_flags(config: LaunchConfig) -> None:
    """The recipe and the flags passed through, as run_pretraining.py will read them: an
    unknown flag, a bad value or a missing --input_files fails here, before any rank starts
    (or a job waits in a queue)."""
    args = [f"--flagfile={os.path.abspath(config.recipe)}"] if config.recipe else []
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK_TRAINING_FLAGS, *args, *config.training_flags],
        cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [REPO, os.environ.get("PYTHONPATH")]))})
    if proc.returncode:
        said = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise LaunchError(f"run_pretraining.py would refuse its flags: {said[-1]}")


def _check_sbatch_values(config: LaunchConfig) -> None:
    """A value with a space or newline would end its #SBATCH line and start another."""
    for name in ("job_name", "time_limit", "partition"):
        value = getattr(config, name)
        if value is not None and not re.fullmatch(r"[\w.:,+@-]+", value):
            raise LaunchError(f"--{name}={value!r}: use letters, digits and . _ - : , + @ "
                              "only (it goes into an #SBATCH line)")


def build(config: LaunchConfig) -> tuple[list[str], str | None]:
    """The command to run and, for slurm, the job script it submits."""
    if config.num_gpus < 1 or config.num_nodes < 1:
        raise LaunchError("--num_gpus and --num_nodes must be >= 1")
    if config.launcher == "slurm":
        _check_sbatch_values(config)
        path = config.sbatch_script or f"{config.job_name}.sbatch"
        built = ["sbatch", path], sbatch_script(config)
    elif config.num_nodes != 1:
        raise LaunchError(f"--num_nodes is for --launcher=slurm; with --launcher="
                          f"{config.launcher} list the nodes in --hosts")
    elif config.host_discovery_script and config.launcher != "horovodrun":
        raise LaunchError("--host_discovery_script (elastic Horovod) needs --launcher=horovodrun")
    else:
        builders = {"horovodrun": horovodrun_command, "mpirun": mpirun_command,
                    "docker": docker_command}
        built = builders[config.launcher](config), None
    check_training_flags(config)
    return built


def _training_processes(root: psutil.Process) -> list:
    """run_pretraining.py processes under `root`: the innermost ones, not the shells that
    horovodrun starts them with (a signalled shell exits 143 and fails the job)."""
    def is_training(process):
        try:
            return "run_pretraining.py" in " ".join(process.cmdline())
        except psutil.NoSuchProcess:
            return False

    found = [p for p in root.children(recursive=True) if is_training(p)]
    return [p for p in found if not any(is_training(c) for c in p.children())]


def run_forwarding_stop_signals(command, container=False) -> int:
    """Runs `command`; a SIGTERM or SIGINT to this launcher reaches the training processes
    under it as SIGTERM, so they finish the update, save a checkpoint and exit 0. (horovodrun
    on a SIGTERM of its own kills its workers after 5 s and exits 1; mpirun ends the job.) The
    command runs in its own session, so a terminal's Ctrl-C reaches only this launcher. A
    `container` engine gets the SIGTERM itself and passes it to the container's first process
    (docker/podman run --sig-proxy, their default): training, or this launcher again."""
    proc = subprocess.Popen(command, start_new_session=True)

    def forward(signum, frame):
        print(f"launch: {signal.Signals(signum).name}: asking the training processes to save "
              "and stop (again to stop at once)", file=sys.stderr, flush=True)
        if container:
            proc.terminate()
            return
        for child in _training_processes(psutil.Process(proc.pid)):
            child.terminate()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    return proc.wait()


def main(argv):
    training_flags = argv[1:]
    positional = [a for a in training_flags if not a.startswith("--")]
    if positional:
        raise app.UsageError(f"unexpected positional arguments {positional}: every option is a "
                             "--flag=value (training flags pass through to run_pretraining.py)")
    if flags.FLAGS.launcher is None:
        raise app.UsageError(f"--launcher is required ({'|'.join(LAUNCHERS)})")
    return launch(config_from_flags(flags.FLAGS, training_flags))


def launch(config: LaunchConfig) -> int:
    """Prints the command (and writes the slurm script), then runs it unless a dry run;
    returns the exit code."""
    try:
        command, script = build(config)
    except LaunchError as e:
        print(f"launch: error: {e}", file=sys.stderr)
        return 2
    if script is not None:
        if config.dry_run:
            print(f"# {command[1]}\n{script}", end="")
        else:
            with open(command[1], "w", encoding="utf-8") as f:
                f.write(script)
    print(shlex.join(command), flush=True)
    if config.dry_run:
        return 0
    if shutil.which(command[0]) is None:
        print(f"launch: error: {command[0]} not found on PATH: activate the environment that "
              "has it (source .venv/bin/activate) or use --dry_run", file=sys.stderr)
        return 2
    if config.launcher in ("horovodrun", "mpirun", "docker"):
        return run_forwarding_stop_signals(command, container=config.launcher == "docker")
    return subprocess.call(command)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=lambda argv: flags.FLAGS(argv, known_only=True))
