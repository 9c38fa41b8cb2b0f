"""Starting `jax.distributed` from flags or from the environment a launcher leaves behind.

Sources, first match wins (`resolve` reports which):

1. flags `--coordinator HOST:PORT --num-processes N --process-id I` (or `JAXTRAIN_COORDINATOR`,
   `JAXTRAIN_NUM_PROCESSES`, `JAXTRAIN_PROCESS_ID`); a missing count or id is taken from the
   launcher variables below;
2. torchrun children (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `MASTER_ADDR`): one process per
   accelerator, on `MASTER_PORT + 1` because torchrun's own store holds `MASTER_PORT`;
3. Primus' launcher and plain multi-node scripts (`NNODES`, `NODE_RANK`, `MASTER_ADDR`,
   `MASTER_PORT`, optional `GPUS_PER_NODE`): one process per node;
4. a Kubernetes indexed Job (`JOB_COMPLETION_INDEX`, the pod's index): the coordinator from
   `MASTER_ADDR` (pod 0's name under the Job's headless service) and the process count from
   `JAXTRAIN_NUM_PROCESSES` (or `NNODES`), both set in the pod template;
5. Slurm tasks (`SLURM_NTASKS` > 1, also under `srun --mpi=pmix`): with `MASTER_ADDR` exported
   the address is explicit, otherwise jax derives it from `SLURM_STEP_NODELIST` and the job id;
6. Open MPI's `mpirun` (`OMPI_COMM_WORLD_SIZE` > 1): the coordinator is `MASTER_ADDR`, else
   127.0.0.1 when every rank is on this host, else the host `mpirun` runs on (Open MPI 4's
   `OMPI_MCA_orte_hnp_uri`; Open MPI 5 exports none: export `MASTER_ADDR` there);
7. MPICH and Intel MPI's `mpiexec` (`PMI_SIZE` > 1, `PMI_RANK`): `MASTER_ADDR`, else 127.0.0.1
   when every rank is on this host (`MPI_LOCALNRANKS`).

`JAX_COORDINATOR_PORT` overrides the port everywhere. With no source (or one process) nothing is
initialised and the run is single-process.

Failure modes. A process that cannot reach the coordinator gets a `DistributedError` naming the
address after `JAXTRAIN_INIT_TIMEOUT` seconds (default 300). Process 0 hosts the coordinator and
waits the same time for the others; jax then aborts it with `DEADLINE_EXCEEDED ... RegisterTask`
(a fatal log, not an exception), after the line this module prints before waiting. Once running,
every process watches the others (`jaxtrain.parallel.peer_watch`): a process silent for
`JAXTRAIN_HEARTBEAT_TIMEOUT` seconds (default 30) is reported lost by number, with the command
that resumes, and the others exit with status 3. JAX's own heartbeat timeout is twice that, as a
backstop; when process 0 itself dies, JAX aborts the others at once and one jaxtrain line
follows its log. The exit barrier waits at most `JAXTRAIN_SHUTDOWN_TIMEOUT` seconds (default
120) for the slowest process.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import sys
import time
import zlib
from collections.abc import Mapping
from pathlib import Path

import jax
from jax._src import distributed as jax_distributed

from jaxtrain.errors import JaxtrainError
from jaxtrain.parallel import native_log_filter, peer_watch

DEFAULT_INIT_TIMEOUT_S = 300
# Beats come from a thread of their own, so a long compile or checkpoint write on one host does
# not silence it; 30 s frees a crashed job's nodes well within a minute.
DEFAULT_HEARTBEAT_TIMEOUT_S = 30
# Processes reach the exit barrier within seconds of each other (each has already waited for its
# part of the last checkpoint); two minutes bounds the wait on one that never comes.
DEFAULT_SHUTDOWN_TIMEOUT_S = 120
# torchrun's rendezvous store listens on MASTER_PORT; the jax coordinator takes the next one.
TORCHRUN_PORT_OFFSET = 1
DEFAULT_PORT = 29500


class DistributedError(JaxtrainError, RuntimeError):
    """Multi-process start-up failed; the message says which process, address and setting."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """How to start `jax.distributed`: None fields are left to jax's own cluster detection."""

    source: str  # where the settings came from, for the log line
    coordinator: str | None = None  # "host:port"
    num_processes: int | None = None
    process_id: int | None = None
    local_device_ids: tuple[int, ...] | None = None


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise DistributedError(
            f"environment variable {name}={value!r} is not an integer."
        ) from None


def _first_int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = _int(env, name)
        if value is not None:
            return value
    return None


def _address(env: Mapping[str, str], host: str, default_port: int | None) -> str:
    port = _int(env, "JAX_COORDINATOR_PORT") or default_port or DEFAULT_PORT
    return f"{host}:{port}"


