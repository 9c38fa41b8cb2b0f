"""Is the data loader fast enough? Raw disk rate vs loader rate vs the training step's own rate.

    python tools/bench_loader.py --gb 2 [--dir /tmp/jaxtrain-bench] [--token-bytes 2] \
        [--workers 2] [--batches 40] [--train-steps 4] [--keep]

1. Writes a synthetic datatrove shard set of `--gb` GB (random tokens, documents of random
   length each ending in EOS, valid .ds.index/.ds.metadata) with numpy, unless it is already there.
   `--dir` must be new, empty or a folder this tool wrote (its bench.json says so); the tool
   removes only the files it wrote there, and the folder only when it created it.
2. Raw rate: the same bytes copied out of np.memmap in 64 MB chunks (GB/s and tokens/s), and
   random seq_len + 1 windows copied out of the memmap with numpy alone.
3. Loader rate: tokens/s of the real grain pipeline (shuffle on) for 16 x 2048 and 8 x 4096
   batches, with worker_count 0 and `--workers`, data.prefetch 4 (the default) and 1, and with
   document fields (segment_ids and positions).
4. Training rate: tokens/s of the jaxtrain Trainer on synthetic data with a ~5M-parameter Llama
   (llama-debug widened), timed after compilation: what the step needs from the loader.

Prints the CPU model and the disk, then one markdown table in which every rate is also given
as a ratio of the raw sequential memmap copy of the same bytes and of the train step's need
(loader tokens/s over step tokens/s: above 1 the loader keeps up). docs/performance.md and
docs/data.md hold the figures of runs.
"""

import os
import sys

# Runs from a clone without installing: the repository (holding jaxtrain/) is importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from jaxtrain.hardware.host_info import cpu_line, disk_line  # noqa: E402

SHARD_TOKENS = 1 << 27  # 128M tokens per shard (256 MB of uint16)
CHUNK_TOKENS = 1 << 24  # tokens generated and written per numpy call
VOCAB = 50_000
EOS = VOCAB - 1
MEAN_DOC = 1200  # tokens per document, on average


RECORD = "bench.json"  # written first (the folder is this tool's) and again when complete
OWNER = "tools/bench_loader.py"
SHARD_FILE = re.compile(r"\d{5}_unshuffled\.ds(\.index|\.metadata)?")


class FolderError(ValueError):
    """--dir holds files this tool did not write."""


def _record(folder: Path) -> dict | None:
    """This tool's record in `folder` (settings, token count when complete, whether the tool
    created the folder), or None when the folder is not the tool's."""
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or "settings" not in record:
        return None
    # Records of earlier versions have no owner: their tool made the folder too.
    return {"created": True, **record}


def remove_shards(folder: Path) -> None:
    """Removes the files the tool wrote in `folder`, and the folder when the tool created it and
    nothing else is left in it; anything else is kept."""
    record = _record(folder)
    if record is None:
        return
    for f in folder.iterdir():
        if SHARD_FILE.fullmatch(f.name) and f.is_file():
            f.unlink()
    (folder / RECORD).unlink()
    if record["created"] and not any(folder.iterdir()):
        folder.rmdir()


