"""Tokenizing text, JSONL and Parquet files into shards, with EOS after each document.

datatrove shards (X.ds, X.ds.index, X.ds.metadata; uint16 tokens when the vocabulary fits in 65536
ids, else uint32) are written by datatrove's own `DocumentTokenizer`; Megatron datasets
(prefix.bin/.idx) by the built-in writer (`shard_writers`). Input files are shared among `tasks`
by position (file i goes to task i % tasks), one output file per task, as datatrove's readers do;
inputs are read document by document, so corpora larger than memory stream through.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from jaxtrain.data.errors import DataError
from jaxtrain.data.megatron import merge_megatron
from jaxtrain.data.text_inputs import SHARD_SUFFIXES, eos_token_of, expand_inputs
from jaxtrain.data.tokenize_tasks import FORMATS, Task, megatron_prefix, run_tasks

# Accepted for calls written when a built-in writer of datatrove shards existed; the format alone
# now decides who writes (datatrove's DocumentTokenizer for .ds, the built-in Megatron writer).
BACKENDS = ("auto", "datatrove", "builtin")


def _clear_output(output: Path, overwrite: bool) -> None:
    output.mkdir(parents=True, exist_ok=True)
    old = [f for f in output.iterdir() if f.name.endswith(SHARD_SUFFIXES)]
    if old and not overwrite:
        raise DataError(
            f"{output}: already holds {len(old)} shard files (e.g. {old[0].name}); "
            "choose an empty folder or pass overwrite=True (--overwrite)."
        )
    for f in old:
        f.unlink()


def tokenize_files(
    inputs: Sequence[str],
    tokenizer: str | os.PathLike,
    output: str | os.PathLike,
    *,
    text_key: str = "text",
    eos_token: str | None = None,
    tasks: int = 1,
    shuffle_documents: bool = True,
    seed: int = 0,
    backend: str = "auto",
    overwrite: bool = False,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    fmt: str = "datatrove",
    merge: bool = False,
) -> list[Path]:
    """Tokenizes `inputs` into shards in `output`; returns the non-empty files written.

    `fmt` is "datatrove" (X.ds shards written by datatrove's `DocumentTokenizer`, which needs a
    tokenizer.json; the files returned) or "megatron" (one `<rank>_<text_key>_document.bin/.idx`
    dataset per task, uint16 tokens when the vocabulary is below 65500 ids else int32; the .bin
    files returned). `merge` (megatron only) concatenates the tasks' datasets into
    `<output>/<text_key>_document`. `eos_token` defaults to the one in the tokenizer's
    tokenizer_config.json. Documents stream, so inputs may be far larger than memory. `workers` is
    how many tasks run at once (default: one per task, up to the CPU count); the output does not
    depend on it. With `shuffle_documents`, a task's documents are in the order
    `default_rng(seed).permutation(n)` of its input order. `progress(documents, tokens)` receives
    the counts of each batch written. `backend` is accepted for older calls and changes nothing.
    """
    files = expand_inputs(inputs)
    output = Path(output)
    eos = eos_token or eos_token_of(tokenizer)
    if not eos:
        raise DataError(
            f"{tokenizer}: no eos_token in tokenizer_config.json; pass the EOS token "
            "text (--eos-token), which is appended after every document."
        )
    if tasks <= 0:
        raise DataError(f"tasks={tasks} must be positive.")
    if fmt not in FORMATS:
        raise DataError(f"format {fmt!r} is not one of {FORMATS}.")
    if backend not in BACKENDS:
        raise DataError(f"backend={backend!r} is not one of {BACKENDS}.")
    if merge and fmt != "megatron":
        raise DataError(
            "merge applies to the megatron format (datatrove shards are read as a "
            "folder; datatrove's DocumentTokenizerMerger merges them)."
        )
    workers = workers or min(tasks, os.cpu_count() or 1)
    _clear_output(output, overwrite)
    jobs = [
        Task(
            tuple(map(str, files[rank::tasks])),
            str(tokenizer),
            str(output),
            rank,
            text_key,
            eos,
            shuffle_documents,
            seed,
            fmt,
        )
        for rank in range(tasks)
    ]
    written = sorted(p for p in run_tasks(jobs, workers, progress) if p is not None)
    if fmt == "megatron" and merge and written:
        out = merge_megatron(
            [p.with_suffix("") for p in written],
            megatron_prefix(output, None, text_key),
            delete_inputs=True,
        )
        return [out.with_name(out.name + ".bin")]
    return written
