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

import os
import re
import shlex
import shutil
import subprocess
import sys

from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTAINER_REPO = "/workspace/bert_tf"  # WORKDIR of our Dockerfile
LAUNCHERS = ("horovodrun", "mpirun", "slurm", "docker")
# Forwarded to every rank by mpirun (Horovod's documented set).
MPI_FORWARDED_ENV = ("NCCL_DEBUG", "LD_LIBRARY_PATH", "PATH")

FLAGS = flags.FLAGS
flags.DEFINE_enum("launcher", None, LAUNCHERS, "How to start the ranks.")
flags.DEFINE_string("recipe", None, "run_pretraining flagfile (launch/recipes/*.flags).")
flags.DEFINE_integer("num_gpus", 1, "Ranks per node: one per GPU (on CPU, processes).")
flags.DEFINE_integer("num_nodes", 1, "Nodes (slurm; horovodrun/mpirun take --hosts).")
flags.DEFINE_list("hosts", None, "Node host names for multi-node horovodrun/mpirun; each "
                  "runs --num_gpus ranks (localhost when unset).")
flags.DEFINE_integer("global_batch_size", None,
                     "Sequences per optimizer update over all GPUs; default: the recipe's.")
flags.DEFINE_integer("train_batch_size", None,
                     "Sequences per GPU per micro-batch; default: the recipe's.")
flags.DEFINE_enum("controller", None, ["gloo", "mpi"],
                  "horovodrun controller (--gloo or --mpi); default: Horovod's choice.")
flags.DEFINE_string("python", "python", "Python interpreter on the nodes.")
flags.DEFINE_bool("allow_run_as_root", os.geteuid() == 0,
                  "Pass --allow-run-as-root to mpirun (needed as root, e.g. in containers).")
flags.DEFINE_string("image", "bert_tf", "docker: image built from our Dockerfile.")
flags.DEFINE_bool("ipc_host", True,
                  "docker: share the host IPC namespace (--ipc=host, as NGC documents); "
                  "--noipc_host gives the container a 1 GiB /dev/shm instead (--shm-size=1g, "
                  "as NVIDIA's BERT scripts; Docker ignores --shm-size under --ipc=host).")
flags.DEFINE_string("data_dir", None, "docker: host directory mounted at /data.")
flags.DEFINE_string("results_dir", None, "docker: host directory mounted at /results.")
flags.DEFINE_string("job_name", "bert_tf", "slurm: job name.")
flags.DEFINE_string("time_limit", "24:00:00", "slurm: --time of the job.")
flags.DEFINE_string("partition", None, "slurm: partition.")
flags.DEFINE_string("container_image", None,
                    "slurm: run inside this image with pyxis/enroot (srun --container-image).")
flags.DEFINE_string("container_mounts", None, "slurm: srun --container-mounts value.")
flags.DEFINE_string("sbatch_script", None,
                    "slurm: where to write the job script (default: ./<job_name>.sbatch).")
flags.DEFINE_bool("dry_run", False, "Print the command (and the sbatch script) only.")
flags.DEFINE_list("network_interface", None,
                  "horovodrun/mpirun across --hosts: the network interface(s) the ranks talk "
                  "over, the same name on every node (horovodrun --network-interfaces; mpirun "
                  "btl_tcp_if_include and oob_tcp_if_include). Default: the launchers' choice.")
flags.DEFINE_string("ssh_identity_file", None,
                    "horovodrun/mpirun across --hosts: private key for ssh to the nodes.")
flags.DEFINE_integer("ssh_port", None, "horovodrun/mpirun across --hosts: ssh port of the nodes.")
flags.DEFINE_list("forward_env", [],
                  "mpirun: more environment variables to forward to every rank (-x NAME), "
                  "e.g. PYTHONPATH,OMP_NUM_THREADS. horovodrun forwards the whole environment.")


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


