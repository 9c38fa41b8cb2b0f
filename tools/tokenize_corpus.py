"""Tokenize text / JSONL / Parquet files into datatrove shards or Megatron datasets.

    python tools/tokenize_corpus.py --input 'corpus/*.jsonl' --tokenizer path/to/tokenizer_folder \
        --output data/train [--text-key text] [--eos-token '<|endoftext|>'] [--tasks 4]
    python tools/tokenize_corpus.py --format megatron --tasks 8 --workers 4 --merge ...

An EOS token is appended after every document. For `--format datatrove` (data.kind="datatrove")
datatrove's own DocumentTokenizer writes the shards (the tokenizer needs a tokenizer.json).
`--format megatron` (data.kind="megatron") writes <output>/<task>_<text-key>_document.bin/.idx per
task, or one <output>/<text-key>_document with --merge. Documents stream through, so corpora larger than
memory work; --tasks splits the input files, --workers runs that many tasks at once.
"""

import os
import sys

# Runs from a clone without installing: the repository (holding jaxtrain/) is importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import time  # noqa: E402

from tqdm import tqdm  # noqa: E402

from jaxtrain.data.datatrove import find_shards  # noqa: E402
from jaxtrain.data.errors import DataError  # noqa: E402
from jaxtrain.data.megatron import megatron_files  # noqa: E402
from jaxtrain.data.tokenize import tokenize_files  # noqa: E402


class Progress:
    """Documents and tokens so far, on stderr: tqdm's counter on a terminal, otherwise a line
    every `interval` seconds (a log file should not get one line per batch)."""

    def __init__(self, interval: float = 10.0, stream=None):
        self.stream = stream or sys.stderr
        self.bar = tqdm(unit=" documents", file=self.stream) if self.stream.isatty() else None
        self.interval = interval
        self.docs = self.tokens = 0
        self.start = self.last = time.perf_counter()

    def __call__(self, docs: int, tokens: int) -> None:
        self.docs += docs
        self.tokens += tokens
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.tokens:,} tokens", refresh=False)
            self.bar.update(docs)
            return
        now = time.perf_counter()
        if now - self.last < self.interval:
            return
        self.last = now
        rate = self.tokens / max(now - self.start, 1e-9)
        self.stream.write(
            f"tokenized {self.docs:,} documents, {self.tokens:,} tokens ({rate:,.0f} tokens/s)\n"
        )
        self.stream.flush()

    def close(self) -> None:
        """Ends the counter on a terminal."""
        if self.bar is not None:
            self.bar.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of the tokenizer tool."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--input",
        nargs="+",
        required=True,
        help="input files, folders or globs (.txt/.md, .jsonl/.json, .parquet; .gz ok)",
    )
    p.add_argument(
        "--tokenizer", required=True, help="Hugging Face tokenizer folder (or its tokenizer.json)"
    )
    p.add_argument("--output", required=True, help="folder for the .ds shards")
    p.add_argument("--text-key", default="text", help="JSONL/Parquet field holding the text")
    p.add_argument(
        "--eos-token",
        default=None,
        help="EOS token text appended after each document (default: the tokenizer's)",
    )
    p.add_argument("--tasks", type=int, default=1, help="parallel tasks; one shard per task")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="tasks run at once, each in its own process (default: tasks, up to the CPU count)",
    )
    p.add_argument(
        "--format",
        choices=("datatrove", "megatron"),
        default="datatrove",
        help="datatrove .ds shards or Megatron prefix.bin/.idx datasets",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="megatron: merge the tasks' datasets into <output>/<text-key>_document",
    )
    p.add_argument(
        "--no-shuffle", action="store_true", help="keep documents in input order inside each shard"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the in-shard document shuffle")
    p.add_argument(
        "--backend",
        choices=("auto", "datatrove", "builtin"),
        default="auto",
        help="ignored, kept for older commands: datatrove writes .ds shards, the "
        "built-in writer Megatron datasets",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="delete shards already in the output folder first"
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Runs the tool; returns the process exit code."""
    args = parse_args(argv)
    start = time.perf_counter()
    progress = None if args.quiet else Progress()
    try:
        tokenize_files(
            args.input,
            args.tokenizer,
            args.output,
            text_key=args.text_key,
            eos_token=args.eos_token,
            tasks=args.tasks,
            shuffle_documents=not args.no_shuffle,
            seed=args.seed,
            backend=args.backend,
            overwrite=args.overwrite,
            progress=progress,
            workers=args.workers,
            fmt=args.format,
            merge=args.merge,
        )
        shards = (
            megatron_files(args.output) if args.format == "megatron" else find_shards([args.output])
        )
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if progress is not None:
            progress.close()
    tokens = sum(s.num_tokens for s in shards)
    docs = sum(s.num_docs for s in shards)
    print(
        f"wrote {len(shards)} shards, {docs} documents, {tokens} tokens "
        f"({shards[0].dtype.name}) to {args.output} in {time.perf_counter() - start:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
