"""launch/launch.py: the exact commands each launcher would run, and the accumulation
steps it derives from the recipes' global batch sizes. The builders are plain functions of a
LaunchConfig, tested in-process; two subprocess tests cover the command line itself."""

import importlib.util
import os
import shlex

import pytest
from conftest import PYTHON, REPO, run_command

LAUNCH = REPO / "launch" / "launch.py"
RECIPES = REPO / "launch" / "recipes"
RUN = f"{REPO}/run_pretraining.py"
DATA = ["--input_files=/d/*", "--output_dir=/r"]  # what run_pretraining requires
BARE = [*DATA, "--do_train", "--bert_config_file=/c.json"]  # without a recipe

_spec = importlib.util.spec_from_file_location("launch", LAUNCH)
launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launch)
from launchers.mpirun import MPI_FORWARDED_PREFIXES  # noqa: E402 (launch.py put it on the path)


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    """Recipes name their bert_config_file relative to the repository root, where the
    launcher is documented to run. No NCCL/Horovod settings of this process (mpirun forwards
    them): each test sets its own."""
    monkeypatch.chdir(REPO)
    for name in list(os.environ):
        if name.startswith(MPI_FORWARDED_PREFIXES):
            monkeypatch.delenv(name)


def dry_run(capsys, **fields):
    """(exit code, stdout, stderr) of a dry run of LaunchConfig(**fields)."""
    code = launch.launch(launch.LaunchConfig(dry_run=True, **fields))
    out, err = capsys.readouterr()
    return code, out, err


def command_of(out):
    return shlex.split(out.strip().splitlines()[-1])


@pytest.mark.parametrize("recipe, gpus, accumulation", [
    ("bert_large_phase1", 1, 1024), ("bert_large_phase1", 8, 128), ("bert_large_phase1", 64, 16),
    ("bert_large_phase2", 1, 2048), ("bert_large_phase2", 8, 256), ("bert_large_phase2", 32, 64),
    ("bert_base_phase1", 1, 256), ("bert_base_phase1", 8, 32), ("bert_base_phase1", 128, 2),
    ("bert_base_phase2", 1, 1024), ("bert_base_phase2", 8, 128), ("bert_base_phase2", 16, 64),
])
def test_recipes_reach_nvidias_global_batch_on_any_gpu_count(recipe, gpus, accumulation,
                                                             capsys):
    _, out, _ = dry_run(capsys, launcher="horovodrun", num_gpus=gpus,
                        recipe=f"launch/recipes/{recipe}.flags",
                        training_flags=["--input_files=/d/*", "--output_dir=/results/x"])
    assert command_of(out) == [
        "horovodrun", "-np", str(gpus), "-H", f"localhost:{gpus}", "python", RUN,
        f"--flagfile={RECIPES}/{recipe}.flags", f"--num_accumulation_steps={accumulation}",
        "--input_files=/d/*", "--output_dir=/results/x"]
    text = (RECIPES / f"{recipe}.flags").read_text()
    batch = int(text.split("--train_batch_size=")[1].split()[0])
    global_batch = 65536 if "phase1" in recipe else 32768
    assert f"# global_batch_size: {global_batch}" in text
    assert batch * accumulation * gpus == global_batch


def test_recipes_follow_nvidia_lamb_schedule():
    for recipe, seq, preds, lr, steps, warmup in [
            ("phase1", 128, 20, "6e-3", 7038, 2000), ("phase2", 512, 80, "4e-3", 1563, 200)]:
        for model in ("base", "large"):
            lines = (RECIPES / f"bert_{model}_{recipe}.flags").read_text().splitlines()
            for flag in (f"--max_seq_length={seq}", f"--max_predictions_per_seq={preds}",
                         "--optimizer_type=lamb", f"--learning_rate={lr}",
                         f"--num_train_steps={steps}", f"--num_warmup_steps={warmup}",
                         f"--bert_config_file=launch/configs/bert_{model}_uncased_config.json"):
                assert flag in lines, (model, recipe, flag)