def training_args(passthrough, world_size, repo=REPO) -> list[str]:
    """run_pretraining.py and its flags: the recipe, then the computed batch flags,
    then the user's own flags (which win)."""
    args = []
    recipe_values, recipe_global = {}, None
    if FLAGS.recipe:
        recipe_values, recipe_global = read_recipe(FLAGS.recipe)
        args.append(f"--flagfile={_in_repo(FLAGS.recipe, repo)}")
        config = recipe_values.get("bert_config_file")
        if (repo == REPO and config and not os.path.isfile(config)
                and passed_value(passthrough, "bert_config_file") is None):
            raise LaunchError(f"--recipe={FLAGS.recipe} names --bert_config_file={config}, "
                              f"which is not found from {os.getcwd()}: run from the repository "
                              f"root ({REPO}) or pass --bert_config_file")
    batch = FLAGS.train_batch_size or passed_value(passthrough, "train_batch_size") \
        or recipe_values.get("train_batch_size")
    if FLAGS.train_batch_size:
        args.append(f"--train_batch_size={FLAGS.train_batch_size}")
    global_batch = FLAGS.global_batch_size or recipe_global
    if global_batch and passed_value(passthrough, "num_accumulation_steps") is None:
        if not batch:
            raise LaunchError("--global_batch_size needs a --train_batch_size (flag or recipe)")
        steps = accumulation_steps(global_batch, int(batch), world_size)
        args.append(f"--num_accumulation_steps={steps}")
    return [_in_repo(os.path.join(REPO, "run_pretraining.py"), repo)] + args + list(passthrough)


def _in_repo(path, repo):
    """`path` as seen from a checkout at `repo` (the container's copy for docker)."""
    absolute = os.path.abspath(path)
    if repo == REPO:
        return absolute
    if os.path.commonpath([absolute, REPO]) != REPO:
        raise LaunchError(f"{path} is outside the repository, so the image does not have it: "
                          "copy it into launch/recipes/ and rebuild, or mount it")
    return os.path.join(repo, os.path.relpath(absolute, REPO))


def host_list():
    hosts = FLAGS.hosts or ["localhost"]
    return ",".join(f"{h}:{FLAGS.num_gpus}" for h in hosts), len(hosts)


def horovodrun_command(passthrough, repo=REPO, python=None) -> list[str]:
    hosts, num_hosts = host_list()
    world = FLAGS.num_gpus * num_hosts
    command = ["horovodrun", "-np", str(world), "-H", hosts]
    if FLAGS.controller:
        command.append(f"--{FLAGS.controller}")
    command += horovodrun_cluster_args()
    return command + [python or FLAGS.python] + training_args(passthrough, world, repo)


def mpirun_command(passthrough) -> list[str]:
    hosts, num_hosts = host_list()
    world = FLAGS.num_gpus * num_hosts
    command = ["mpirun", "-np", str(world), "-H", hosts]
    if FLAGS.allow_run_as_root:
        command.append("--allow-run-as-root")
    # No core binding (each rank runs many threads), ranks fill a host's slots in
    # order, TCP/shared-memory byte transfer layer (not the openib one).
    command += ["-bind-to", "none", "-map-by", "slot"]
    for name in MPI_FORWARDED_ENV:
        command += ["-x", name]
    command += ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
    command += mpirun_cluster_args()
    return command + [FLAGS.python] + training_args(passthrough, world)


def horovodrun_cluster_args() -> list[str]:
    """horovodrun's options for ranks on other nodes: interface and ssh."""
    args = []
    if FLAGS.network_interface:
        args += ["--network-interfaces", ",".join(FLAGS.network_interface)]
    if FLAGS.ssh_identity_file:
        args += ["--ssh-identity-file", FLAGS.ssh_identity_file]
    if FLAGS.ssh_port:
        args += ["-p", str(FLAGS.ssh_port)]
    return args


def mpirun_cluster_args() -> list[str]:
    """Open MPI's options for ranks on other nodes: the environment they need (mpirun
    forwards only -x names), the interface for its byte transfer and out-of-band layers,
    and how its daemons are started over ssh."""
    args = [a for name in dict.fromkeys(FLAGS.forward_env) if name not in MPI_FORWARDED_ENV
            for a in ("-x", name)]
    if FLAGS.network_interface:
        interfaces = ",".join(FLAGS.network_interface)
        args += ["-mca", "btl_tcp_if_include", interfaces,
                 "-mca", "oob_tcp_if_include", interfaces]
    ssh = (["-i", FLAGS.ssh_identity_file] if FLAGS.ssh_identity_file else []) + \
        (["-p", str(FLAGS.ssh_port)] if FLAGS.ssh_port else [])
    if ssh:
        args += ["-mca", "plm_rsh_args", shlex.join(ssh)]
    return args


