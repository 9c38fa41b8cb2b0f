"""One process of the multi-process tests (started by tests/test_multiprocess.py, never collected).

    python tests/multiprocess_worker.py train OUT.json -- <jaxtrain train arguments>
        trains through the CLI (`--coordinator ... --process-id ...` among the arguments), then
        writes the exit code and which process owns each position of the hybrid mesh to OUT.json.
    python tests/multiprocess_worker.py spin [fail]
        joins the job described by JAXTRAIN_* variables and runs a cross-process reduction
        forever, printing a line per 20 rounds; with `fail`, this process fails after 20 rounds
        the way the CLI does (error line, exit 2, the peers told).

The device count per process comes from XLA_FLAGS, set by the parent before Python starts.
"""

from __future__ import annotations

import json
import sys
import time


def train(out: str, argv: list[str]) -> int:
    """Runs `python -m jaxtrain train` in this process and records the mesh layout."""
    from jaxtrain.cli import main, parse

    code = main(["train", *argv])
    import jax

    from jaxtrain.config import loader as config
    from jaxtrain.parallel import sharding

    args = parse(["train", *argv])
    mesh = sharding.make_mesh(config.load_config(args.config, args.overrides).mesh)
    owners = [[d.process_index for d in row.reshape(-1)] for row in mesh.devices]
    with open(out, "w") as f:
        json.dump(
            {
                "code": code,
                "process_index": jax.process_index(),
                "process_count": jax.process_count(),
                "mesh": sharding.mesh_shape(mesh),
                "owners_by_data_row": owners,
            },
            f,
        )
    return code


def spin(fail: bool) -> int:
    """Sums a globally sharded vector over and over; never returns on its own unless `fail`."""
    from jaxtrain.parallel import distributed

    distributed.initialize_from_env()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.asarray(jax.devices()), ("x",))
    x = jax.make_array_from_process_local_data(
        NamedSharding(mesh, PartitionSpec("x")), np.ones(jax.local_device_count(), np.float32)
    )
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))
    rounds = 0
    while True:
        value = float(total(x))
        rounds += 1
        if rounds % 20 == 0:
            print(f"round {rounds} sum {value}", flush=True)
            if fail:
                print("jaxtrain train: error: a failure in this process only", flush=True)
                distributed.abandon(2)
        time.sleep(0.01)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "train":
        sys.exit(train(sys.argv[2], sys.argv[sys.argv.index("--") + 1 :]))
    sys.exit(spin(sys.argv[2:3] == ["fail"]))