def test_multi_node_horovodrun_and_overrides(capsys):
    _, out, _ = dry_run(capsys, launcher="horovodrun", num_gpus=8, hosts=["node1", "node2"],
                        recipe="launch/recipes/bert_large_phase1.flags", train_batch_size=32,
                        controller="gloo", python="/opt/venv/bin/python",
                        training_flags=DATA)
    assert command_of(out) == [
        "horovodrun", "-np", "16", "-H", "node1:8,node2:8", "--gloo", "/opt/venv/bin/python",
        RUN, f"--flagfile={RECIPES}/bert_large_phase1.flags", "--train_batch_size=32",
        "--num_accumulation_steps=128", *DATA]


def test_mpirun_binding_and_environment_forwarding(capsys):
    _, out, _ = dry_run(capsys, launcher="mpirun", num_gpus=4, allow_run_as_root=True,
                        recipe="launch/recipes/bert_base_phase2.flags",
                        training_flags=[*DATA, "--init_checkpoint=/r/p1"])
    assert command_of(out) == [
        "mpirun", "-np", "4", "-H", "localhost:4", "--allow-run-as-root", "-bind-to", "none",
        "-map-by", "slot", "-x", "NCCL_DEBUG", "-x", "LD_LIBRARY_PATH", "-x", "PATH",
        "-mca", "pml", "ob1", "-mca", "btl", "^openib", "python", RUN,
        f"--flagfile={RECIPES}/bert_base_phase2.flags", "--num_accumulation_steps=256",
        *DATA, "--init_checkpoint=/r/p1"]


def test_mpirun_forwards_nccl_and_horovod_settings_and_names_nccls_interface(capsys,
                                                                           monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "67108864")
    _, out, _ = dry_run(capsys, launcher="mpirun", num_gpus=8, hosts=["n1", "n2"],
                        network_interface=["ib0"], allow_run_as_root=False, training_flags=DATA,
                        recipe="launch/recipes/bert_base_phase1.flags")
    command = command_of(out)
    tail = command[command.index("^openib") + 1:command.index("python")]
    assert tail == ["-x", "HOROVOD_FUSION_THRESHOLD", "-x", "NCCL_IB_HCA",
                    "-x", "NCCL_SOCKET_IFNAME=ib0", "-mca", "btl_tcp_if_include", "ib0",
                    "-mca", "oob_tcp_if_include", "ib0"]
    # A NCCL_SOCKET_IFNAME of the user's own is forwarded as it is.
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=ib1")
    _, out, _ = dry_run(capsys, launcher="mpirun", num_gpus=8, hosts=["n1", "n2"],
                        network_interface=["ib0"], allow_run_as_root=False, training_flags=DATA,
                        recipe="launch/recipes/bert_base_phase1.flags")
    command = command_of(out)
    assert "NCCL_SOCKET_IFNAME" in command and "NCCL_SOCKET_IFNAME=ib0" not in command


def test_slurm_script_runs_one_task_per_gpu_with_srun(capsys):
    _, out, _ = dry_run(capsys, launcher="slurm", num_nodes=4, num_gpus=8, job_name="p1",
                        partition="gpu", recipe="launch/recipes/bert_large_phase1.flags",
                        training_flags=["--input_files=/d/*", "--output_dir=/shared/p1"])
    lines = out.splitlines()
    assert lines[0] == "# p1.sbatch" and lines[1] == "#!/bin/bash"
    # The whole node with all its memory, as NVIDIA's run.sub asks; each task its share of the
    # CPUs, unbound by Slurm (each rank binds itself to its GPU's NUMA node).
    for directive in ("--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8", "--partition=gpu",
                      "--job-name=p1", "--signal=TERM@120", "--exclusive", "--mem=0"):
        assert f"#SBATCH {directive}" in lines
    assert "CPUS_PER_TASK=$(( SLURM_CPUS_ON_NODE / 8 ))" in lines
    srun = shlex.split(next(line for line in lines if line.startswith("srun ")))
    assert srun == ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", "--cpus-per-task=$CPUS_PER_TASK",
                    "--cpu-bind=none", "python", RUN,
                    f"--flagfile={RECIPES}/bert_large_phase1.flags",
                    "--num_accumulation_steps=32", "--input_files=/d/*",
                    "--output_dir=/shared/p1"]
    assert lines[-1] == "sbatch p1.sbatch"


