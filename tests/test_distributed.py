"""Which multi-process launch each launcher's environment describes (no processes started)."""

from __future__ import annotations

import pytest

from jaxtrain.parallel.distributed import DistributedError, Launch, resolve


def test_one_process_or_no_launcher_initialises_nothing():
    assert resolve({}) is None
    assert resolve({"NNODES": "1", "MASTER_ADDR": "h0", "NODE_RANK": "0"}) is None
    assert resolve({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) is None
    assert resolve({}, coordinator="h0:1234", num_processes=1, process_id=0) is None


def test_flags_win_and_borrow_missing_values_from_the_launcher():
    env = {"NNODES": "4", "NODE_RANK": "2", "MASTER_ADDR": "other"}
    assert resolve(env, coordinator="h0:1234", num_processes=2, process_id=1) == Launch(
        "flags", "h0:1234", 2, 1
    )
    assert resolve(env, coordinator="h0:1234") == Launch("flags", "h0:1234", 4, 2)
    assert resolve(
        {
            "JAXTRAIN_COORDINATOR": "h0",
            "JAXTRAIN_NUM_PROCESSES": "2",
            "JAXTRAIN_PROCESS_ID": "0",
            "JAX_COORDINATOR_PORT": "7000",
        }
    ) == Launch("flags", "h0:7000", 2, 0)
    with pytest.raises(DistributedError, match="--num-processes N --process-id I"):
        resolve({}, coordinator="h0:1234")


def test_primus_style_node_launch():
    env = {
        "NNODES": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "1234",
        "GPUS_PER_NODE": "8",
    }
    assert resolve(env) == Launch("NNODES/NODE_RANK", "10.0.0.1:1234", 2, 1, tuple(range(8)))
    assert resolve({**env, "GPUS_PER_NODE": ""}).local_device_ids is None
    assert resolve({**env, "MASTER_PORT": ""}).coordinator == "10.0.0.1:29500"
    with pytest.raises(DistributedError, match="NODE_RANK is not"):
        resolve({k: v for k, v in env.items() if k != "NODE_RANK"})


def test_torchrun_children_get_one_device_each_and_the_next_port():
    env = {
        "WORLD_SIZE": "16",
        "RANK": "9",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "8",
        "MASTER_ADDR": "h0",
        "MASTER_PORT": "29500",
        "NNODES": "2",
        "NODE_RANK": "1",
    }
    assert resolve(env) == Launch("torchrun", "h0:29501", 16, 9, (1,))


def test_slurm_tasks():
    env = {
        "SLURM_NTASKS": "4",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "0",
        "SLURM_STEP_NODELIST": "node[1-4]",
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_NUM_NODES": "4",
    }
    # jax derives the coordinator from the node list and job id.
    assert resolve(env) == Launch("slurm")
    assert resolve({**env, "MASTER_ADDR": "node1", "MASTER_PORT": "6000"}) == Launch(
        "slurm", "node1:6000", 4, 3, None
    )
    # Two tasks per node: each task drives one local device.
    two = {**env, "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "MASTER_ADDR": "node1"}
    assert resolve(two).local_device_ids == (1,)
    with pytest.raises(DistributedError, match="srun"):
        resolve({"SLURM_NTASKS": "4", "SLURM_JOB_ID": "77"})


def test_openmpi():
    env = {
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
    }
    assert resolve({**env, "OMPI_MCA_orte_hnp_uri": "1234.0;tcp://10.0.0.1:5000"}) == Launch(
        "openmpi"
    )
    assert resolve({**env, "MASTER_ADDR": "h0"}) == Launch("openmpi", "h0:29500", 2, 1, None)
    with pytest.raises(DistributedError, match="MASTER_ADDR"):
        resolve(env)


def test_bad_numbers_name_the_variable():
    with pytest.raises(DistributedError, match="NNODES='two'"):
        resolve({"NNODES": "two", "MASTER_ADDR": "h0"})
