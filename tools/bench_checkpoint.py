"""Checkpoint throughput: save and restore a train state of a few GB with jaxtrain's Checkpointer,
next to a plain sequential numpy write and read of the same bytes on the same disk.

    python tools/bench_checkpoint.py                     # hidden 2048, 6 layers, vocab 32K: 5.3 GB
    python tools/bench_checkpoint.py --layers 12         # 9.0 GB (needs ~28 GB of memory)
    python tools/bench_checkpoint.py --dir /scratch/b    # another disk

The state is a Llama-shaped model's float32 parameters plus both Adam moments, filled with
random values (nearly incompressible, like trained weights), on every local device. Figures:
  save: how long the training loop is blocked (device-to-host copy and checksums), then the
        time until the step is durable (Orbax commit and an fsync of every file written);
  restore: from files evicted from the page cache (posix_fadvise DONTNEED after fsync),
        checksums verified, as a resumed run does;
  plain: numpy `tofile` of every array into one file + fsync, then `fromfile` after eviction.
GB are 10^9 bytes. Needs about 3x the state size in memory (the state, Orbax's host copy while
it writes, read buffers) and 2x on disk. The files go into a fresh subfolder of --dir (created
when missing), removed afterwards with --dir itself when the tool created it; nothing else in
--dir is touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Runs from a clone without installing: the repository (holding jaxtrain/) is importable.
_TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(_TOOLS.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jaxtrain.configs import base  # noqa: E402

from jaxtrain import sharding  # noqa: E402
from jaxtrain.checkpoint import Checkpointer  # noqa: E402
from jaxtrain.checksums import checksums  # noqa: E402
from jaxtrain.models.spec import ModelSpec  # noqa: E402
from jaxtrain.train import state as state_lib  # noqa: E402
from jaxtrain.train.optimizer import make_optimizer  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (model size and target folder)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", type=Path, default=Path("runs/bench_checkpoint"),
                   help="folder on the disk to measure; the files go into a fresh subfolder, "
                        "removed after")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--intermediate", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--keep-files", action="store_true",
                   help="leave the files (in their subfolder of --dir)")
    return p.parse_args(argv)


def _random_state(layout: state_lib.StateLayout) -> dict[str, Any]:
    """Random floats (zeros for integer leaves) written straight into their shards."""
    leaves, treedef = jax.tree.flatten(layout.abstract)

    def fill(key: jax.Array) -> Any:
        keys = jax.random.split(key, len(leaves))
        return treedef.unflatten([
            jax.random.normal(k, a.shape, a.dtype) if jnp.issubdtype(a.dtype, jnp.floating)
            else jnp.zeros(a.shape, a.dtype) for k, a in zip(keys, leaves, strict=True)])

    return jax.jit(fill, out_shardings=layout.shardings)(jax.random.key(0))


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _sync_and_evict(folder: Path) -> bool:
    """fsync every file under `folder`, then drop its pages from the page cache."""
    evicted = hasattr(os, "posix_fadvise")
    for path in _files(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            if evicted:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return evicted


def _rate(num_bytes: int, seconds: float) -> str:
    return f"{seconds:7.2f} s  {num_bytes / 1e9 / max(seconds, 1e-9):6.2f} GB/s"


def _plain(state: Any, folder: Path) -> tuple[float, float, bool]:
    """(write seconds, read seconds, evicted) for one sequential file of every array."""
    folder.mkdir(parents=True)
    path = folder / "state.bin"
    arrays = jax.tree.leaves(state)
    start = time.perf_counter()
    with open(path, "wb") as f:
        for x in arrays:
            np.asarray(x).tofile(f)
        f.flush()
        os.fsync(f.fileno())
    write = time.perf_counter() - start
    evicted = _sync_and_evict(folder)
    start = time.perf_counter()
    with open(path, "rb") as f:
        for x in arrays:
            np.fromfile(f, dtype=x.dtype, count=x.size)
    return write, time.perf_counter() - start, evicted


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints the figures."""
    args = parse_args(argv)
    spec = ModelSpec(family="llama", vocab_size=args.vocab, hidden_size=args.hidden,
                     num_layers=args.layers, num_heads=args.heads, num_kv_heads=args.heads,
                     head_dim=args.hidden // args.heads, intermediate_size=args.intermediate,
                     max_seq_len=2048)
    spec.validate()
    mesh = sharding.make_mesh({"ici_fsdp": -1}, jax.local_devices())
    rules = sharding.RULE_PRESETS["fsdp"]
    tx = make_optimizer(base.get_config().optim, 1000)
    with sharding.use_mesh(mesh, rules):
        layout = state_lib.state_layout(spec, tx, mesh, rules)
    created = not args.dir.exists()
    args.dir.mkdir(parents=True, exist_ok=True)
    # A fresh subfolder: everything under it is this run's, so removing it removes nothing else.
    work = Path(tempfile.mkdtemp(prefix="bench_checkpoint-", dir=args.dir))
    state = jax.block_until_ready(_random_state(layout))
    num_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    print(f"model: hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}: "
          f"{spec.num_params():,} params; train state (params + Adam mu, nu, float32) "
          f"{num_bytes / 1e9:.2f} GB on {mesh.devices.size} {jax.devices()[0].platform} "
          f"device(s); disk: {work.absolute()}")

    try:
        plain_write, plain_read, evicted = _plain(state, work / "plain")
        checkpointer = Checkpointer(work / "orbax", keep=1)
        checksums(state)  # compiled once per run, not per save: keep it out of the timing
        start = time.perf_counter()
        checksums(state)
        checksum_time = time.perf_counter() - start
        start = time.perf_counter()
        checkpointer.save(1, state, {}, {})
        blocked = time.perf_counter() - start
        checkpointer.wait()
        _sync_and_evict(work / "orbax")
        durable = time.perf_counter() - start
        jax.tree.map(lambda x: x.delete(), state)  # room for the restored copy
        del state
        start = time.perf_counter()
        restored, _, _ = checkpointer.restore(1, layout.abstract)
        jax.block_until_ready(restored)
        restore = time.perf_counter() - start
        checkpointer.close()
        on_disk = sum(p.stat().st_size for p in _files(work / "orbax"))
    finally:
        if not args.keep_files:
            shutil.rmtree(work, ignore_errors=True)
            if created and not any(args.dir.iterdir()):
                args.dir.rmdir()
    cache = ("page cache evicted first (posix_fadvise DONTNEED)" if evicted else
             "page cache NOT evicted (no posix_fadvise here): reads may come from memory")
    print(f"orbax save     {_rate(num_bytes, durable)}  (training blocked {blocked:.2f} s, of "
          f"which checksums {checksum_time:.2f} s; {on_disk / 1e9:.2f} GB on disk)")
    print(f"orbax restore  {_rate(num_bytes, restore)}  ({cache}; checksums verified)")
    print(f"plain write    {_rate(num_bytes, plain_write)}  (numpy tofile, one file, fsync)")
    print(f"plain read     {_rate(num_bytes, plain_read)}  (numpy fromfile; {cache})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
