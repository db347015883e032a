#!/usr/bin/env python3
r"""Starts run_pretraining.py on one or many GPUs/nodes, or prints the command.

    launch/launch.py --launcher=horovodrun --num_gpus=8 \
        --recipe=launch/recipes/bert_large_phase1.flags \
        --input_files='/data/phase1/*.tfrecord' --output_dir=/results/phase1 --dry_run

Launchers: horovodrun (one node, or several with --hosts), mpirun (Open MPI with
the binding and environment forwarding Horovod documents), slurm (writes an
sbatch script that starts one task per GPU with srun), docker (docker run of our
image, horovodrun inside), mpijob (writes a Kubeflow MPI Operator MPIJob for
Kubernetes and prints its kubectl apply command), ray (Horovod's Ray integration on a Ray
cluster, --ray_address, or on a local Ray node started for the job). Every option is a named flag; flags this launcher does
not define (--input_files, --output_dir, --init_checkpoint, ...) are passed to
run_pretraining.py after the recipe, so they override it.

A recipe is a run_pretraining flagfile. Its `# global_batch_size: N` line (or
--global_batch_size) sets the sequences per optimizer update; the launcher sets
--num_accumulation_steps = global_batch_size / (train_batch_size * total GPUs).
"""

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys

import psutil
from absl import app, flags

# Run as a script, Python puts this directory first on sys.path; loaded by its path (the
# tests), it is added here, so that the launchers package imports either way.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from launchers.common import (  # noqa: E402
    NGC_ULIMITS,
    REPO,
    LaunchConfig,
    LaunchError,
)
from launchers.docker import docker_command  # noqa: E402
from launchers.horovodrun import horovodrun_command  # noqa: E402
from launchers.mpijob import mpijob_manifest  # noqa: E402
from launchers.mpirun import mpirun_command  # noqa: E402
from launchers.slurm import check_sbatch_values, sbatch_script  # noqa: E402

from bert_tf.data.files import OutputDirError  # noqa: E402
from bert_tf.data.output_dir import check_output_dir  # noqa: E402

LAUNCHERS = ("horovodrun", "mpirun", "slurm", "docker", "mpijob", "ray")


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
    flags.DEFINE_integer("num_workers", d["num_workers"],
                         "mpijob: worker pods, each with --num_gpus GPUs (slotsPerWorker). ray: "
                         "Ray nodes, each running --num_gpus ranks.")
    flags.DEFINE_string("pvc_name", d["pvc_name"], "mpijob: PersistentVolumeClaim shared by the "
                        "pods; its data/ is mounted at /data, its results/ at /results.")
    flags.DEFINE_string("manifest", None,
                        "mpijob: where to write the MPIJob (default: ./<job_name>.mpijob.yaml).")
    flags.DEFINE_string("ray_address", None, "ray: address of the Ray cluster (ray start --head "
                        "prints it, e.g. 10.0.0.1:6379, or 'auto'); default: a local Ray node "
                        "started for the job.")
    flags.DEFINE_integer("ray_cpus_per_worker", d["ray_cpus_per_worker"],
                         "ray: Ray CPUs each rank reserves (also the slot size of elastic runs).")
    flags.DEFINE_integer("ray_gpus_per_worker", None,
                         "ray: Ray GPUs each rank reserves; default: 1 when the Ray cluster "
                         "has GPUs, else 0.")
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
    flags.DEFINE_integer("min_np", None, "Elastic (--host_discovery_script; with --launcher=ray, "
                         "elastic on Ray's slots): the fewest ranks to train with; it starts "
                         "once this many slots are listed.")
    flags.DEFINE_integer("start_np", None, "Elastic: the ranks to start with (horovodrun -np); "
                         "it waits until that many slots are listed. Default: --min_np.")
    flags.DEFINE_integer("max_np", None, "Elastic (--host_discovery_script): the most ranks to "
                         "train with (default: every listed slot).")


def config_from_flags(flag_values, training_flags) -> LaunchConfig:
    """A LaunchConfig from parsed flags and the arguments absl left unparsed."""
    names = [f.name for f in dataclasses.fields(LaunchConfig) if f.name != "training_flags"]
    return LaunchConfig(**{name: flag_values[name].value for name in names},
                        training_flags=list(training_flags))


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


def build(config: LaunchConfig) -> tuple[list[str], str | None]:
    """The command to run and, for slurm and mpijob, the file it submits."""
    if config.num_gpus < 1 or config.num_nodes < 1:
        raise LaunchError("--num_gpus and --num_nodes must be >= 1")
    if config.launcher == "slurm":
        check_sbatch_values(config)
        path = config.sbatch_script or f"{config.job_name}.sbatch"
        built = ["sbatch", path], sbatch_script(config)
    elif config.launcher == "mpijob":
        path = config.manifest or f"{config.job_name}.mpijob.yaml"
        built = ["kubectl", "apply", "-f", path], mpijob_manifest(config)
    elif config.launcher == "ray":
        from launchers.ray import ray_command  # imports Ray: only for this launcher

        built = ray_command(config), None
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
    """Prints the command (and writes the slurm script or the MPIJob), then runs it unless a
    dry run or an MPIJob (applied where kubectl is);
    returns the exit code."""
    try:
        command, script = build(config)
    except LaunchError as e:
        print(f"launch: error: {e}", file=sys.stderr)
        return 2
    if config.dry_run:
        if config.launcher == "ray":
            print(f"# on Ray ({config.ray_address or 'a local Ray node'}), every rank runs:")
        if script is not None:
            print(f"# {command[-1]}\n{script}", end="")
        print(shlex.join(command), flush=True)
        return 0
    # Before the slurm script is written: a missing sbatch must not cost an existing file.
    # The MPIJob is applied by the user, where kubectl and the cluster are.
    if config.launcher != "mpijob" and shutil.which(command[0]) is None:
        print(f"launch: error: {command[0]} not found on PATH: activate the environment that "
              "has it (source .venv/bin/activate) or use --dry_run", file=sys.stderr)
        return 2
    if script is not None:
        try:
            check_output_dir(os.path.dirname(os.path.abspath(command[-1])),
                             "manifest" if config.launcher == "mpijob" else "sbatch_script")
        except OutputDirError as e:
            print(f"launch: error: {e} (the directory of {command[-1]})", file=sys.stderr)
            return 2
        with open(command[-1], "w", encoding="utf-8") as f:
            f.write(script)
    print(shlex.join(command), flush=True)
    if config.launcher == "mpijob":
        return 0
    if config.launcher == "ray":
        from launchers.ray import run_on_ray

        return run_on_ray(config, command)
    if config.launcher in ("horovodrun", "mpirun", "docker"):
        return run_forwarding_stop_signals(command, container=config.launcher == "docker")
    return subprocess.call(command)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=lambda argv: flags.FLAGS(argv, known_only=True))
