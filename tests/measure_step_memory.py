"""Measures the memory one train step of a config takes per device on this process's CPU
devices; prints it as JSON. Run as a script, in its own process:

    MALLOC_MMAP_THRESHOLD_=65536 python tests/measure_step_memory.py CONFIG [--config.k=v ...]

Fake CPU devices have no allocator statistics, so the step's buffers are read from the
process's resident memory. With a fixed mmap threshold glibc maps every block of 64 KiB or
more on its own and unmaps it when freed, so the resident set follows XLA's live buffers: the
peak during a step (VmHWM, reset through /proc/self/clear_refs just before it) less the
resident set before it is what the step allocates (scratch and outputs that do not reuse the
donated state), to which the state and batch already resident are added."""

import json
import sys

import jax

from jaxtrain import compat
from jaxtrain.commands import bench


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _resident_bytes(tree) -> int:
    """Bytes of every device's shards of the arrays in `tree` (replicas counted each time)."""
    return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards)


def main(config: str, overrides: list[str]) -> None:
    cfg = compat.load_config_file(config, overrides, allow_unsupported=True)
    with bench.synthetic_trainer(cfg, steps=4) as trainer:
        batch = trainer.setup.global_batch(bench.synthetic_batch(cfg, trainer.spec.vocab_size))
        state, metrics = trainer.compiled_step(trainer.state, batch)  # first run's allocations
        jax.block_until_ready((state, metrics))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        before = _status_bytes("VmRSS")
        state, metrics = trainer.compiled_step(state, batch)
        jax.block_until_ready((state, metrics))
        growth = _status_bytes("VmHWM") - before
        devices = trainer.mesh.devices.size
        resident = _resident_bytes(state) + _resident_bytes(batch)
        print(json.dumps({"peak_bytes_per_device": (resident + growth) / devices}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
