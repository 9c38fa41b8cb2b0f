"""How fast is raw text tokenized while training? Loader tokens/s of data.kind="text".

    python tools/bench_text_loader.py [--dir /tmp/jaxtrain-text-bench] [--workers 0 1 2 4] \
        [--shape 8x128 16x2048] [--seconds 10]

Builds the embedded demo corpus (its JSONL text and 4096-token BPE, as configs/demo.py does) in
`--dir` unless it is there, then reads shuffled batches of the raw-text pipeline (tokenizing in
grain's reader threads with 0 workers, else in that many worker processes) for `--seconds`
after one warm-up batch, for every worker count and batch shape (rows x seq_len). The same
windows from pre-tokenized shards are timed once per shape for comparison. Prints the CPU and a
markdown table; docs/data.md holds the figures of runs.
"""

import os
import sys

# Runs from a clone without installing: the repository (holding jaxtrain/) is importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from jaxtrain.hardware.host_info import cpu_line  # noqa: E402


def rate(cfg, seconds: float) -> tuple[float, int]:
    """(tokens/s, batches) of the training iterator of `cfg` over `seconds` after one batch."""
    from jaxtrain.data import pipeline

    it = pipeline.make_train_iterator(cfg, cfg.model.vocab_size)
    next(it)
    start, batches, tokens = time.perf_counter(), 0, 0
    while time.perf_counter() - start < seconds:
        tokens += next(it)["inputs"].size
        batches += 1
    return tokens / (time.perf_counter() - start), batches


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", default="/tmp/jaxtrain-text-bench", help="demo corpus folder")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    p.add_argument("--shape", nargs="+", default=["8x128", "16x2048"], help="rows x seq_len")
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds per row")
    args = p.parse_args(argv)

    from jaxtrain.config import loader
    from jaxtrain.data.demo_corpus import build_demo_data

    demo = build_demo_data(Path(args.dir), progress=print)
    print(f"cpu: {cpu_line()}")
    print(
        f"corpus: demo train split, {demo['train_docs']} documents, {demo['train_tokens']:,} "
        "tokens\n"
    )
    print("| batch | data | worker_count | tokens/s | batches timed |")
    print("|---|---|---:|---:|---:|")
    for shape in args.shape:
        rows, seq_len = (int(x) for x in shape.split("x"))
        base = {
            "train.global_batch_size": rows,
            "train.seq_len": seq_len,
            "model.max_seq_len": max(seq_len, 1024),
            "data.prepare": "",
            "data.val_paths": "",
            "data.tokenizer": demo["tokenizer"],
        }
        cfg = loader.load_config("demo.py", {**base, "data.paths": demo["train"]})
        tokens_s, n = rate(cfg, args.seconds)
        print(f"| {shape} | tokenized shards | 0 | {tokens_s:,.0f} | {n} |", flush=True)
        for workers in args.workers:
            text = {
                "data.kind": "text",
                "data.paths": str(Path(demo["root"]) / "text" / "train.jsonl"),
            }
            text["data.worker_count"] = workers
            cfg = loader.load_config("demo.py", {**base, **text})
            tokens_s, n = rate(cfg, args.seconds)
            print(f"| {shape} | raw JSONL | {workers} | {tokens_s:,.0f} | {n} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