def _local_ids(local_rank: int | None, local_size: int | None) -> tuple[int, ...] | None:
    """One device per process when a launcher starts several processes on a host."""
    if local_rank is None or not local_size or local_size <= 1:
        return None
    return (local_rank,)


def resolve(
    env: Mapping[str, str] | None = None,
    *,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> Launch | None:
    """The multi-process launch the flags and environment describe, or None for one process."""
    env = os.environ if env is None else env
    coordinator = coordinator or env.get("JAXTRAIN_COORDINATOR") or None
    if coordinator:
        count = num_processes or _first_int(
            env,
            "JAXTRAIN_NUM_PROCESSES",
            "NNODES",
            "SLURM_NTASKS",
            "OMPI_COMM_WORLD_SIZE",
            "PMI_SIZE",
            "WORLD_SIZE",
        )
        rank = (
            process_id
            if process_id is not None
            else _first_int(
                env,
                "JAXTRAIN_PROCESS_ID",
                "NODE_RANK",
                "SLURM_PROCID",
                "OMPI_COMM_WORLD_RANK",
                "PMI_RANK",
                "RANK",
                "JOB_COMPLETION_INDEX",
            )
        )
        if count is None or rank is None:
            raise DistributedError(
                f"--coordinator {coordinator} needs the process count and this process's id: "
                "pass --num-processes N --process-id I (or JAXTRAIN_NUM_PROCESSES / "
                "JAXTRAIN_PROCESS_ID)."
            )
        if ":" not in coordinator:
            coordinator = _address(env, coordinator, None)
        return Launch("flags", coordinator, count, rank) if count > 1 else None

    master = env.get("MASTER_ADDR", "").strip()
    world, rank, local = (_int(env, "WORLD_SIZE"), _int(env, "RANK"), _int(env, "LOCAL_RANK"))
    if master and world and world > 1 and rank is not None and local is not None:
        master_port = _int(env, "MASTER_PORT") or DEFAULT_PORT
        return Launch(
            "torchrun",
            _address(env, master, master_port + TORCHRUN_PORT_OFFSET),
            world,
            rank,
            _local_ids(local, _int(env, "LOCAL_WORLD_SIZE") or world),
        )

    index = _int(env, "JOB_COMPLETION_INDEX")
    if index is not None and (master or _int(env, "JAXTRAIN_NUM_PROCESSES")):
        count = _first_int(env, "JAXTRAIN_NUM_PROCESSES", "NNODES")
        if not master or count is None:
            raise DistributedError(
                f"JOB_COMPLETION_INDEX={index} (a Kubernetes indexed Job) with "
                f"{'MASTER_ADDR' if master else 'JAXTRAIN_NUM_PROCESSES'} but no "
                f"{'JAXTRAIN_NUM_PROCESSES' if master else 'MASTER_ADDR'}: set both in the pod "
                "template, MASTER_ADDR=<job>-0.<headless service> and JAXTRAIN_NUM_PROCESSES="
                "<completions> (docs/parallelism.md has a Job manifest)."
            )
        if count > 1:
            return Launch(
                "kubernetes indexed Job",
                _address(env, master, _int(env, "MASTER_PORT")),
                count,
                index,
            )

    nnodes = _int(env, "NNODES")
    if master and nnodes and nnodes > 1:
        node_rank = _int(env, "NODE_RANK")
        if node_rank is None:
            raise DistributedError(
                f"NNODES={nnodes} and MASTER_ADDR={master} are set but "
                "NODE_RANK is not: export this node's rank (0..NNODES-1)."
            )
        gpus = _int(env, "GPUS_PER_NODE")
        return Launch(
            "NNODES/NODE_RANK",
            _address(env, master, _int(env, "MASTER_PORT")),
            nnodes,
            node_rank,
            tuple(range(gpus)) if gpus else None,
        )

    tasks = _int(env, "SLURM_NTASKS")
    if tasks and tasks > 1:
        task = _int(env, "SLURM_PROCID")
        if task is None or "SLURM_STEP_NODELIST" not in env:
            raise DistributedError(
                f"SLURM_NTASKS={tasks} but this is not a Slurm task (no SLURM_PROCID / "
                "SLURM_STEP_NODELIST): start training with `srun python -m jaxtrain ...` "
                "(see tools/launch_slurm.sbatch)."
            )
        if master:
            nodes = _first_int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES") or tasks
            per_node = tasks // max(nodes, 1)
            return Launch(
                "slurm",
                _address(env, master, _int(env, "MASTER_PORT")),
                tasks,
                task,
                _local_ids(_int(env, "SLURM_LOCALID"), per_node),
            )
        return Launch("slurm")

    size = _int(env, "OMPI_COMM_WORLD_SIZE")
    if size and size > 1:
        local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
        host = master or ("127.0.0.1" if local_size == size else _ompi_launcher_host(env))
        if host is None:
            raise DistributedError(
                f"OMPI_COMM_WORLD_SIZE={size} over several hosts but OpenMPI exported no "
                "coordinator URI (OpenMPI 5 / PMIx): export MASTER_ADDR=<first host> (mpirun -x "
                "MASTER_ADDR) or pass --coordinator HOST:PORT."
            )
        return Launch(
            "openmpi",
            _address(env, host, _int(env, "MASTER_PORT") or _job_port(env)),
            size,
            _int(env, "OMPI_COMM_WORLD_RANK"),
            _local_ids(_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), local_size),
        )

    size = _int(env, "PMI_SIZE")
    if size and size > 1:
        local_size = _int(env, "MPI_LOCALNRANKS")
        host = master or ("127.0.0.1" if local_size == size else None)
        if host is None or _int(env, "PMI_RANK") is None:
            raise DistributedError(
                f"PMI_SIZE={size} (MPICH / Intel MPI mpiexec) over several hosts: export "
                "MASTER_ADDR=<first host> to every rank (mpiexec -genv MASTER_ADDR HOST) or "
                "pass --coordinator HOST:PORT."
            )
        return Launch(
            "mpich",
            _address(env, host, _int(env, "MASTER_PORT") or _job_port(env)),
            size,
            _int(env, "PMI_RANK"),
            _local_ids(_int(env, "MPI_LOCALRANKID"), local_size),
        )
    return None


