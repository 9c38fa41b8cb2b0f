"""Tokenizing text, JSONL and Parquet files into datatrove shards, with EOS after each document.

datatrove's own `DocumentTokenizer` writes the shards when datatrove is installed; otherwise a
built-in writer produces the same files byte for byte in layout (X.ds, X.ds.index, X.ds.metadata;
uint16 tokens when the vocabulary fits in 65536 ids, else uint32). Input files are shared among
`tasks` by position (file i goes to task i % tasks), one shard per task, as datatrove's readers do.
"""

from __future__ import annotations

import functools
import glob
import gzip
import itertools
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from jaxtrain.data.errors import DataError

TEXT_SUFFIXES = (".txt", ".md", ".rst")  # a whole file is one document
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")  # one JSON object per line (optionally .gz)
PARQUET_SUFFIXES = (".parquet",)
SHARD_SUFFIXES = (".ds", ".ds.index", ".ds.metadata", ".ds.loss")
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
        table = pq.read_table(path)
        if text_key not in table.column_names:
            raise DataError(f"{path}: no {text_key!r} column (columns: "
                            f"{', '.join(table.column_names)}); pass the right --text-key.")
        yield from (t for t in table.column(text_key).to_pylist() if t)
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


def _human_count(n: int) -> str:
    """The third metadata line, as datatrove writes it (humanize.metric, 3 digits): '1.40 kT'."""
    exponent = len(str(n)) - 1 if n > 0 else 0
    value = n / 10 ** (exponent // 3 * 3)
    digits = 2 - exponent % 3
    if round(value, digits) >= 10 ** (exponent % 3 + 1):  # 999.6 -> 1.00 k
        exponent += 1
        value, digits = n / 10 ** (exponent // 3 * 3), 2 - exponent % 3
    prefix = "kMGTPEZY"[exponent // 3 - 1] if exponent >= 3 else ""
    return f"{value:.{digits}f} {prefix}T"


def write_shard(output: Path, name: str, docs: Sequence[Sequence[int]], token_size: int,
                tokenizer_name: str) -> Path:
    """Writes one shard (X.ds, X.ds.index, X.ds.metadata) in datatrove's layout; returns X.ds."""
    dtype = {2: "<u2", 4: "<u4"}[token_size]
    lengths = np.fromiter((len(d) for d in docs), np.uint64, len(docs))
    ends = np.cumsum(lengths, dtype=np.uint64)
    ds = output / name
    with open(ds, "wb") as f:
        for doc in docs:
            np.asarray(doc, dtype).tofile(f)
    ends.astype("<u8").tofile(ds.with_name(name + ".index"))
    total = int(ends[-1]) if len(ends) else 0
    ds.with_name(name + ".metadata").write_text(
        f"{tokenizer_name}|{token_size}\n{total}\n{_human_count(total)}", encoding="utf-8")
    return ds


def _builtin_task(files: list[Path], tokenizer: str, output: Path, rank: int, text_key: str,
                  eos_token: str, shuffle: bool, seed: int) -> Path | None:
    """One task of the built-in writer: tokenize `files` into the shard of `rank`.

    The task's token ids are held in memory until written; corpora too large for that are
    datatrove's job (it streams to disk).
    """
    json_file = tokenizer_json(tokenizer)
    if json_file is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(json_file))
        vocab, eos_id = tok.get_vocab_size(), tok.token_to_id(eos_token)
        encode = lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        name = str(json_file)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
        vocab, eos_id = len(tok), tok.convert_tokens_to_ids(eos_token)
        encode = lambda texts: tok(texts, add_special_tokens=False)["input_ids"]
        name = str(tokenizer)
    if eos_id is None:
        raise DataError(f"EOS token {eos_token!r} is not in the vocabulary of {tokenizer}.")
    docs: list[list[int]] = []
    texts = (t for f in files for t in iter_texts(f, text_key))
    while batch := list(itertools.islice(texts, ENCODE_BATCH)):
        docs.extend(ids + [eos_id] for ids in encode(batch))
    if not docs:
        return None
    if shuffle:  # datatrove's default: documents in a seeded random order inside the file
        order = np.random.default_rng(seed).permutation(len(docs))
        docs = [docs[i] for i in order]
    stem = f"{rank:05d}_00000_doc_shuffled.ds" if shuffle else f"{rank:05d}_unshuffled.ds"
    token_size = 4 if vocab > 65536 else 2
    return write_shard(output, stem, docs, token_size, name)


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
                   overwrite: bool = False, workers: int | None = None) -> list[Path]:
    """Tokenizes `inputs` into datatrove shards in `output`; returns the non-empty shards written.

    `backend` is "datatrove", "builtin" or "auto" (datatrove when it is installed and the tokenizer
    has a tokenizer.json). `eos_token` defaults to the one in the tokenizer's tokenizer_config.json.
    `workers` is how many datatrove tasks run at once (default: one per task, up to the CPU
    count); the built-in writer runs its tasks one after another. datatrove draws each task's
    document shuffle from one generator when workers == 1 and from a fresh one per task otherwise,
    so only the contents, not the in-shard order, are independent of `workers`.
    """
    files = expand_inputs(inputs)
    output = Path(output)
    eos = eos_token or eos_token_of(tokenizer)
    if not eos:
        raise DataError(f"{tokenizer}: no eos_token in tokenizer_config.json; pass the EOS token "
                        "text (--eos-token), which is appended after every document.")
    if tasks <= 0:
        raise DataError(f"tasks={tasks} must be positive.")
    json_file = tokenizer_json(tokenizer)
    if backend == "auto":
        backend = "datatrove" if datatrove_available() and json_file is not None else "builtin"
    _clear_output(output, overwrite)
    if backend == "datatrove":
        if json_file is None:
            raise DataError(f"{tokenizer}: datatrove needs a tokenizer.json (a fast tokenizer); "
                            "use backend='builtin' for other tokenizers.")
        workers = workers or min(tasks, os.cpu_count() or 1)
        _run_datatrove(files, json_file, output, text_key, eos, tasks, workers,
                       shuffle_documents, seed)
    elif backend == "builtin":
        for rank in range(tasks):
            _builtin_task(files[rank::tasks], str(tokenizer), output, rank, text_key, eos,
                          shuffle_documents, seed)
    else:
        raise DataError(f"backend={backend!r} is not one of 'auto', 'datatrove', 'builtin'.")
    shards = sorted(output.glob("*.ds"))
    return [s for s in shards if s.stat().st_size > 0]
