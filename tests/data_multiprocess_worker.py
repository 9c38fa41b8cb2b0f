"""One process of the two-process data test (started by tests/test_data_multiprocess.py).

    python tests/data_multiprocess_worker.py PORT PROCESS_ID STEPS OVERRIDES_JSON OUT.npz

Joins a 2-process job (2 CPU devices each) on 127.0.0.1:PORT, builds the training iterator of
configs/base.py + OVERRIDES for this process, turns every local batch into global arrays over a
mesh whose data axis spans both processes, and saves its own rows and the gathered global
arrays of each step to OUT.npz.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VOCAB = 100_000


def main(port: int, process_id: int, steps: int, overrides: dict, out: str) -> None:
    """Runs the steps and writes the arrays; see the module docstring."""
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from jaxtrain.config.loader import load_config
    from jaxtrain.data.pipeline import make_train_iterator

    cfg = load_config(str(REPO / "configs" / "base.py"), overrides)
    it = make_train_iterator(
        cfg, VOCAB, process_index=jax.process_index(), process_count=jax.process_count()
    )
    # jax.devices() lists process 0's devices first: the data axis runs over both processes.
    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    record = {}
    for step in range(steps):
        for key, local in next(it).items():
            global_array = jax.make_array_from_process_local_data(sharding, local)
            assert global_array.shape == (cfg.train.global_batch_size, cfg.train.seq_len)
            record[f"local/{step}/{key}"] = local
            record[f"global/{step}/{key}"] = np.asarray(
                multihost_utils.process_allgather(global_array, tiled=True)
            )
    np.savez(out, **record)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5])
