"""Measures the memory one train step of a config takes per device on this process's CPU
devices; prints it as JSON. Run as a script, in its own process:

    MALLOC_MMAP_THRESHOLD_=65536 python tests/measure_step_memory.py CONFIG [--config.k=v ...]

Fake CPU devices have no allocator statistics, so the step's buffers are read from the
process's resident memory. With a fixed mmap threshold glibc maps every block of 64 KiB or
more on its own and unmaps it when freed, so the resident set follows XLA's live buffers: the
peak during a step (VmHWM, reset through /proc/self/clear_refs just before it) less the
resident set before it is what the step allocates (scratch and outputs that do not reuse the
donated state), to which the state and batch already resident are added.

The runtime releases a step's scratch after its outputs are ready, so the resident set read
as soon as `block_until_ready` returns may still hold part of the last step's (7-30 MB per
device of this 78 MB step, more on a busy machine), which then read as less growth. Each
baseline waits for the resident set to settle, and the largest of a few steps is reported."""

import json
import sys
import time

import jax

from jaxtrain import compat
from jaxtrain.commands import bench


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _settled_resident_bytes(poll_s: float = 0.05, still_reads: int = 5, limit_s: float = 10.0):
    """VmRSS once it has not fallen for `still_reads` reads in a row (or after `limit_s`)."""
    rss, still, deadline = _status_bytes("VmRSS"), 0, time.monotonic() + limit_s
    while still < still_reads and time.monotonic() < deadline:
        time.sleep(poll_s)
        now = _status_bytes("VmRSS")
        still = still + 1 if now >= rss else 0
        rss = min(rss, now)
    return rss


def _step_growth_bytes(trainer, state, batch):
    """The new state and the rise of the resident set's peak over its settled level during
    one step."""
    before = _settled_resident_bytes()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    state, metrics = trainer.compiled_step(state, batch)
    jax.block_until_ready((state, metrics))
    return state, _status_bytes("VmHWM") - before


def _resident_bytes(tree) -> int:
    """Bytes of every device's shards of the arrays in `tree` (replicas counted each time)."""
    return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards)


def main(config: str, overrides: list[str], steps: int = 3) -> None:
    cfg = compat.load_config_file(config, overrides, allow_unsupported=True)
    with bench.synthetic_trainer(cfg, steps=4) as trainer:
        batch = trainer.setup.global_batch(bench.synthetic_batch(cfg, trainer.spec.vocab_size))
        state, metrics = trainer.compiled_step(trainer.state, batch)  # first run's allocations
        jax.block_until_ready((state, metrics))
        growth = 0
        for _ in range(steps):
            state, step_growth = _step_growth_bytes(trainer, state, batch)
            growth = max(growth, step_growth)
        devices = trainer.mesh.devices.size
        resident = _resident_bytes(state) + _resident_bytes(batch)
        print(json.dumps({"peak_bytes_per_device": (resident + growth) / devices}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