def test_slurm_in_a_container_uses_the_image_paths(capsys):
    _, out, _ = dry_run(capsys, launcher="slurm", num_nodes=2, num_gpus=8,
                        container_image="nvcr.io/me/bert_tf:1",
                        container_mounts="/lustre:/data",
                        recipe="launch/recipes/bert_base_phase1.flags", training_flags=DATA)
    srun = shlex.split(next(line for line in out.splitlines()
                            if line.startswith("srun ")))
    assert srun[5:10] == ["--container-image=nvcr.io/me/bert_tf:1",
                         "--container-mounts=/lustre:/data",
                         "--container-workdir=/workspace/bert_tf", "python",
                         "/workspace/bert_tf/run_pretraining.py"]
    assert "--flagfile=/workspace/bert_tf/launch/recipes/bert_base_phase1.flags" in srun


def test_docker_run_of_our_image(capsys):
    _, out, _ = dry_run(capsys, launcher="docker", num_gpus=8, data_dir="/mnt/data",
                        results_dir="/mnt/results", recipe="launch/recipes/bert_large_phase2.flags",
                        container_user="1000:1001",
                        training_flags=["--input_files=/data/p2/*", "--output_dir=/results/p2"])
    # Our launcher again inside: it computes the accumulation and forwards stop signals.
    assert command_of(out) == [
        "docker", "run", "--rm", "-u", "1000:1001", "--gpus", "all", "--ipc=host", "--ulimit",
        "memlock=-1", "--ulimit", "stack=67108864", "-v", "/mnt/data:/data", "-v",
        "/mnt/results:/results", "bert_tf", "python", "/workspace/bert_tf/launch/launch.py",
        "--launcher=horovodrun", "--num_gpus=8",
        "--recipe=/workspace/bert_tf/launch/recipes/bert_large_phase2.flags",
        "--input_files=/data/p2/*", "--output_dir=/results/p2"]
    one = command_of(dry_run(capsys, launcher="docker", ipc_host=False, image="bert_tf:dev",
                             results_dir="r", recipe="launch/recipes/bert_base_phase1.flags",
                             training_flags=["--input_files=/data/x", "--output_dir=/results/x"])[1])
    assert one[:3] == ["docker", "run", "--rm"] and one[3:5] == ["-u", f"{os.getuid()}:{os.getgid()}"]
    assert one[5:12] == ["--gpus", "all", "--shm-size=1g", "--ulimit", "memlock=-1", "--ulimit",
                         "stack=67108864"]
    assert one[14:17] == ["bert_tf:dev", "python", "/workspace/bert_tf/run_pretraining.py"]
    assert one[-2:] == ["--input_files=/data/x", "--output_dir=/results/x"]


def test_podman_gets_gpus_through_cdi_and_cpu_runs_none(capsys):
    flags = dict(launcher="docker", results_dir="r", recipe="launch/recipes/bert_base_phase1.flags",
                 training_flags=["--input_files=/data/x", "--output_dir=/results/x"])
    podman = command_of(dry_run(capsys, container_engine="/usr/bin/podman", **flags)[1])
    assert podman[0] == "/usr/bin/podman" and podman[5:7] == ["--device", "nvidia.com/gpu=all"]
    cpu = command_of(dry_run(capsys, container_engine="podman", container_gpus=False,
                             container_ulimits=[], forward_env=["OMP_NUM_THREADS"], **flags)[1])
    assert "--device" not in cpu and "--gpus" not in cpu and "--ulimit" not in cpu
    assert cpu[cpu.index("-e") + 1] == "OMP_NUM_THREADS"


@pytest.mark.parametrize("results_dir, output_dir", [
    (None, "/results/x"), ("r", None), ("r", "/tmp/x"), ("r", "out"), ("r", "/results/../x")])
