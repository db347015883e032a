"""Ray: run_pretraining.py's training on Horovod's Ray integration (horovod.ray.RayExecutor) on
an existing Ray cluster (--ray_address) or on one Ray node started here for the job.

Every rank is a Ray actor (Horovod's BaseHorovodWorker) that runs run_pretraining.py's own entry
point, `main` under absl's app.run, with the same flags as under horovodrun (recipe, computed
batch flags, pass-through flags), from the directory launch.py was started in, so the recipe's
relative paths and resumes work as with the other launchers; the repository and the venv must
be at the same paths on every Ray node (as for horovodrun across --hosts). Static: --num_workers
Ray nodes x --num_gpus ranks each (Horovod's colocated placement, one node per placement-group
bundle). Elastic (--min_np): Horovod's elastic Ray driver, which finds slots in the Ray cluster's
resources (--ray_cpus_per_worker, --ray_gpus_per_worker per rank); the training runs
run_pretraining.py --elastic as under horovodrun's elastic mode.

Environment: the ranks get this process's environment as horovodrun's do (all but Horovod's
IGNORE_REGEXES, horovod/runner/common/util/env.py), without the variables that name this
process's Ray session or the job's Horovod rendezvous. Ray sets OMP_NUM_THREADS to the actor's
CPU count when it is unset (ray/_private/utils.py, set_omp_num_threads_if_unset); a rank removes
it again when it was unset here, so TensorFlow's and oneDNN's thread pools are sized as under
horovodrun (the library sets no thread counts for training).

A SIGTERM or SIGINT to launch.py reaches every rank as SIGTERM, wherever its node is (a Ray task
pinned to the rank's node signals the actor's process), so the run saves after the same update
on every rank and exits 0; a rerun resumes from --output_dir like any rerun.
"""

import os
import runpy
import signal
import sys
import threading

import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from launchers.common import LaunchConfig, LaunchError, training_args

# Set per rank by Horovod's Ray executor or per process by Ray: never forwarded from here.
_NOT_FORWARDED_PREFIXES = ("RAY_", "HOROVOD_GLOO_", "HOROVOD_RANK", "HOROVOD_SIZE",
                           "HOROVOD_LOCAL_", "HOROVOD_CROSS_", "HOROVOD_HOSTNAME",
                           "HOROVOD_ELASTIC", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS")
# Ray's own thread default; removed in the rank when this process did not set it.
_RAY_THREAD_DEFAULTS = ("OMP_NUM_THREADS",)
POLL_SECONDS = 1.0


def ray_command(config: LaunchConfig) -> list[str]:
    """What every rank runs (python run_pretraining.py and its flags), after checking the
    Ray-specific flags."""
    check_ray_values(config)
    world = config.min_np if config.min_np else config.num_workers * config.num_gpus
    return [config.python] + training_args(config, world)


def check_ray_values(config: LaunchConfig) -> None:
    if config.hosts:
        raise LaunchError("--hosts is not for --launcher=ray: Ray places the ranks on its "
                          "nodes (--num_workers nodes x --num_gpus ranks, or --min_np elastic)")
    if config.controller == "mpi":
        raise LaunchError("--controller=mpi: Horovod's Ray integration runs Gloo only; drop "
                          "--controller or use --controller=gloo")
    if config.num_workers < 1 or config.ray_cpus_per_worker < 1:
        raise LaunchError(f"--num_workers={config.num_workers} and --ray_cpus_per_worker="
                          f"{config.ray_cpus_per_worker} must be >= 1")
    if config.start_np is not None:
        raise LaunchError("--start_np is for horovodrun: Horovod's elastic Ray driver starts "
                          "once --min_np slots are free, with every free slot up to --max_np")
    if config.max_np is not None and not config.min_np:
        raise LaunchError("--max_np needs --min_np (elastic mode on Ray)")
    if config.min_np is not None and not 1 <= config.min_np <= (config.max_np or config.min_np):
        raise LaunchError(f"--min_np={config.min_np}, --max_np={config.max_np}: elastic Ray "
                          "needs 1 <= --min_np <= --max_np")


def forwarded_env(environ=None) -> dict:
    """The environment the ranks get (module docstring)."""
    from horovod.runner.common.util.env import is_exportable  # horovodrun's own rule

    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items()
            if is_exportable(name) and not name.startswith(_NOT_FORWARDED_PREFIXES)}


# ------------------------------------------------------------------ in the Ray workers


class RankRegistry:
    """A Ray actor on the driver's node: each rank registers its node and process id, so a stop
    signal reaches every rank, also the ones an elastic driver started later."""

    def __init__(self):
        self.ranks = {}

    def add(self, node_id: str, pid: int) -> None:
        self.ranks[(node_id, pid)] = True

    def all(self) -> list:
        return list(self.ranks)