def _ompi_launcher_host(env: Mapping[str, str]) -> str | None:
    """The host `mpirun` runs on, from Open MPI 4's URI (as jax's own detection reads it)."""
    found = re.search(r"tcp://(.+?)[,:]|tcp6://\[(.+?)[,\]]", env.get("OMPI_MCA_orte_hnp_uri", ""))
    if found is None:
        return None
    host = next(g for g in found.groups() if g is not None)
    return f"[{host}]" if ":" in host else host


def _job_port(env: Mapping[str, str]) -> int:
    """A coordinator port derived from the MPI job's id, so two jobs on one host differ.

    In the ephemeral range jax's own Open MPI detection uses (61440-65535)."""
    job = next(
        (env[k] for k in ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID") if env.get(k)),
        None,
    )
    if job is None:
        return DEFAULT_PORT
    return 61440 + zlib.crc32(job.encode()) % 4096


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise DistributedError(f"coordinator address {address!r} is not HOST:PORT.")
    return host.strip("[]"), int(port)


def wait_for_coordinator(
    address: str, timeout_s: float, *, process_id: int = 1, num_processes: int = 2
) -> None:
    """Polls until the coordinator accepts TCP connections; DistributedError after timeout_s.

    jax's own wait ends in a fatal abort with a terse gRPC status; this check turns the
    commonest failure (process 0 not started, wrong address, a firewall) into a clear error.
    """
    host, port = _split_address(address)
    deadline = time.monotonic() + timeout_s
    last: OSError | None = None
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, max(timeout_s, 0.1))):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    raise DistributedError(
        f"process {process_id} of {num_processes} could not reach the coordinator at {address} "
        f"within {timeout_s:g} s ({last}). Process 0 serves it: check that process 0 is running "
        f"with the same coordinator and process count, that {host} resolves from this host and "
        f"port {port} is open (firewall), or raise JAXTRAIN_INIT_TIMEOUT."
    )


def initialize(
    launch: Launch,
    *,
    init_timeout_s: int = DEFAULT_INIT_TIMEOUT_S,
    heartbeat_timeout_s: int = DEFAULT_HEARTBEAT_TIMEOUT_S,
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT_S,
) -> None:
    """Starts `jax.distributed` for a resolved launch (call before any other jax work).

    Then starts the watch on the other processes (`heartbeat_timeout_s`) and the one-line
    report of runtime aborts; `stop_watching()` ends the watch at a clean exit.
    """
    if launch.coordinator is not None and launch.process_id:
        start = time.monotonic()
        wait_for_coordinator(
            launch.coordinator,
            init_timeout_s,
            process_id=launch.process_id,
            num_processes=launch.num_processes or 0,
        )
        init_timeout_s = max(1, int(init_timeout_s - (time.monotonic() - start)))
    if launch.process_id == 0:
        # jax aborts process 0 with a bare gRPC status if the others never come; say first
        # what it is waiting for.
        print(
            f"jaxtrain: process 0 of {launch.num_processes} ({launch.source}) serving the "
            f"coordinator at {launch.coordinator}; waiting up to {init_timeout_s} s for every "
            "process to connect",
            file=sys.stderr,
            flush=True,
        )
    if launch.process_id:  # where losing the coordinator aborts the process natively
        native_log_filter.start()
    kwargs = {}
    if launch.local_device_ids is not None:
        kwargs["local_device_ids"] = list(launch.local_device_ids)
    jax.distributed.initialize(
        coordinator_address=launch.coordinator,
        num_processes=launch.num_processes,
        process_id=launch.process_id,
        initialization_timeout=init_timeout_s,
        heartbeat_timeout_seconds=peer_watch.jax_heartbeat_timeout(heartbeat_timeout_s),
        shutdown_timeout_seconds=shutdown_timeout_s,
        **kwargs,
    )
    _start_watching(heartbeat_timeout_s, launch.coordinator or "(detected by jax)")