def test_docker_output_outside_the_results_mount_is_refused(capsys, results_dir, output_dir):
    # Files written elsewhere in the container are removed with it (docker run --rm).
    flags = [f"--output_dir={output_dir}"] if output_dir else []
    code, out, err = dry_run(capsys, launcher="docker", results_dir=results_dir,
                             training_flags=flags)
    assert code == 2 and not out
    assert f"--output_dir={output_dir} would be lost with the container: pass --results_dir" in err


def test_bad_launches_say_what_to_change(capsys):
    code, _, err = dry_run(capsys, launcher="horovodrun", num_gpus=8, train_batch_size=48,
                           recipe="launch/recipes/bert_large_phase1.flags")
    assert code == 2
    assert ("--global_batch_size=65536 is not a multiple of train_batch_size x GPUs = 48 x 8 = "
            "384; the nearest that does is --train_batch_size=32") in err
    _, _, err = dry_run(capsys, launcher="mpirun", num_gpus=6,
                        recipe="launch/recipes/bert_large_phase1.flags")
    assert "does not split evenly over 6 GPUs" in err


def test_command_line_flags_become_the_config_and_the_rest_passes_through():
    proc = run_command([PYTHON, LAUNCH, "--dry_run", "--launcher=horovodrun", "--num_gpus=8",
                        "--hosts=node1,node2", "--noipc_host",
                        "--recipe=launch/recipes/bert_large_phase1.flags",
                        "--train_batch_size=32", *DATA])
    assert command_of(proc.stdout) == [
        "horovodrun", "-np", "16", "-H", "node1:8,node2:8", "python", RUN,
        f"--flagfile={RECIPES}/bert_large_phase1.flags", "--train_batch_size=32",
        "--num_accumulation_steps=128", *DATA]
    proc = run_command([PYTHON, LAUNCH, "--dry_run", "--launcher=mpirun", "positional"],
                       check=False)
    assert proc.returncode != 0 and "unexpected positional arguments ['positional']" in proc.stderr


def test_help_lists_every_launcher():
    proc = run_command([PYTHON, LAUNCH, "--help"], check=False)  # absl's --help exits 1
    assert "--launcher: <horovodrun|mpirun|slurm|docker|mpijob|ray>" in proc.stdout
    assert "--[no]dry_run" in proc.stdout


@pytest.fixture
def discovery_script(tmp_path):
    script = tmp_path / "discover_hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    return script


def test_elastic_horovodrun_keeps_the_global_batch(capsys, discovery_script):
    _, out, _ = dry_run(capsys, launcher="horovodrun", min_np=8, start_np=16, max_np=16,
                        host_discovery_script=str(discovery_script),
                        recipe="launch/recipes/bert_large_phase1.flags",
                        network_interface=["ib0"], training_flags=DATA)
    assert command_of(out) == [
        "horovodrun", "-np", "16", "--min-np", "8", "--max-np", "16",
        "--host-discovery-script", str(discovery_script), "--gloo",
        "--network-interfaces", "ib0", "python", RUN,
        f"--flagfile={RECIPES}/bert_large_phase1.flags", "--elastic",
        "--global_batch_size=65536", *DATA]


@pytest.mark.parametrize("fields, message", [
    (dict(hosts=["n1"]), "--hosts and --host_discovery_script exclude each other"),
    (dict(controller="mpi"), "--host_discovery_script (elastic Horovod) needs --controller=gloo"),
    (dict(min_np=None), "--host_discovery_script needs --min_np >= 1 and --min_np <= "
     "--start_np <= --max_np"),
    (dict(max_np=1), "(got --min_np=2, --start_np=None, --max_np=1)"),
    (dict(start_np=8), "(got --min_np=2, --start_np=8, --max_np=4)"),
    (dict(max_np=6), "--global_batch_size=65536 does not split evenly over 6 GPUs"),
    (dict(launcher="mpirun"), "--host_discovery_script (elastic Horovod) needs "
     "--launcher=horovodrun"),
    (dict(recipe=None), "--host_discovery_script (elastic) needs --global_batch_size"),
])
def test_bad_elastic_launches_name_the_flag(capsys, fields, message, discovery_script):
    config = dict(launcher="horovodrun", min_np=2, max_np=4,
                  host_discovery_script=str(discovery_script),
                  recipe="launch/recipes/bert_large_phase1.flags")
    code, _, err = dry_run(capsys, **{**config, **fields})
    assert code == 2
    assert message in err, err