def train_rank(command: list[str], cwd: str, unset: list[str], registry) -> int:
    """Runs in each rank's Ray actor: run_pretraining.py (command[1]) as its own process would,
    with sys.argv = its flags; returns its exit status (absl's app.run always exits).

    Args:
      command: [python, run_pretraining.py, flags...], as ray_command built it.
      cwd: the directory launch.py was started in (the recipes' relative paths).
      unset: variables Ray set in this process that the launching environment did not have.
      registry: the RankRegistry handle to register this process with, for stop signals.
    Returns:
      The exit status: 0, or run_pretraining's (1 for a reported error).
    """
    ray.get(registry.add.remote(ray.get_runtime_context().get_node_id(), os.getpid()))
    for name in unset:
        os.environ.pop(name, None)
    # The forwarded PYTHONPATH arrives after this interpreter started: add it as Python would.
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    os.chdir(cwd)
    sys.argv = command[1:]
    try:
        runpy.run_path(command[1], run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def _signal_process(pid: int) -> None:
    """On the rank's node: SIGTERM to its actor's process (gone already: nothing to do)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------ the driver (launch.py)


def run_on_ray(config: LaunchConfig, command: list[str]) -> int:
    """Connects to --ray_address (or starts a local Ray node), runs the ranks, waits; returns
    the job's exit status: 0 when every rank exited 0."""
    # This module and its functions are pickled by value: the Ray workers do not have launch/
    # on their sys.path (its `launchers` package is found only next to launch.py).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    env = forwarded_env()
    unset = [name for name in _RAY_THREAD_DEFAULTS if name not in os.environ]
    try:
        ray.init(address=config.ray_address, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        print(f"launch: error: --ray_address={config.ray_address}: cannot connect to Ray "
              f"({e}); start the cluster (ray start --head) or drop --ray_address for a local "
              "one", file=sys.stderr)
        return 2
    try:
        registry = ray.remote(RankRegistry).options(
            num_cpus=0, scheduling_strategy=_this_node()).remote()
        executor = _executor(config)
        job = (command, os.getcwd(), unset, registry)
        run = _run_elastic if config.min_np else _run_static
        with _stop_signals_forwarded(registry) as stops:
            return run(executor, env, job, stops)
    finally:
        ray.shutdown()


def _this_node() -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def _executor(config: LaunchConfig):
    from horovod.ray import RayExecutor

    gpus = config.ray_gpus_per_worker
    if gpus is None:
        gpus = 1 if ray.cluster_resources().get("GPU", 0) else 0
    settings = RayExecutor.create_settings(timeout_s=300)
    if config.network_interface:
        settings.nics = set(config.network_interface)
    resources = dict(cpus_per_worker=config.ray_cpus_per_worker, use_gpu=gpus > 0,
                     gpus_per_worker=gpus or None)
    if config.min_np:
        _allow_ray_state_api()
        return RayExecutor(settings, min_workers=config.min_np, max_workers=config.max_np,
                           **resources)
    return RayExecutor(settings, num_hosts=config.num_workers,
                       num_workers_per_host=config.num_gpus, **resources)


def _allow_ray_state_api() -> None:
    """Horovod 0.28.1's elastic Ray driver places its log queue with ray.state.current_node_id()
    (horovod/ray/elastic_v2.py). Ray 2.60 still has `ray.state` as a deprecation wrapper of
    ray._private.state; should a Ray release drop it, the same function is provided from there."""
    if not hasattr(ray, "state") or not hasattr(ray.state, "current_node_id"):
        from ray._private import state

        ray.state = state


def _run_static(executor, env: dict, job: tuple, stops) -> int:
    """Every rank's exit status collected; a rank whose actor died counts as a failure."""
    executor.start(extra_env_vars=env)
    try:
        pending = executor.run_remote(train_rank, args=list(job))
        codes = []
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_SECONDS)
            codes += [_exit_status(ref) for ref in done]
            stops.forward_requested()
        return next((code for code in codes if code), 0)
    finally:
        executor.shutdown()


def _exit_status(ref) -> int:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as e:
        print(f"launch: a rank's Ray worker failed: {e}; the last checkpoint in --output_dir is "
              "kept: rerun the same command to resume from it", file=sys.stderr, flush=True)
        return 1


def _run_elastic(executor, env: dict, job: tuple, stops) -> int:
    """Horovod's elastic driver in a thread (its wait does not return to Python for a signal);
    this thread waits in bounded steps so that the stop signals are handled."""
    outcome = {}

    def drive():
        try:
            executor.start(extra_env_vars=env)
            outcome["codes"] = executor.run(train_rank, args=list(job))
        except Exception as e:  # the driver's own failure, reported below
            outcome["error"] = e

    thread = threading.Thread(target=drive, name="horovod-elastic-driver", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(POLL_SECONDS)
        stops.forward_requested()
    if "error" in outcome:
        print(f"launch: the elastic Horovod job on Ray failed: {outcome['error']}",
              file=sys.stderr, flush=True)
        return 1
    return next((code for code in outcome["codes"] if code), 0)


class _stop_signals_forwarded:
    """While active, SIGTERM/SIGINT to this process are sent on to every registered rank as
    SIGTERM by `forward_requested()`, which the waiting loops call (a second one too: the ranks
    then exit at once, as under horovodrun). The handler only counts: Ray calls inside a signal
    handler could run within the Ray call the main thread was in."""

    def __init__(self, registry):
        self.registry = registry
        self.previous = {}
        self.received = []
        self.forwarded = 0

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _record(self, signum, frame):
        self.received.append(signal.Signals(signum).name)

    def forward_requested(self) -> None:
        while self.forwarded < len(self.received):
            name = self.received[self.forwarded]
            self.forwarded += 1
            print(f"launch: {name}: asking the training processes to save and stop (again "
                  "to stop at once)", file=sys.stderr, flush=True)
            kill = ray.remote(_signal_process)
            ranks = ray.get(self.registry.all.remote(), timeout=30)
            ray.get([kill.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node_id, soft=False)).remote(pid) for node_id, pid in ranks], timeout=30)
