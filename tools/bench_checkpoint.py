"""Checkpoint throughput: save and restore a train state of a few GB with jaxtrain's Checkpointer,
next to a plain sequential numpy write and read of the same bytes on the same disk, in rounds
that alternate the two, and how long a save blocks the training loop against a train step.

    python tools/bench_checkpoint.py                     # hidden 2048, 6 layers, vocab 32K: 5.3 GB
    python tools/bench_checkpoint.py --layers 2          # 2.8 GB (needs ~10 GB of memory)
    python tools/bench_checkpoint.py --dir /scratch/b    # another disk
    python tools/bench_checkpoint.py --step-time 0.8     # blocked time against a known step time
    python tools/bench_checkpoint.py --compression zstd  # the chunks zstd-compressed
    python tools/bench_checkpoint.py --compare-reads     # jaxtrain's array read vs Orbax's

The state is a Llama-shaped model's float32 parameters plus both Adam moments, filled with
random values (nearly incompressible, like trained weights), on every local device. Each round
(`--rounds`, default 3; the order of the two alternates) measures:
  save: how long the training loop is blocked (`Checkpointer.save` returning: the checksums
        are dispatched, not waited for), then the time until the step is durable (checksums
        read back, Orbax commit and an fsync of every file written);
  restore: from files evicted from the page cache (posix_fadvise DONTNEED after fsync),
        checksums verified, as a resumed run does; the checksum pass over the restored state
        is then timed alone, to say how much of the restore it is;
  plain: numpy `tofile` of every array into one file + fsync, then `fromfile` after eviction
         into arrays kept until all are read;
  with --compare-reads, also the step's arrays read alone (no checksums), evicted, once through
  jaxtrain's read (jaxtrain/checkpoint/read.py) and once through Orbax's standard handler,
  the first of the two alternating by round: the comparison of the two read paths.
Both reads land on memory the process has not touched yet, as in a resumed run's new process:
the heap's free pages are given back to the system first (glibc `malloc_trim`). Without that, a
read that came after the other side's freed its arrays reused their pages, and the ratios
swung between about 0.5 and 1.3 depending only on which side ran first in the round.
Each figure also has its CPU time (all threads of the process): on a machine shared with other
jobs it shows which side is CPU-bound, and it is not lengthened by their load.
The ratios (Orbax rate / plain rate) are taken per round, so that load from other processes
moves both sides alike; the summary gives their median and range over the rounds. The blocked
time is also given as a fraction of one train step of the benchmarked model (the real jitted
step, `--batch` x `--seq` tokens, measured first; the batch is rounded up to a multiple of the
local device count), or of `--step-time` seconds when given. `--compression` is
`checkpoint.compression` ("none", the default, or "zstd").

GB are 10^9 bytes. Needs about 3x the state size in memory (the state, Orbax's host copy while
it writes, read buffers) and 2x on disk. The files go into a fresh subfolder of --dir (created
when missing), removed afterwards with --dir itself when the tool created it; nothing else in
--dir is touched. Run as a script it uses the malloc settings `python -m jaxtrain` trains with
on CPUs (jaxtrain/hardware/host_malloc.py).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
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
import orbax.checkpoint as ocp  # noqa: E402

from jaxtrain import run as run_lib  # noqa: E402
from jaxtrain.checkpoint.checksums import checksums  # noqa: E402
from jaxtrain.checkpoint.items import state_handler  # noqa: E402
from jaxtrain.checkpoint.manager import Checkpointer  # noqa: E402
from jaxtrain.config import loader as config_lib  # noqa: E402
from jaxtrain.config.loader import CHECKPOINT_COMPRESSIONS  # noqa: E402
from jaxtrain.hardware.host_info import cpu_line, disk_line  # noqa: E402
from jaxtrain.train import state as state_lib  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options (model size, target folder, rounds, step)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--dir",
        type=Path,
        default=Path("runs/bench_checkpoint"),
        help="folder on the disk to measure; the files go into a fresh subfolder, removed after",
    )
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--intermediate", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--rounds", type=int, default=3, help="rounds of save/restore and plain")
    p.add_argument(
        "--compression",
        choices=CHECKPOINT_COMPRESSIONS,
        default="none",
        help="checkpoint.compression of the Orbax side",
    )
    p.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="seconds of one train step to compare the blocked time with; 0 = "
        "measure a step of the benchmarked model",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=2,
        help="sequences of the measured step (rounded up to a multiple of the local devices)",
    )
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence of that step")
    p.add_argument(
        "--compare-reads",
        action="store_true",
        help="also read each step through jaxtrain's array read and through Orbax's own, "
        "alternately, without checksums",
    )
    p.add_argument(
        "--keep-files", action="store_true", help="leave the files (in their subfolder of --dir)"
    )
    return p.parse_args(argv)


def bench_config(args: argparse.Namespace) -> Any:
    """The run whose state is saved: the Llama shape of the options, FSDP over local devices."""
    overrides = {
        "model.family": "llama",
        "model.vocab_size": args.vocab,
        "model.hidden_size": args.hidden,
        "model.num_layers": args.layers,
        "model.num_heads": args.heads,
        "model.num_kv_heads": args.heads,
        "model.head_dim": args.hidden // args.heads,
        "model.intermediate_size": args.intermediate,
        "model.max_seq_len": max(2048, args.seq),
        "train.seq_len": args.seq,
        "train.global_batch_size": -(-args.batch // jax.local_device_count())
        * jax.local_device_count(),
        "mesh.rules": "fsdp",
        "data.kind": "synthetic",
        "checkpoint.compression": args.compression,
    }
    return config_lib.load_config(str(_TOOLS.parent / "configs" / "base.py"), overrides)


def measure_step(cfg: Any) -> float:
    """Seconds of one train step of `cfg` (the Trainer's compiled step, after a warm-up)."""
    from jaxtrain.commands.bench import benchmark

    return benchmark(cfg, steps=2, warmup=1, devices=jax.local_devices())["step_time_s"]


def _random_state(layout: state_lib.StateLayout) -> dict[str, Any]:
    """Random floats (zeros for integer leaves) written straight into their shards."""
    leaves, treedef = jax.tree.flatten(layout.abstract)

    def fill(key: jax.Array) -> Any:
        keys = jax.random.split(key, len(leaves))
        return treedef.unflatten(
            [
                jax.random.normal(k, a.shape, a.dtype)
                if jnp.issubdtype(a.dtype, jnp.floating)
                else jnp.zeros(a.shape, a.dtype)
                for k, a in zip(keys, leaves, strict=True)
            ]
        )

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


def _return_freed_memory() -> None:
    """Gives the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing),
    so that what is read next lands on untouched pages."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rate(num_bytes: int, seconds: float) -> str:
    return f"{seconds:7.2f} s  {num_bytes / 1e9 / max(seconds, 1e-9):6.2f} GB/s"


class _Clock:
    """Wall seconds and CPU seconds (all threads of this process) since it was started."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        """(wall, CPU) seconds so far."""
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def _plain(state: Any, folder: Path) -> dict[str, float]:
    """Seconds (wall and CPU) to write (and fsync) every array into one file, and to read it
    back evicted."""
    folder.mkdir(parents=True)
    path = folder / "state.bin"
    arrays = jax.tree.leaves(state)
    clock = _Clock()
    with open(path, "wb") as f:
        for x in arrays:
            np.asarray(x).tofile(f)
        f.flush()
        os.fsync(f.fileno())
    write, write_cpu = clock.read()
    _sync_and_evict(folder)
    _return_freed_memory()
    clock = _Clock()
    # The arrays read are kept until the last one is in, as a restore keeps them: reading each
    # into memory freed by the one before would touch a single array's pages, where a restore
    # must fault in the whole state's.
    with open(path, "rb") as f:
        held = [np.fromfile(f, dtype=x.dtype, count=x.size) for x in arrays]
    read, read_cpu = clock.read()
    del held
    shutil.rmtree(folder)
    return {
        "plain_write": write,
        "plain_write_cpu": write_cpu,
        "plain_read": read,
        "plain_read_cpu": read_cpu,
    }


def _orbax(
    checkpointer: Checkpointer, step: int, state: Any, abstract: Any
) -> tuple[dict[str, float], Any]:
    """Seconds blocked by a save, until it is durable, to restore it evicted and to checksum
    the restored state alone; and the restored state (the one passed in is deleted to make
    room for it)."""
    clock = _Clock()
    checkpointer.save(step, state, {}, {})
    blocked, _ = clock.read()
    checkpointer.wait()
    _sync_and_evict(checkpointer.step_dir(step))
    save, save_cpu = clock.read()
    jax.tree.map(lambda x: x.delete(), state)  # room for the restored copy
    del state
    _return_freed_memory()
    clock = _Clock()
    restored, _, _ = checkpointer.restore(step, abstract)
    jax.block_until_ready(restored)
    restore, restore_cpu = clock.read()
    clock = _Clock()
    checksums(restored)
    verify, _ = clock.read()
    return {
        "blocked": blocked,
        "save": save,
        "save_cpu": save_cpu,
        "restore": restore,
        "restore_cpu": restore_cpu,
        "verify": verify,
    }, restored


def _read_state(step_dir: Path, abstract: Any, handler: Any) -> float:
    """Seconds to read a step's `state` item, evicted, with an Orbax PyTree `handler`; the
    arrays read are freed again."""
    _sync_and_evict(step_dir)
    _return_freed_memory()
    restore_args = ocp.checkpoint_utils.construct_restore_args(abstract)
    clock = _Clock()
    with ocp.Checkpointer(handler) as reader:
        arrays = reader.restore(
            step_dir / "state", args=ocp.args.PyTreeRestore(abstract, restore_args=restore_args)
        )
        jax.block_until_ready(arrays)
    seconds, _ = clock.read()
    jax.tree.map(lambda x: x.delete(), arrays)
    return seconds


def _compare_reads(step_dir: Path, abstract: Any, jaxtrain_first: bool) -> dict[str, float]:
    """Seconds to read a step's arrays through jaxtrain's read (`checkpoint_read`, each shard
    once into memory the device keeps) and through Orbax's standard handler, in that order
    or the other."""
    paths = {
        "read_jaxtrain": state_handler(),
        "read_orbax": ocp.PyTreeCheckpointHandler(use_compression=False),
    }
    order = list(paths) if jaxtrain_first else list(reversed(paths))
    return {name: _read_state(step_dir, abstract, paths[name]) for name in order}


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """'0.85 (0.80-0.91)': the median and range of a figure over the rounds."""
    median = fmt.format(statistics.median(values))
    return (
        median
        if len(values) < 2
        else f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints the figures."""
    args = parse_args(argv)
    cfg = bench_config(args)
    created = not args.dir.exists()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"cpu: {cpu_line()}; disk: {disk_line(args.dir)}", flush=True)
    if args.step_time > 0:
        step_s, step_what = args.step_time, "passed in"
    else:
        step_s = measure_step(cfg)
        step_what = f"measured, {args.batch} x {args.seq} tokens"
    setup = run_lib.setup(cfg, jax.local_devices())
    layout = setup.layout
    # A fresh subfolder: everything under it is this run's, so removing it removes nothing else.
    work = Path(tempfile.mkdtemp(prefix="bench_checkpoint-", dir=args.dir))
    state = jax.block_until_ready(_random_state(layout))
    num_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    print(
        f"model: hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}: "
        f"{setup.spec.num_params():,} params; train state (params + Adam mu, nu, float32) "
        f"{num_bytes / 1e9:.2f} GB on {setup.mesh.devices.size} {jax.devices()[0].platform} "
        f"device(s); files in {work.absolute()}; train step {step_s:.3f} s ({step_what})",
        flush=True,
    )

    rounds: list[dict[str, float]] = []
    try:
        checkpointer = Checkpointer(work / "orbax", keep=1, compression=args.compression)
        checksums(state)  # compiled once per run, not per save: keep it out of the timing
        for r in range(args.rounds):
            figures: dict[str, float] = {}
            # Alternate which goes first, so that a trend in the machine's load hits both.
            for part in ("plain", "orbax") if r % 2 == 0 else ("orbax", "plain"):
                if part == "plain":
                    figures.update(_plain(state, work / "plain"))
                else:
                    orbax, state = _orbax(checkpointer, r + 1, state, layout.abstract)
                    figures.update(orbax)
                    if args.compare_reads:
                        reads = _compare_reads(
                            checkpointer.step_dir(r + 1), layout.abstract, r % 2 == 0
                        )
                        figures.update(reads)
            rounds.append(figures)
            print(
                f"round {r + 1}: save {figures['save']:.2f} s vs plain write "
                f"{figures['plain_write']:.2f} s (ratio "
                f"{figures['plain_write'] / figures['save']:.2f}); restore "
                f"{figures['restore']:.2f} s vs plain read {figures['plain_read']:.2f} s "
                f"(ratio {figures['plain_read'] / figures['restore']:.2f}; checksum pass "
                f"alone {figures['verify']:.2f} s); blocked {figures['blocked']:.3f} s"
                + (
                    f"; arrays read by jaxtrain {figures['read_jaxtrain']:.2f} s, by Orbax "
                    f"{figures['read_orbax']:.2f} s"
                    if args.compare_reads
                    else ""
                ),
                flush=True,
            )
        checkpointer.close()
        on_disk = sum(p.stat().st_size for p in _files(work / "orbax"))
    finally:
        if not args.keep_files:
            shutil.rmtree(work, ignore_errors=True)
            if created and not any(args.dir.iterdir()):
                args.dir.rmdir()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    def cpu(key: str) -> str:
        return f"{median(key + '_cpu'):.2f} CPU s"

    evicted = hasattr(os, "posix_fadvise")
    cache = (
        "page cache evicted first (posix_fadvise DONTNEED)"
        if evicted
        else "page cache NOT evicted (no posix_fadvise here): reads may come from memory"
    )
    print(f"\nmedians of {len(rounds)} round(s), compression {args.compression}:")
    print(
        f"orbax save     {_rate(num_bytes, median('save'))}  ({cpu('save')}; training "
        f"blocked {median('blocked'):.3f} s; the checksum pass, {median('verify'):.2f} s, read "
        f"back on the writer thread; {on_disk / 1e9:.2f} GB on disk)"
    )
    print(
        f"orbax restore  {_rate(num_bytes, median('restore'))}  ({cpu('restore')}; {cache}; "
        f"checksums verified, the pass alone {median('verify'):.2f} s)"
    )
    print(
        f"plain write    {_rate(num_bytes, median('plain_write'))}  ({cpu('plain_write')}; "
        "numpy tofile, one file, fsync)"
    )
    print(
        f"plain read     {_rate(num_bytes, median('plain_read'))}  ({cpu('plain_read')}; numpy "
        f"fromfile; {cache})"
    )
    if args.compare_reads:
        print(
            f"arrays read, alternately, no checksums: jaxtrain {median('read_jaxtrain'):.2f} s, "
            f"Orbax's own read {median('read_orbax'):.2f} s; Orbax / jaxtrain per round "
            f"{_spread([r['read_orbax'] / r['read_jaxtrain'] for r in rounds])}"
        )
    print(
        f"ratios, median (range) of {len(rounds)} round(s): save / plain write "
        f"{_spread([r['plain_write'] / r['save'] for r in rounds])}; restore / plain read "
        f"{_spread([r['plain_read'] / r['restore'] for r in rounds])}; blocked / train step "
        f"{_spread([r['blocked'] / step_s for r in rounds], '{:.2%}')} of {step_s:.3f} s"
    )
    return 0


if __name__ == "__main__":
    from jaxtrain.hardware.host_malloc import reexec_with_tuned_malloc

    reexec_with_tuned_malloc()  # the malloc settings a CPU training process runs with
    sys.exit(main())