def test_a_missing_or_not_executable_discovery_script_is_named(capsys, discovery_script):
    config = dict(launcher="horovodrun", min_np=2, max_np=4,
                  recipe="launch/recipes/bert_large_phase1.flags", training_flags=DATA)
    missing = discovery_script.with_name("absent.sh")
    code, _, err = dry_run(capsys, **config, host_discovery_script=str(missing))
    assert code == 2 and f"--host_discovery_script={missing}: no such file" in err, err
    discovery_script.chmod(0o644)
    code, _, err = dry_run(capsys, **config, host_discovery_script=str(discovery_script))
    assert code == 2 and "is not executable: chmod +x it" in err, err


def test_training_flags_are_checked_before_anything_starts(capsys, tmp_path):
    """An unknown or bad training flag, or a missing --input_files, fails the launcher (a dry
    run too) with run_pretraining's own message, before any rank or queued job starts."""
    recipe = dict(launcher="horovodrun", num_gpus=8,
                  recipe="launch/recipes/bert_large_phase1.flags")
    for flags, message in [([*DATA, "--no_such_flag=1"], "Unknown command line flag "
                            "'no_such_flag'"),
                           ([*DATA, "--learning_rate=nan"], "--learning_rate must be a finite "
                            "number > 0, got nan"),
                           (["--output_dir=/r"], "--input_files is required with --do_train")]:
        code, out, err = dry_run(capsys, **recipe, training_flags=flags)
        assert code == 2 and out == ""
        assert f"launch: error: run_pretraining.py would refuse its flags: {message}" in err, err
    code, _, err = dry_run(capsys, launcher="slurm", job_name="p1\n#SBATCH --account=other",
                           **{k: v for k, v in recipe.items() if k != "launcher"},
                           training_flags=DATA)
    assert code == 2 and "--job_name='p1\\n#SBATCH --account=other': use letters" in err, err


def test_hosts_with_their_own_slots_keep_them(capsys):
    # The host:slots form doctor --hosts takes; it used to become -H node1:4:4.
    for launcher in ("horovodrun", "mpirun"):
        command = command_of(dry_run(capsys, launcher=launcher, num_gpus=4,
                                     hosts=["node1:4", "node2:4"], training_flags=BARE)[1])
        assert command[1:5] == ["-np", "8", "-H", "node1:4,node2:4"], command
    command = command_of(dry_run(capsys, launcher="horovodrun", num_gpus=2,
                                 hosts=["node1:4", "node2"], training_flags=BARE)[1])
    assert command[1:5] == ["-np", "6", "-H", "node1:4,node2:2"], command
    code, _, err = dry_run(capsys, launcher="mpirun", hosts=["node1:²"], training_flags=BARE)
    assert code == 2 and "--hosts: 'node1:²' is not host or host:slots" in err, err


def test_an_identity_file_ssh_cannot_carry_is_refused(capsys):
    # Open MPI splits plm_rsh_args at spaces whatever the quotes: '-i', "'/my", "key'".
    for launcher in ("horovodrun", "mpirun"):
        code, out, err = dry_run(capsys, launcher=launcher, hosts=["n1", "n2"],
                                 ssh_identity_file="/home/me/my key", training_flags=BARE)
        assert code == 2 and not out
        assert "--ssh_identity_file='/home/me/my key': mpirun and horovodrun split" in err, err


