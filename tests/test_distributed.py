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
    # Open MPI 4: the host mpirun runs on, a port from the job id (as jax's detection has it).
    uri = {"OMPI_MCA_orte_hnp_uri": "1234.0;tcp://10.0.0.1:5000", "OMPI_MCA_ess_base_jobid": "7"}
    launch = resolve({**env, **uri})
    assert (launch.source, launch.num_processes, launch.process_id) == ("openmpi", 2, 1)
    assert launch.coordinator.startswith("10.0.0.1:")
    assert 61440 <= int(launch.coordinator.rsplit(":", 1)[1]) <= 65535
    assert resolve({**env, **uri, "OMPI_MCA_ess_base_jobid": "8"}).coordinator != (
        launch.coordinator
    )
    assert resolve({**env, "MASTER_ADDR": "h0"}) == Launch("openmpi", "h0:29500", 2, 1, None)
    with pytest.raises(DistributedError, match="MASTER_ADDR"):
        resolve(env)


def test_mpirun_on_one_host_needs_no_address():
    env = {
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "PMIX_NAMESPACE": "prterun-vm-123@1",  # Open MPI 5: no URI
        "MASTER_PORT": "7000",
    }
    assert resolve(env) == Launch("openmpi", "127.0.0.1:7000", 2, 1, (1,))


def test_mpich_and_intel_mpi():
    env = {"PMI_SIZE": "2", "PMI_RANK": "0", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "0"}
    assert resolve(env) == Launch("mpich", "127.0.0.1:29500", 2, 0, (0,))
    multi = {**env, "MPI_LOCALNRANKS": "1"}
    assert resolve({**multi, "MASTER_ADDR": "h0"}) == Launch("mpich", "h0:29500", 2, 0, None)
    with pytest.raises(DistributedError, match="mpiexec -genv MASTER_ADDR"):
        resolve(multi)


def test_kubernetes_indexed_job():
    env = {
        "JOB_COMPLETION_INDEX": "3",
        "MASTER_ADDR": "train-0.train",
        "MASTER_PORT": "6000",
        "JAXTRAIN_NUM_PROCESSES": "4",
    }
    assert resolve(env) == Launch("kubernetes indexed Job", "train-0.train:6000", 4, 3)
    # The coordinator may also come as JAXTRAIN_COORDINATOR, the index filling the process id.
    flags = {"JOB_COMPLETION_INDEX": "2", "JAXTRAIN_COORDINATOR": "train-0.train:6000"}
    assert resolve({**flags, "JAXTRAIN_NUM_PROCESSES": "4"}) == Launch(
        "flags", "train-0.train:6000", 4, 2
    )
    with pytest.raises(DistributedError, match="JAXTRAIN_NUM_PROCESSES=<completions>"):
        resolve({k: v for k, v in env.items() if k != "JAXTRAIN_NUM_PROCESSES"})
    with pytest.raises(DistributedError, match="but no MASTER_ADDR"):
        resolve({k: v for k, v in env.items() if k != "MASTER_ADDR"})
    # One pod, or an indexed Job used for independent runs: nothing to join.
    assert resolve({"JOB_COMPLETION_INDEX": "0"}) is None


def test_bad_numbers_name_the_variable():
    with pytest.raises(DistributedError, match="NNODES='two'"):
        resolve({"NNODES": "two", "MASTER_ADDR": "h0"})
