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
import glob
import gzip
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from jaxtrain.data.errors import DataError

TEXT_SUFFIXES = (".txt", ".md", ".rst")  # a whole file is one document
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")  # one JSON object per line (optionally .gz)
PARQUET_SUFFIXES = (".parquet",)
SHARD_SUFFIXES = (".ds", ".ds.index", ".ds.metadata", ".ds.loss", ".bin", ".idx", ".spool")
ENCODE_BATCH = 1000  # documents per tokenizer call


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return Path(name[:-3]).suffix if name.endswith(".gz") else path.suffix.lower()


def expand_inputs(inputs: Sequence[str]) -> list[Path]:
    """Files named by paths, globs or folders (searched recursively), sorted within each entry."""
    files: list[Path] = []
    known = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES
    for entry in inputs:
        matches = sorted(glob.glob(entry, recursive=True)) or [entry]
        for m in map(Path, matches):
            if m.is_dir():
                files.extend(sorted(f for f in m.rglob("*") if f.is_file() and _suffix(f) in known))
            elif m.is_file():
                files.append(m)
            else:
                raise DataError(f"input {entry!r}: no such file, folder or glob match.")
    if not files:
        raise DataError(f"no input files found in {list(inputs)}; expected {', '.join(known)} "
                        "files (optionally .gz).")
    return files


def iter_texts(path: Path, text_key: str = "text") -> Iterator[str]:
    """The documents of one file: a whole text file, or `text_key` of each JSONL/Parquet row."""
    kind = _suffix(path)
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    if kind in JSONL_SUFFIXES:
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if text_key not in row:
                    raise DataError(f"{path}:{line_no}: no {text_key!r} field (fields: "
                                    f"{', '.join(row)}); pass the right --text-key.")
                if row[text_key]:
                    yield row[text_key]
    elif kind in PARQUET_SUFFIXES:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            hint = "pip install pyarrow"
            raise DataError(f"{path}: reading Parquet needs pyarrow ({hint}).") from None
        parquet = pq.ParquetFile(path)
        columns = parquet.schema_arrow.names
        if text_key not in columns:
            raise DataError(f"{path}: no {text_key!r} column (columns: "
                            f"{', '.join(columns)}); pass the right --text-key.")
        # Row batches, not the whole table: files larger than memory stream through.
        for batch in parquet.iter_batches(batch_size=ENCODE_BATCH, columns=[text_key]):
            yield from (t for t in batch.column(0).to_pylist() if t)
    else:
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
        if text.strip():
            yield text


def _tokenizer_folder(tokenizer: str | os.PathLike) -> Path:
    path = Path(tokenizer)
    return path.parent if path.is_file() else path


def tokenizer_json(tokenizer: str | os.PathLike) -> Path | None:
    """The `tokenizer.json` of a tokenizer folder (or the file itself), None when there is none."""
    path = Path(tokenizer)
    candidate = path if path.is_file() else path / "tokenizer.json"
    return candidate if candidate.is_file() and candidate.suffix == ".json" else None


def eos_token_of(tokenizer: str | os.PathLike) -> str | None:
    """The EOS token text that `tokenizer_config.json` declares (the tokenizer is not loaded)."""
    config = _tokenizer_folder(tokenizer) / "tokenizer_config.json"
    if not config.is_file():
        return None
    eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
    return eos.get("content") if isinstance(eos, dict) else eos


def eos_id_from_tokenizer(tokenizer: str | os.PathLike) -> int | None:
    """The EOS token id of a tokenizer folder, from its JSON files alone (fast; None if unknown)."""
    eos, file = eos_token_of(tokenizer), tokenizer_json(tokenizer)
    if not eos or file is None:
        return None
    data = json.loads(file.read_text(encoding="utf-8"))
    for token in data.get("added_tokens", []):
        if token.get("content") == eos:
            return int(token["id"])
    vocab = data.get("model", {}).get("vocab")
    return int(vocab[eos]) if isinstance(vocab, dict) and eos in vocab else None


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
    from jaxtrain.data.shard_writers import DatatroveWriter

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
    from jaxtrain.data.tokenize_tasks import FORMATS, Task, run_tasks

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
                from jaxtrain.data.megatron import merge_megatron
                from jaxtrain.data.tokenize_tasks import megatron_prefix

                out = merge_megatron([p.with_suffix("") for p in written],
                                     megatron_prefix(output, None, text_key), delete_inputs=True)
                return [out.with_name(out.name + ".bin")]
            return sorted(written)
    else:
        raise DataError(f"backend={backend!r} is not one of 'auto', 'datatrove', 'builtin'.")
    shards = sorted(output.glob("*.ds"))
    return [s for s in shards if s.stat().st_size > 0]
