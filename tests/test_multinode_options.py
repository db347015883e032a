"""Multi-node options without a cluster: launch.py's --hosts flags in the commands it prints,
and the doctor's --hosts logic on given node reports (tests/test_cluster.py runs them for real).
"""

import os
import shlex
import subprocess

from conftest import PYTHON, REPO, run_command

from bert_tf.tools.doctor_check import FAIL, OK, WARN
from bert_tf.tools.doctor_hosts import (
    HostSettings,
    check_interface,
    check_versions,
    host_checks,
    parse_hosts,
    rank_mapping,
)

LAUNCH = REPO / "launch" / "launch.py"
FORWARDED_PREFIXES = ("NCCL_", "HOROVOD_", "UCX_", "TF_", "XLA_", "OMP_", "KMP_", "CUDA_",
                      "PYTHONPATH")
RUN = f"{REPO}/run_pretraining.py"
CLUSTER_FLAGS = ("--hosts=n1,n2", "--num_gpus=2", "--network_interface=ib0",
                 "--ssh_identity_file=/k", "--ssh_port=2222")
# What run_pretraining.py requires (launch.py checks it before starting anything).
TRAINING = ["--bert_config_file=/shared/bert_config.json", "--input_files=/shared/data/*",
            "--output_dir=/shared/run", "--do_train"]


def printed_command(*flags):
    # Without this process's settings that mpirun would forward (launchers/mpirun.py).
    env = {k: v for k, v in os.environ.items() if not k.startswith(FORWARDED_PREFIXES)}
    proc = subprocess.run([PYTHON, LAUNCH, "--dry_run", *flags, *TRAINING],
                          env=env, capture_output=True, text=True, check=True)
    return shlex.split(proc.stdout.strip().splitlines()[-1])


def test_horovodrun_across_hosts_names_interface_and_ssh():
    assert printed_command("--launcher=horovodrun", "--controller=gloo", *CLUSTER_FLAGS) == [
        "horovodrun", "-np", "4", "-H", "n1:2,n2:2", "--gloo", "--network-interfaces", "ib0",
        "--ssh-identity-file", "/k", "-p", "2222", "python", RUN, *TRAINING]


def test_mpirun_across_hosts_forwards_env_and_names_interface_and_ssh():
    command = printed_command("--launcher=mpirun", "--noallow_run_as_root",
                              "--forward_env=PYTHONPATH,PATH,OMP_NUM_THREADS", *CLUSTER_FLAGS)
    tail = command[command.index("^openib") + 1:]
    assert tail == ["-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",  # PATH is forwarded already
                    "-x", "NCCL_SOCKET_IFNAME=ib0",
                    "-mca", "btl_tcp_if_include", "ib0", "-mca", "oob_tcp_if_include", "ib0",
                    "-mca", "plm_rsh_args", "-i /k -p 2222", "python", RUN, *TRAINING]


def test_launch_names_a_missing_launcher(tmp_path):
    proc = run_command([PYTHON, LAUNCH, "--launcher=horovodrun", *TRAINING],
                       env={"PATH": str(tmp_path)}, check=False)
    assert proc.returncode == 2
    assert "launch: error: horovodrun not found on PATH" in proc.stderr


def test_rank_mapping_fills_each_hosts_slots_in_order():
    hosts = parse_hosts(["n1:2", "n2:3"])
    assert [(r["host"], r["local_rank"], r["cross_rank"]) for r in rank_mapping(hosts)] \
        == [("n1", 0, 0), ("n1", 1, 0), ("n2", 0, 1), ("n2", 1, 1), ("n2", 2, 1)]
    assert parse_hosts(["n1"]) == [("n1", 1)]
    for bad in ("n1:x", "n1:0", ":2"):
        try:
            parse_hosts([bad])
        except ValueError as e:
            assert bad in str(e)
        else:
            raise AssertionError(f"{bad} accepted")


def node(python="3.11.7", tf="2.21.0", interfaces=None, **extra):
    return {"python": python, "tensorflow": tf, "horovod": "0.28.1", "bert_tf": "0.1.0",
            "interfaces": interfaces or {"lo": ["127.0.0.1"], "eth0": ["10.0.0.1"]}, **extra}


def test_doctor_names_the_node_with_other_versions():
    check = check_versions({"n1": node(), "n2": node(tf="2.17.0")})
    assert check.status == FAIL
    assert "n2: tensorflow 2.17.0 (vs 2.21.0 on n1)" in check.message
    assert check_versions({"n1": node(), "n2": node()}).status == OK


def test_doctor_interface_checks():
    both = {"eth0": ["10.0.0.1"], "ib0": ["10.1.0.1"]}
    probes = {"n1": node(interfaces=both), "n2": node(interfaces={"eth0": ["10.0.0.2"]})}
    assert check_interface(probes, None).status == OK  # only eth0 is common
    missing = check_interface(probes, ["ib0"])
    assert missing.status == FAIL and "n2 has no ib0" in missing.message
    several = check_interface({"n1": node(interfaces=both), "n2": node(interfaces=both)},
                                     None)
    assert several.status == WARN and "eth0, ib0" in several.message


def test_doctor_names_an_unwritable_output_dir(tmp_path):
    """Issue 37: an --output_dir the doctor could not create was an OSError traceback; now it
    is the output-directory check every command uses, as a FAIL (before any ssh)."""
    (tmp_path / "a_file").write_text("")
    checks = host_checks(HostSettings(hosts=[], python=PYTHON,
                                      output_dir=str(tmp_path / "a_file" / "run")))
    assert [(c.status, c.name) for c in checks] == [(FAIL, "shared --output_dir")]
    assert f"--output_dir={tmp_path}/a_file/run is not writable" in checks[0].message
    created = tmp_path / "new" / "run"
    assert host_checks(HostSettings(hosts=[], python=PYTHON, output_dir=str(created))) == []
    assert created.is_dir() and not os.listdir(created)  # the marker is removed again