def docker_command(passthrough) -> list[str]:
    if FLAGS.hosts:
        raise LaunchError("--launcher=docker runs one node; for several use --launcher=slurm "
                          "with --container_image")
    command = ["docker", "run", "--rm", "--gpus", "all"]
    command += ["--ipc=host"] if FLAGS.ipc_host else ["--shm-size=1g"]
    command += ["--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    for host_dir, mount in ((FLAGS.data_dir, "/data"), (FLAGS.results_dir, "/results")):
        if host_dir:
            command += ["-v", f"{os.path.abspath(host_dir)}:{mount}"]
    command.append(FLAGS.image)
    # The image's own interpreter, whatever --python says for the host.
    if FLAGS.num_gpus == 1:
        return command + ["python"] + training_args(passthrough, 1, CONTAINER_REPO)
    return command + horovodrun_command(passthrough, CONTAINER_REPO, python="python")


def sbatch_script(passthrough) -> str:
    world = FLAGS.num_gpus * FLAGS.num_nodes
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={FLAGS.job_name}",
        f"#SBATCH --nodes={FLAGS.num_nodes}",
        f"#SBATCH --ntasks-per-node={FLAGS.num_gpus}",
        f"#SBATCH --gpus-per-node={FLAGS.num_gpus}",
        f"#SBATCH --time={FLAGS.time_limit}",
        "#SBATCH --exclusive",
    ]
    if FLAGS.partition:
        lines.append(f"#SBATCH --partition={FLAGS.partition}")
    srun = ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1"]
    repo = REPO
    if FLAGS.container_image:
        repo = CONTAINER_REPO
        srun.append(f"--container-image={FLAGS.container_image}")
        if FLAGS.container_mounts:
            srun.append(f"--container-mounts={FLAGS.container_mounts}")
        srun.append(f"--container-workdir={CONTAINER_REPO}")
    lines += [
        "# One task per GPU; Horovod takes rank and size from Slurm's MPI (PMI2).",
        "set -euo pipefail",
        f"cd {shlex.quote(REPO)}",
        shlex.join(srun + [FLAGS.python] + training_args(passthrough, world, repo)),
    ]
    return "\n".join(lines) + "\n"


def build(passthrough) -> tuple[list[str], str | None]:
    """The command to run and, for slurm, the job script it submits."""
    if FLAGS.num_gpus < 1 or FLAGS.num_nodes < 1:
        raise LaunchError("--num_gpus and --num_nodes must be >= 1")
    if FLAGS.launcher == "slurm":
        path = FLAGS.sbatch_script or f"{FLAGS.job_name}.sbatch"
        return ["sbatch", path], sbatch_script(passthrough)
    if FLAGS.num_nodes != 1:
        raise LaunchError(f"--num_nodes is for --launcher=slurm; with --launcher="
                          f"{FLAGS.launcher} list the nodes in --hosts")
    builders = {"horovodrun": horovodrun_command, "mpirun": mpirun_command,
                "docker": docker_command}
    return builders[FLAGS.launcher](passthrough), None


def main(argv):
    passthrough = argv[1:]
    positional = [a for a in passthrough if not a.startswith("--")]
    if positional:
        raise app.UsageError(f"unexpected positional arguments {positional}: every option is a "
                             "--flag=value (training flags pass through to run_pretraining.py)")
    if FLAGS.launcher is None:
        raise app.UsageError(f"--launcher is required ({'|'.join(LAUNCHERS)})")
    try:
        command, script = build(passthrough)
    except LaunchError as e:
        print(f"launch: error: {e}", file=sys.stderr)
        return 2
    if script is not None:
        if FLAGS.dry_run:
            print(f"# {command[1]}\n{script}", end="")
        else:
            with open(command[1], "w", encoding="utf-8") as f:
                f.write(script)
    print(shlex.join(command), flush=True)
    if FLAGS.dry_run:
        return 0
    if shutil.which(command[0]) is None:
        print(f"launch: error: {command[0]} not found on PATH: activate the environment that "
              "has it (source .venv/bin/activate) or use --dry_run", file=sys.stderr)
        return 2
    return subprocess.call(command)


if __name__ == "__main__":
    app.run(main, flags_parser=lambda argv: FLAGS(argv, known_only=True))
