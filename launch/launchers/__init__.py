"""One module per launcher (horovodrun, mpirun, slurm, docker), each building its command from
a common.LaunchConfig; launch/launch.py parses the flags and runs what they build."""
