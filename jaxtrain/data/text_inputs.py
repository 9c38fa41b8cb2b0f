"""What tokenizing reads: documents from text, JSONL and Parquet files, and a tokenizer folder's
own JSON files (its `tokenizer.json` and EOS token), without loading the tokenizer.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from collections.abc import Iterator, Sequence
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
        raise DataError(
            f"no input files found in {list(inputs)}; expected {', '.join(known)} "
            "files (optionally .gz)."
        )
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
                    raise DataError(
                        f"{path}:{line_no}: no {text_key!r} field (fields: "
                        f"{', '.join(row)}); pass the right --text-key."
                    )
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
            raise DataError(
                f"{path}: no {text_key!r} column (columns: "
                f"{', '.join(columns)}); pass the right --text-key."
            )
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
