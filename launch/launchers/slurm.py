"""Slurm: an sbatch script that starts one task per GPU with srun."""

import re
import shlex

from launchers.common import CONTAINER_REPO, REPO, LaunchConfig, LaunchError, training_args


def sbatch_script(config: LaunchConfig) -> str:
    world = config.num_gpus * config.num_nodes
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={config.job_name}",
        f"#SBATCH --nodes={config.num_nodes}",
        f"#SBATCH --ntasks-per-node={config.num_gpus}",
        f"#SBATCH --gpus-per-node={config.num_gpus}",
        f"#SBATCH --time={config.time_limit}",
        # The whole node and all its memory, as NVIDIA's TF2 BERT run.sub asks
        # (DeepLearningExamples TensorFlow2/LanguageModeling/BERT/run.sub: --exclusive,
        # --mem=0): without --mem a site's default per-CPU memory can be far below what a
        # rank's input pipeline and host-side copies take.
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
        # SIGTERM to every task 120 s before --time runs out: run_pretraining.py finishes the
        # update, saves a checkpoint and exits 0, so the rerun resumes from there.
        "#SBATCH --signal=TERM@120",
    ]
    if config.partition:
        lines.append(f"#SBATCH --partition={config.partition}")
    # Each task gets its share of the node's CPUs (Slurm's default is one CPU per task, and
    # its task plugin confines the task to them) and no binding by Slurm: each rank binds
    # itself to the CPUs of its GPU's NUMA node (bert_tf/model/devices.py, as NVIDIA's
    # gpu_affinity.py).
    srun = ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", "--cpus-per-task=$CPUS_PER_TASK",
            "--cpu-bind=none"]
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
        f"CPUS_PER_TASK=$(( SLURM_CPUS_ON_NODE / {config.num_gpus} ))",
        # The srun line in double quotes where it names $CPUS_PER_TASK, single elsewhere.
        " ".join(f'"{a}"' if "$CPUS_PER_TASK" in a else shlex.quote(a)
                 for a in srun + [config.python] + training_args(config, world, repo)),
    ]
    return "\n".join(lines) + "\n"



def check_sbatch_values(config: LaunchConfig) -> None:
    """A value with a space or newline would end its #SBATCH line and start another."""
    for name in ("job_name", "time_limit", "partition"):
        value = getattr(config, name)
        if value is not None and not re.fullmatch(r"[\w.:,+@-]+", value):
            raise LaunchError(f"--{name}={value!r}: use letters, digits and . _ - : , + @ "
                              "only (it goes into an #SBATCH line)")