_WATCH: peer_watch.PeerWatch | None = None


def coordination_client():
    """JAX's client of the coordination service, or None in a single-process run.

    jax keeps it in a private module (Orbax reads it there too); this is the one place that does.
    """
    return jax_distributed.global_state.client


def preemption_service_running() -> bool:
    """Whether JAX's preemption service (SIGTERM -> an agreed stop step) is running."""
    return jax_distributed.global_state.preemption_sync_manager is not None


def _start_watching(timeout_s: int, coordinator: str) -> None:
    global _WATCH
    client = coordination_client()
    if client is None or jax.process_count() < 2:
        return
    hint = peer_watch.ResumeHint()
    _WATCH = peer_watch.PeerWatch(
        client, jax.process_index(), jax.process_count(), timeout_s=timeout_s, hint=hint
    ).start()
    peer_watch.install_abort_report(jax.process_index(), jax.process_count(), coordinator, hint)


def report_checkpoints_in(directory: str | os.PathLike) -> None:
    """Names the run's checkpoint folder in the line a lost process prints, so it says which
    step the run resumes from (no-op in a single-process run, which has no watch)."""
    if _WATCH is not None:
        _WATCH.hint.checkpoint_dir = Path(directory)


def stop_watching() -> None:
    """Ends the watch on the other processes: this one is leaving on purpose, its work done."""
    if _WATCH is not None:
        _WATCH.stop()


def explain_runtime_error(error: BaseException) -> None:
    """After a collective failed in a multi-process run, lets the watch name a lost process.

    Collectives over TCP (gloo on CPU) fail at once when a peer's connection drops; the watch
    needs up to its timeout to tell which peer. When it does, it reports and exits; otherwise
    this returns and the error is reported as it is.
    """
    if _WATCH is None or not isinstance(error, jax.errors.JaxRuntimeError):
        return
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    print(
        f"jaxtrain: a collective failed ({first[:200]}); checking which process was lost "
        f"(up to {_WATCH.timeout_s:g} s)",
        file=sys.stderr,
        flush=True,
    )
    _WATCH.wait_for_verdict(_WATCH.timeout_s + 2 * _WATCH.interval_s)


def abandon(exit_code: int) -> None:
    """Leaves a multi-process job after an error, at once; returns in a single-process run.

    The peers are told (they stop within a beat instead of waiting in a collective for this
    process), and the exit skips JAX's shutdown barrier, which would wait for peers that are
    themselves waiting for this process.
    """
    if _WATCH is None:
        return
    _WATCH.stop(failed=True)
    sys.stdout.flush()
    sys.stderr.flush()
    peer_watch.end_child_processes()
    native_log_filter.finish()
    os._exit(exit_code)


def initialize_from_env(
    timeout_s: int | None = None,
    *,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    env: Mapping[str, str] | None = None,
) -> bool:
    """Initialises multi-process JAX when flags or the environment describe several processes.

    Returns whether it did. `timeout_s` defaults to `JAXTRAIN_INIT_TIMEOUT` (else 300 s); a
    process silent for `JAXTRAIN_HEARTBEAT_TIMEOUT` seconds (else 30) is reported lost; the exit
    barrier waits `JAXTRAIN_SHUTDOWN_TIMEOUT` seconds (else 120).
    """
    env = os.environ if env is None else env
    launch = resolve(
        env, coordinator=coordinator, num_processes=num_processes, process_id=process_id
    )
    if launch is None:
        return False
    if jax.distributed.is_initialized():
        # A notebook or an embedding program may have joined the job already; jax refuses a
        # second initialisation.
        return True
    if timeout_s is None:
        timeout_s = _int(env, "JAXTRAIN_INIT_TIMEOUT") or DEFAULT_INIT_TIMEOUT_S
    heartbeat = _int(env, "JAXTRAIN_HEARTBEAT_TIMEOUT") or DEFAULT_HEARTBEAT_TIMEOUT_S
    shutdown = _int(env, "JAXTRAIN_SHUTDOWN_TIMEOUT") or DEFAULT_SHUTDOWN_TIMEOUT_S
    initialize(
        launch, init_timeout_s=timeout_s, heartbeat_timeout_s=heartbeat, shutdown_timeout_s=shutdown
    )
    return True
