"""Starting `jax.distributed` from the environment a launcher leaves behind.

Recognised, in order: explicit `JAXTRAIN_COORDINATOR` (+ `JAXTRAIN_NUM_PROCESSES`,
`JAXTRAIN_PROCESS_ID`); the `MASTER_ADDR`/`MASTER_PORT`/`NNODES`/`NODE_RANK` that torchrun-style
and Primus launchers export; Slurm and OpenMPI, which `jax.distributed` detects by itself. With
none of these set (or a single process), nothing is initialised.
"""

from __future__ import annotations

import os

import jax


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def initialize_from_env(timeout_s: int = 300) -> bool:
    """Initialises multi-process JAX when the environment describes several processes."""
    if os.environ.get("JAXTRAIN_COORDINATOR"):
        jax.distributed.initialize(
            coordinator_address=os.environ["JAXTRAIN_COORDINATOR"],
            num_processes=_int_env("JAXTRAIN_NUM_PROCESSES", 1),
            process_id=_int_env("JAXTRAIN_PROCESS_ID", 0),
            initialization_timeout=timeout_s)
        return True
    if _int_env("NNODES", 1) > 1 and os.environ.get("MASTER_ADDR"):
        port = _int_env("JAX_COORDINATOR_PORT", _int_env("MASTER_PORT", 29500))
        jax.distributed.initialize(
            coordinator_address=f"{os.environ['MASTER_ADDR']}:{port}",
            num_processes=_int_env("NNODES", 1), process_id=_int_env("NODE_RANK", 0),
            initialization_timeout=timeout_s)
        return True
    if _int_env("SLURM_NTASKS", 1) > 1 or _int_env("OMPI_COMM_WORLD_SIZE", 1) > 1:
        jax.distributed.initialize(initialization_timeout=timeout_s)
        return True
    return False
