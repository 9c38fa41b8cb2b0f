"""Tokenizing text, JSONL and Parquet files into shards, with EOS after each document.

datatrove's own `DocumentTokenizer` writes datatrove shards when datatrove is installed; otherwise
the built-in writer (`tokenize_tasks`) produces the same files byte for byte in layout (X.ds,
X.ds.index, X.ds.metadata; uint16 tokens when the vocabulary fits in 65536 ids, else uint32). The
built-in writer also writes Megatron datasets (prefix.bin/.idx). Input files are shared among
`tasks` by position (file i goes to task i % tasks), one output file per task, as datatrove's
readers do; inputs are read document by document, so corpora larger than memory stream through.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from jaxtrain.data.errors import DataError
from jaxtrain.data.megatron import merge_megatron
from jaxtrain.data.shard_writers import DatatroveWriter
from jaxtrain.data.text_inputs import (
    SHARD_SUFFIXES,
    eos_token_of,
    expand_inputs,
    iter_texts,
    tokenizer_json,
)
from jaxtrain.data.tokenize_tasks import FORMATS, Task, megatron_prefix, run_tasks


def _clear_output(output: Path, overwrite: bool) -> None:
    output.mkdir(parents=True, exist_ok=True)
    old = [f for f in output.iterdir() if f.name.endswith(SHARD_SUFFIXES)]
    if old and not overwrite:
        raise DataError(f"{output}: already holds {len(old)} shard files (e.g. {old[0].name}); "
                        "choose an empty folder or pass overwrite=True (--overwrite).")
    for f in old:
        f.unlink()


def write_shard(output: Path, name: str, docs: Sequence[Sequence[int]], token_size: int,
                tokenizer_name: str) -> Path:
    """Writes one shard (X.ds, X.ds.index, X.ds.metadata) in datatrove's layout; returns X.ds."""
    writer = DatatroveWriter(output / name, token_size, tokenizer_name)
    writer.add_many(docs)
    return writer.close() or output / name


def _datatrove_documents(files: list[Path], text_key: str, data: object, rank: int = 0,
                         world_size: int = 1) -> Iterator[object]:
    """datatrove pipeline step: the documents of this task's input files."""
    from datatrove.data import Document

    for i, f in enumerate(files[rank::world_size]):
        for j, text in enumerate(iter_texts(f, text_key)):
            yield Document(text=text, id=f"{f.name}/{i}/{j}")


def _run_datatrove(files: list[Path], json_file: Path, output: Path, text_key: str,
                   eos_token: str, tasks: int, workers: int, shuffle: bool, seed: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.tokens import DocumentTokenizer

    with tempfile.TemporaryDirectory(prefix="jaxtrain-datatrove-logs-") as logs:
        LocalPipelineExecutor(
            pipeline=[
                functools.partial(_datatrove_documents, files, text_key),
                # datatrove loads a local tokenizer from the tokenizer.json file, not the folder.
                DocumentTokenizer(str(output), tokenizer_name_or_path=str(json_file),
                                  eos_token=eos_token, shuffle_documents=shuffle, seed=seed),
            ],
            tasks=tasks,
            workers=workers,
            logging_dir=logs,
            skip_completed=False,
        ).run()


def datatrove_available() -> bool:
    """Whether datatrove's DocumentTokenizer can be used."""
    try:
        import datatrove.pipeline.tokens  # noqa: F401
    except ImportError:
        return False
    return True


def tokenize_files(inputs: Sequence[str], tokenizer: str | os.PathLike, output: str | os.PathLike,
                   *, text_key: str = "text", eos_token: str | None = None, tasks: int = 1,
                   shuffle_documents: bool = True, seed: int = 0, backend: str = "auto",
                   overwrite: bool = False, workers: int | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   fmt: str = "datatrove", merge: bool = False) -> list[Path]:
    """Tokenizes `inputs` into shards in `output`; returns the non-empty files written.

    `fmt` is "datatrove" (X.ds shards; the files returned) or "megatron" (one
    `<rank>_<text_key>_document.bin/.idx` dataset per task, uint16 tokens when the vocabulary is
    below 65500 ids else int32; the .bin files returned). `merge` (megatron only) concatenates the
    tasks' datasets into `<output>/<text_key>_document`.
    `backend` is "datatrove", "builtin" or "auto" (datatrove when it is installed, the tokenizer
    has a tokenizer.json and the format is datatrove). `eos_token` defaults to the one in the
    tokenizer's tokenizer_config.json. Both backends stream documents, so inputs may be far
    larger than memory. `workers` is how many tasks run at once (default: one per task, up to the
    CPU count). datatrove draws each task's document shuffle from one generator when workers == 1
    and from a fresh one per task otherwise, so only the contents, not the in-shard order, are
    independent of `workers`; the built-in writer's order never depends on it.
    `progress(documents, tokens)` receives the counts of each batch the built-in writer encodes
    (datatrove reports its own progress in its log).
    """
    files = expand_inputs(inputs)
    output = Path(output)
    eos = eos_token or eos_token_of(tokenizer)
    if not eos:
        raise DataError(f"{tokenizer}: no eos_token in tokenizer_config.json; pass the EOS token "
                        "text (--eos-token), which is appended after every document.")
    if tasks <= 0:
        raise DataError(f"tasks={tasks} must be positive.")
    if fmt not in FORMATS:
        raise DataError(f"format {fmt!r} is not one of {FORMATS}.")
    if merge and fmt != "megatron":
        raise DataError("merge applies to the megatron format (datatrove shards are read as a "
                        "folder; datatrove's DocumentTokenizerMerger merges them).")
    json_file = tokenizer_json(tokenizer)
    if backend == "auto":
        backend = "datatrove" if (datatrove_available() and json_file is not None
                                  and fmt == "datatrove") else "builtin"
    workers = workers or min(tasks, os.cpu_count() or 1)
    _clear_output(output, overwrite)
    if backend == "datatrove":
        if json_file is None or fmt != "datatrove":
            raise DataError(f"{tokenizer}: datatrove's writer needs a tokenizer.json (a fast "
                            "tokenizer) and writes datatrove shards only; use backend='builtin' "
                            "for other tokenizers or the megatron format.")
        _run_datatrove(files, json_file, output, text_key, eos, tasks, workers,
                       shuffle_documents, seed)
    elif backend == "builtin":
        output.mkdir(parents=True, exist_ok=True)
        jobs = [Task(tuple(map(str, files[rank::tasks])), str(tokenizer), str(output), rank,
                     text_key, eos, shuffle_documents, seed, fmt) for rank in range(tasks)]
        written = [p for p in run_tasks(jobs, workers, progress) if p is not None]
        if fmt == "megatron":
            if merge and written:

                out = merge_megatron([p.with_suffix("") for p in written],
                                     megatron_prefix(output, None, text_key), delete_inputs=True)
                return [out.with_name(out.name + ".bin")]
            return sorted(written)
    else:
        raise DataError(f"backend={backend!r} is not one of 'auto', 'datatrove', 'builtin'.")
    shards = sorted(output.glob("*.ds"))
    return [s for s in shards if s.stat().st_size > 0]