def write_shards(folder: Path, gigabytes: float, token_bytes: int, seed: int = 0) -> int:
    """Writes the shard set (skipped when a complete one is there); returns its token count.

    Raises FolderError when `folder` holds files but is not this tool's; nothing is written.
    """
    settings = {"gb": gigabytes, "token_bytes": token_bytes, "seed": seed}
    record = _record(folder)
    if record is not None and record["settings"] == settings and record.get("tokens"):
        return record["tokens"]
    if record is None and folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FolderError(
            f"--dir {folder}: holds files this tool did not write (it has no "
            f"{RECORD} of tools/bench_loader.py); nothing was changed. Pass a new "
            "or empty folder."
        )
    created = record["created"] if record is not None else not folder.exists()
    if record is not None:
        remove_shards(folder)  # an incomplete or other-sized set: only the tool's own files
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / RECORD
    done.write_text(
        json.dumps({"owner": OWNER, "created": created, "settings": settings, "tokens": None})
    )
    dtype = {2: np.dtype("<u2"), 4: np.dtype("<u4")}[token_bytes]
    total = int(gigabytes * 1e9) // token_bytes
    rng = np.random.default_rng(seed)
    written, k = 0, 0
    while written < total:
        n = min(SHARD_TOKENS, total - written)
        ds = folder / f"{k:05d}_unshuffled.ds"
        # Document ends first, so every chunk can put an EOS at each end inside it.
        lengths = rng.integers(MEAN_DOC // 4, MEAN_DOC * 7 // 4, n // (MEAN_DOC // 4) + 2)
        ends = np.cumsum(lengths)
        ends = np.append(ends[ends < n], n).astype("<u8")
        with open(ds, "wb") as f:
            for lo in range(0, n, CHUNK_TOKENS):
                hi = min(n, lo + CHUNK_TOKENS)
                chunk = rng.integers(0, VOCAB - 1, hi - lo, dtype=dtype)
                inside = ends[(ends > lo) & (ends <= hi)].astype(np.int64) - 1 - lo
                chunk[inside] = EOS
                chunk.tofile(f)
        ends.tofile(ds.with_name(ds.name + ".index"))
        ds.with_name(ds.name + ".metadata").write_text(
            f"bench-tokenizer|{token_bytes}\n{n}\n{n / 1e6:.1f} MT"
        )
        written, k = written + n, k + 1
    done.write_text(
        json.dumps({"owner": OWNER, "created": created, "settings": settings, "tokens": written})
    )
    return written


def raw_rates(folder: Path, seq_len: int = 2048, windows: int = 20_000) -> dict[str, float]:
    """Sequential memmap copy (GB/s, tokens/s) and numpy-only random window reads (tokens/s)."""
    files = sorted(folder.glob("*.ds"))
    width = int(
        (files[0].with_name(files[0].name + ".metadata"))
        .read_text()
        .split("\n")[0]
        .rpartition("|")[2]
    )
    dtype = {2: "<u2", 4: "<u4"}[width]
    maps = [np.memmap(f, dtype, "r") for f in files]
    out = np.empty(CHUNK_TOKENS // 4, np.int32)
    start, tokens = time.perf_counter(), 0
    for m in maps:
        for lo in range(0, m.size, out.size):
            piece = m[lo : lo + out.size]
            out[: piece.size] = piece
            tokens += piece.size
    seconds = time.perf_counter() - start
    rng = np.random.default_rng(1)
    window = np.empty(seq_len + 1, np.int32)
    start = time.perf_counter()
    for _ in range(windows):
        m = maps[int(rng.integers(len(maps)))]
        lo = int(rng.integers(0, m.size - seq_len - 1))
        window[:] = m[lo : lo + seq_len + 1]
    random_seconds = time.perf_counter() - start
    return {
        "gb_per_s": tokens * width / seconds / 1e9,
        "tokens_per_s": tokens / seconds,
        "random_window_tokens_per_s": windows * seq_len / random_seconds,
    }


def _rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s / 1e6:,.1f}M" if tokens_per_s >= 1e6 else f"{tokens_per_s:,.0f}"


def _config(overrides: dict):
    from jaxtrain.config.loader import load_config

    return load_config(os.path.join(os.path.dirname(_HERE), "configs", "base.py"), overrides)


def loader_rate(
    folder: Path,
    batch: int,
    seq_len: int,
    workers: int,
    batches: int,
    documents: bool = False,
    prefetch: int = 4,
) -> float:
    """Tokens/s of the training iterator (shuffle on), after its first batch."""
    from jaxtrain.data.pipeline import make_train_iterator

    cfg = _config(
        {
            "data.kind": "datatrove",
            "data.paths": str(folder),
            "train.seq_len": seq_len,
            "train.global_batch_size": batch,
            "data.worker_count": workers,
            "data.reset_attention_mask": documents,
            "data.reset_position_ids": documents,
            "data.prefetch": prefetch,
            "model.max_seq_len": max(seq_len, 4096),
        }
    )
    it = make_train_iterator(cfg, VOCAB)
    try:
        next(it)  # starts worker processes and threads
        start = time.perf_counter()
        for _ in range(batches):
            next(it)
        seconds = time.perf_counter() - start
    finally:
        if hasattr(it, "close"):
            it.close()
    return batches * batch * seq_len / seconds


def training_rate(steps: int, batch: int, seq_len: int) -> tuple[float, int]:
    """(tokens/s, parameters) of the Trainer on synthetic data with a ~5M-parameter Llama."""
    import jax

    from jaxtrain.trainer import Trainer

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = _config(
            {
                "run.dir": run_dir,
                "data.kind": "synthetic",
                "train.seq_len": seq_len,
                "train.global_batch_size": batch,
                "train.steps": 1000,
                "train.eval_batches": 0,
                "train.progress": False,
                "checkpoint.every": 0,
                "checkpoint.resume": False,
                "model.vocab_size": 4096,
                "model.hidden_size": 256,
                "model.num_layers": 4,
                "model.num_heads": 4,
                "model.num_kv_heads": 4,
                "model.head_dim": 64,
                "model.intermediate_size": 768,
                "model.max_seq_len": max(seq_len, 1024),
            }
        )
        trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
        try:
            trainer.run(2)  # compiles
            start = time.perf_counter()
            trainer.run(steps)
            seconds = time.perf_counter() - start
            return steps * batch * seq_len / seconds, trainer.num_params
        finally:
            trainer.close()


def table(
    rates: list[tuple[str, str, float]],
    raw_tokens_per_s: float,
    step_tokens_per_s: float,
    raw_gb_per_s: float,
) -> str:
    """The markdown table: each (what, batch, tokens/s) with its ratios to the raw sequential
    copy and to the train step's need."""
    lines = [
        "",
        "| what | batch | tokens/s | / raw memmap copy | / train step's need |",
        "|---|---|---|---|---|",
    ]
    for what, batch, rate in rates:
        extra = f" ({raw_gb_per_s:.2f} GB/s)" if what.startswith("raw np.memmap sequential") else ""
        lines.append(
            f"| {what} | {batch} | {_rate(rate)}{extra} | "
            f"{_ratio(rate / raw_tokens_per_s)} | {_ratio(rate / step_tokens_per_s)} |"
        )
    return "\n".join(lines)


def _ratio(value: float) -> str:
    """'0.016', '1.0', '42,187': three decimals below 1, whole numbers from 100."""
    return f"{value:.3f}" if value < 1 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=2.0, help="size of the shard set in GB")
    p.add_argument(
        "--dir",
        default=os.path.join(tempfile.gettempdir(), "jaxtrain-bench"),
        help="where the shard set is written: a new or empty folder, or one this "
        "tool wrote (reused when complete)",
    )
    p.add_argument("--token-bytes", type=int, choices=(2, 4), default=2)
    p.add_argument("--workers", type=int, default=2, help="grain worker processes to compare")
    p.add_argument("--batches", type=int, default=40, help="batches timed per loader setting")
    p.add_argument("--train-steps", type=int, default=4, help="train steps timed")
    p.add_argument("--train-batch", type=int, default=8)
    p.add_argument("--train-seq", type=int, default=512)
    p.add_argument("--keep", action="store_true", help="keep the shard set afterwards")
    args = p.parse_args(argv)
    folder = Path(args.dir)
    print(f"cpu: {cpu_line()}; disk: {disk_line(folder)}", flush=True)
    start = time.perf_counter()
    try:
        tokens = write_shards(folder, args.gb, args.token_bytes)
    except FolderError as e:
        print(f"bench_loader.py: error: {e}", file=sys.stderr)
        return 2
    print(
        f"shard set: {folder}, {tokens / 1e6:.0f}M tokens, {tokens * args.token_bytes / 1e9:.2f}"
        f" GB, ready in {time.perf_counter() - start:.1f}s",
        flush=True,
    )
    raw = raw_rates(folder)
    rates = [
        ("raw np.memmap sequential copy", "-", raw["tokens_per_s"]),
        ("raw np.memmap random 2049-token windows", "-", raw["random_window_tokens_per_s"]),
    ]
    # (batch, seq_len, worker_count, document fields, data.prefetch); prefetch 4 is the default.
    settings = [
        (16, 2048, 0, False, 4),
        (8, 4096, 0, False, 4),
        (16, 2048, 0, False, 1),
        (8, 4096, 0, False, 1),
        (16, 2048, args.workers, False, 4),
        (8, 4096, args.workers, False, 4),
        (16, 2048, 0, True, 4),
        (16, 2048, 0, True, 1),
    ]
    for batch, seq_len, workers, documents, prefetch in settings:
        rate = loader_rate(folder, batch, seq_len, workers, args.batches, documents, prefetch)
        what = "loader, shuffled" + (" + segment_ids/positions" if documents else "")
        rates.append((what, f"{batch} x {seq_len}, workers={workers}, prefetch={prefetch}", rate))
        print(f"  {what}, {rates[-1][1]}: {_rate(rate)} tokens/s", flush=True)
    step_rate, params = training_rate(args.train_steps, args.train_batch, args.train_seq)
    rates.append(
        (
            f"train step, {params / 1e6:.1f}M-param Llama (synthetic data)",
            f"{args.train_batch} x {args.train_seq}",
            step_rate,
        )
    )
    print(table(rates, raw["tokens_per_s"], step_rate, raw["gb_per_s"]))
    default = rates[2][2]  # 16 x 2048, workers 0, prefetch 4: the default settings
    print(
        f"\nloader at the default settings (16 x 2048, workers=0, prefetch=4): "
        f"{_rate(default)} tokens/s = {default / raw['tokens_per_s']:.3f}x the raw memmap "
        f"copy of the same bytes, {default / step_rate:,.0f}x the train step's need "
        f"({_rate(step_rate)} tokens/s)"
    )
    if not args.keep:
        remove_shards(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