def test_mpirun_across_hosts_excludes_non_routed_interfaces_and_forwards_settings(
        capsys, monkeypatch):
    # Horovod's docs/mpi.rst: lo and docker0 hang Open MPI and NCCL when no interface is named.
    for name, value in (("XLA_FLAGS", "--xla_gpu_autotune_level=4"), ("TF_CPP_MIN_LOG_LEVEL", "2"),
                        ("UCX_TLS", "rc"), ("CUDA_VISIBLE_DEVICES", "0,1")):
        monkeypatch.setenv(name, value)
    command = command_of(dry_run(capsys, launcher="mpirun", num_gpus=2, hosts=["n1", "n2"],
                                 allow_run_as_root=False, training_flags=BARE)[1])
    tail = command[command.index("^openib") + 1:command.index("python")]
    # CUDA_VISIBLE_DEVICES is each node's own (horovodrun does not forward it either).
    assert tail == ["-x", "TF_CPP_MIN_LOG_LEVEL", "-x", "UCX_TLS", "-x", "XLA_FLAGS",
                    "-x", "NCCL_SOCKET_IFNAME=^lo,docker0", "-mca", "btl_tcp_if_exclude",
                    "lo,docker0"], tail
    one_node = command_of(dry_run(capsys, launcher="mpirun", num_gpus=2, training_flags=BARE)[1])
    assert "btl_tcp_if_exclude" not in one_node


def test_slurm_keeps_an_existing_script_when_sbatch_is_missing(capsys, monkeypatch, tmp_path):
    script = tmp_path / "mine.sbatch"
    script.write_text("my own job\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    code = launch.launch(launch.LaunchConfig(launcher="slurm", sbatch_script=str(script),
                                             training_flags=BARE))
    assert code == 2 and "sbatch not found on PATH" in capsys.readouterr().err
    assert script.read_text() == "my own job\n"
    # A --sbatch_script that cannot be written was an OSError traceback once sbatch was found.
    sbatch = tmp_path / "sbatch"
    sbatch.write_text("#!/bin/sh\necho submitted > \"$0.ran\"\n")
    sbatch.chmod(0o755)
    code = launch.launch(launch.LaunchConfig(launcher="slurm", training_flags=BARE,
                                             sbatch_script="/sys/kernel/bert_tf/p1.sbatch"))
    assert code == 2 and ("--sbatch_script=/sys/kernel/bert_tf is not writable (/sys/kernel: "
                          in capsys.readouterr().err)
    assert not (tmp_path / "sbatch.ran").exists()


def test_ray_dry_run_prints_what_every_rank_runs(capsys):
    """--launcher=ray: --num_workers nodes x --num_gpus ranks set the accumulation steps; with
    --min_np the ranks run --elastic, keeping the recipe's global batch."""
    recipe = "launch/recipes/bert_large_phase1.flags"
    _, out, _ = dry_run(capsys, launcher="ray", num_workers=2, num_gpus=8, recipe=recipe,
                        training_flags=DATA)
    assert out.startswith("# on Ray (a local Ray node), every rank runs:\n"), out
    assert command_of(out) == ["python", RUN, f"--flagfile={RECIPES}/bert_large_phase1.flags",
                               "--num_accumulation_steps=64", *DATA]
    _, out, _ = dry_run(capsys, launcher="ray", min_np=8, max_np=16, recipe=recipe,
                        ray_address="10.0.0.1:6379", training_flags=DATA)
    assert out.startswith("# on Ray (10.0.0.1:6379)"), out
    assert command_of(out)[3:] == ["--elastic", "--global_batch_size=65536", *DATA]


@pytest.mark.parametrize("fields, message", [
    (dict(hosts=["n1"]), "--hosts is not for --launcher=ray"),
    (dict(controller="mpi"), "--controller=mpi: Horovod's Ray integration runs Gloo only"),
    (dict(min_np=2, start_np=4), "--start_np is for horovodrun"),
    (dict(max_np=4), "--max_np needs --min_np"),
    (dict(min_np=4, max_np=2), "elastic Ray needs 1 <= --min_np <= --max_np"),
    (dict(num_workers=0), "--num_workers=0 and --ray_cpus_per_worker=1 must be >= 1"),
    (dict(min_np=2, recipe=None), "--min_np (elastic Ray) needs --global_batch_size"),
])
def test_bad_ray_launches_name_the_flag(capsys, fields, message):
    config = dict(launcher="ray", recipe="launch/recipes/bert_large_phase1.flags",
                  training_flags=DATA)
    code, _, err = dry_run(capsys, **{**config, **fields})
    assert code == 2 and message in err, err
