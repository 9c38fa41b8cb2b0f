"""Which raw-text files a `data.kind="text"` entry names, and the one place they are opened.

An entry of `data.paths` / `data.val_paths` is a file or a folder (searched recursively, files in
sorted order, as `tools/tokenize_corpus.py` orders its inputs). Kinds, by file name:
- JSONL (`.jsonl`, `.json`, `.ndjson`, optionally `.gz` or `.zst`): one JSON object per line, the
  document in the field `data.text_key`;
- Parquet (`.parquet`): the column `data.text_key`, read with pyarrow;
- ArrayRecord (`.arrayrecord`, `.array_record`, or `-NNNNN-of-NNNNN` shards of those): one
  document per record (UTF-8 text, a JSON object, or a serialized `tf.train.Example`);
- plain text (`.txt`, `.md`, `.rst`, optionally compressed): the whole file is one document.

`open_binary` is the only function that opens a data file by name for reading, so that another
filesystem (object storage) is routed through one place. An entry may be an `s3://` (or `gs://`)
URL of a file or folder: Parquet is read by ranged requests (pyarrow reads the footer, then the
row groups it needs); JSONL and plain text are copied once into `cache_folder()` (their line index
needs the whole file); ArrayRecord stays local-only (its C++ reader opens local paths).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO

from jaxtrain.data import bucket_files
from jaxtrain.data.errors import DataError
from jaxtrain.data.text_inputs import JSONL_SUFFIXES, PARQUET_SUFFIXES, TEXT_SUFFIXES

ARRAY_RECORD_SUFFIXES = (".arrayrecord", ".array_record")
COMPRESSIONS = (".gz", ".zst")
# MaxText's and TFDS's sharded names: train.array_record-00000-of-00016.
_SHARD_TAIL = re.compile(r"-\d+-of-\d+$")
# Shards a datatrove or Megatron tokenizer writes: an entry holding them is pre-tokenized.
TOKENIZED_SUFFIXES = (".ds", ".bin", ".idx")


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Opens a data file for reading bytes; the one place raw-text files are opened by name."""
    if bucket_files.is_url(path):
        return bucket_files.open_object(str(path))
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file (data.paths / data.val_paths).") from None


def compression(path: str | os.PathLike) -> str:
    """ ".gz", ".zst" or "" for a file name."""
    name = str(path).lower()
    return next((c for c in COMPRESSIONS if name.endswith(c)), "")


def file_kind(path: str | os.PathLike) -> str | None:
    """ "jsonl", "parquet", "arrayrecord" or "text" for a file name; None for other files."""
    name = Path(path).name.lower()
    name = name[: len(name) - len(compression(name))]
    name = _SHARD_TAIL.sub("", name)
    suffix = Path(name).suffix
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in ARRAY_RECORD_SUFFIXES:
        return "arrayrecord"
    if suffix in TEXT_SUFFIXES:
        return "text"
    return None


def is_tokenized(entry: str) -> bool:
    """Whether a `data.paths` entry names tokenized shards (datatrove or Megatron), not text."""
    if bucket_files.is_url(entry):
        if entry.endswith(TOKENIZED_SUFFIXES) or bucket_files.is_file(f"{entry}.idx"):
            return True
        return any(f.endswith((".ds", ".idx")) for f in bucket_files.find_files(entry))
    p = Path(entry)
    if p.is_file():
        return p.name.endswith(TOKENIZED_SUFFIXES)
    if p.is_dir():
        return any(f.name.endswith(".ds") or f.name.endswith(".idx") for f in p.rglob("*"))
    return p.with_name(p.name + ".idx").is_file()  # a Megatron prefix


def _bucket_text_files(entry: str) -> list[str]:
    found = [entry] if bucket_files.is_file(entry) else bucket_files.find_files(entry)
    files = [f for f in found if file_kind(f) is not None]
    if not files:
        raise DataError(
            f"{entry}: no .jsonl(.gz/.zst), .parquet or .txt object at this URL or under it "
            "(an empty or wrong prefix) to read as raw text (data.kind='text')."
        )
    local_only = [f for f in files if file_kind(f) == "arrayrecord"]
    if local_only:
        raise DataError(
            f"{local_only[0]}: ArrayRecord files are read from local disk only (their C++ "
            "reader opens local paths); copy them to a local folder and point data.paths there."
        )
    return files


def text_files(entry: str) -> list[Path] | list[str]:
    """The raw-text files one entry names: the file itself, or a folder's, sorted."""
    if bucket_files.is_url(entry):
        return _bucket_text_files(entry)
    p = Path(entry)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and file_kind(f) is not None)
        if not files:
            raise DataError(
                f"{entry}: holds no .jsonl(.gz/.zst), .parquet, .arrayrecord or .txt file to "
                "read as raw text (data.kind='text')."
            )
        return files
    if not p.is_file():
        raise DataError(f"{entry}: no such file or folder (data.paths / data.val_paths).")
    if file_kind(p) is None:
        raise DataError(
            f"{entry}: not a raw-text file data.kind='text' reads; name it .jsonl (.gz/.zst), "
            ".parquet, .arrayrecord or .txt."
        )
    return [p]


def _decompressor(path: Path | str, raw: IO[bytes]) -> IO[bytes]:
    if compression(path) == ".gz":
        return gzip.GzipFile(fileobj=raw)
    try:
        import zstandard
    except ImportError:
        raise DataError(
            f"{path}: reading .zst files needs zstandard (pip install 'jaxtrain[text]')."
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(raw)


def cache_folder() -> Path:
    """Where decompressed copies of compressed JSONL files live ($JAXTRAIN_TEXT_CACHE)."""
    return Path(
        os.environ.get("JAXTRAIN_TEXT_CACHE") or Path(tempfile.gettempdir()) / "jaxtrain-text"
    )


def readable_copy(path: Path | str) -> Path:
    """A file of `path`'s bytes that can be read at any offset: the file itself, or for a
    compressed file its decompressed copy in `cache_folder()`, made once (random access into a
    gzip or zstd stream would decompress from its start on every read)."""
    if bucket_files.is_url(path):  # a bucket object is copied even when not compressed
        version = f"{path}:{bucket_files.version_tag(str(path))}"
    elif not compression(path):
        return path
    else:
        stat = path.stat()
        version = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha256(version.encode()).hexdigest()
    name = str(path).rsplit("/", 1)[-1]
    copy = cache_folder() / f"{key[:24]}-{name[: len(name) - len(compression(name))]}"
    if copy.is_file():
        return copy
    copy.parent.mkdir(parents=True, exist_ok=True)
    partial = copy.with_name(f".{copy.name}.{os.getpid()}.partial")
    try:
        with open_binary(path) as raw, open(partial, "wb") as dst:
            src = _decompressor(path, raw) if compression(path) else raw
            with src:
                shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, EOFError) as e:
        partial.unlink(missing_ok=True)
        raise DataError(f"{path}: cannot be decompressed ({e}); is the file complete?") from None
    os.replace(partial, copy)  # atomic: another process never reads half a copy
    return copy
