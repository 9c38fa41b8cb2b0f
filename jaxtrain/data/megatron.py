"""Megatron indexed datasets (`prefix.bin` + `prefix.idx`): reading, writing and merging.

Byte layouts are in FORMATS.md. A `MegatronFile` presents one prefix with the same attributes as a
datatrove `Shard` (tokens, doc_ends, num_tokens, ...), so the token pool, windows, splits and
mixtures treat both formats alike. Sequences are the documents, as in Megatron's GPT dataset (it
samples and splits over `sequence_lengths`; the `.idx` document index only groups sentences).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxtrain.data import bucket_files as files
from jaxtrain.data.errors import DataError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence count, document count
# Megatron's `DType` codes; 8 (uint16) and 4 (int32) are what its preprocessing writes.
DTYPE_CODES = {
    1: np.dtype("u1"),
    2: np.dtype("i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    7: np.dtype("<f4"),
    8: np.dtype("<u2"),
}
CODE_OF_DTYPE = {v: k for k, v in DTYPE_CODES.items()}
# Megatron's preprocessing stores tokens as uint16 below this vocabulary size, else int32.
UINT16_VOCAB_LIMIT = 65500

_REBUILD = (
    "rebuild it with Megatron's tools/preprocess_data.py or "
    "tools/tokenize_corpus.py --format megatron"
)


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """The token dtype Megatron's preprocessing picks for a vocabulary (`DType.optimal_dtype`)."""
    return DTYPE_CODES[8] if vocab_size < UINT16_VOCAB_LIMIT else DTYPE_CODES[4]


def _prefix(path: str | os.PathLike) -> Path | str:
    if files.is_url(path):
        return str(path)[:-4] if str(path).endswith((".bin", ".idx")) else str(path)
    p = Path(path)
    return p.with_suffix("") if p.suffix in (".bin", ".idx") else p


class MegatronFile:
    """One Megatron indexed dataset: header facts, and memory-mapped tokens and sequence lengths.

    Shard-compatible: `tokens`, `doc_ends` (the exclusive end of every sequence, in tokens),
    `num_tokens`, `num_docs`, `dtype`, `path` (the .bin) and `tokenizer_name` ("", the format does
    not record it). The maps open lazily and are dropped when pickled (grain workers re-open them).
    """

    has_loss = False
    loss_mask = None
    tokenizer_name = ""

    def __init__(
        self,
        prefix: Path | str,
        dtype: np.dtype,
        num_seqs: int,
        num_docs_index: int,
        num_tokens: int,
    ) -> None:
        self.prefix = prefix if files.is_url(prefix) else Path(prefix)
        self.path = files.companion(self.prefix, ".bin")
        self.dtype = np.dtype(dtype)
        self.num_seqs = int(num_seqs)
        self.num_doc_index = int(num_docs_index)
        self.num_tokens = int(num_tokens)
        self._cache: dict[str, np.ndarray] = {}

    def __repr__(self) -> str:
        return (
            f"MegatronFile({str(self.prefix)!r}, dtype={self.dtype.name}, "
            f"sequences={self.num_seqs}, num_tokens={self.num_tokens})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state

    @property
    def idx_path(self) -> Path | str:
        """The `.idx` file."""
        return files.companion(self.prefix, ".idx")

    def _idx_array(self, key: str, dtype: str, offset: int, count: int) -> np.ndarray:
        if key not in self._cache:  # read whole from a bucket: the index is small
            self._cache[key] = files.open_array(self.idx_path, dtype, count, offset, whole=True)
        return self._cache[key]

    @property
    def sequence_lengths(self) -> np.ndarray:
        """Tokens per sequence, int32, memory-mapped from the .idx."""
        return self._idx_array("sizes", "<i4", HEADER.size, self.num_seqs)

    @property
    def sequence_pointers(self) -> np.ndarray:
        """Byte offset of every sequence in the .bin, int64, memory-mapped."""
        return self._idx_array("pointers", "<i8", HEADER.size + 4 * self.num_seqs, self.num_seqs)

    @property
    def document_indices(self) -> np.ndarray:
        """The .idx document index (sequence ranges per document), int64, memory-mapped."""
        return self._idx_array(
            "doc_idx", "<i8", HEADER.size + 12 * self.num_seqs, self.num_doc_index
        )

    @property
    def tokens(self) -> np.ndarray:
        """Every token of the .bin in the file's own dtype: memory-mapped, or read by ranged
        requests from a bucket."""
        if "tokens" not in self._cache:
            self._cache["tokens"] = files.open_array(self.path, self.dtype, self.num_tokens)
        return self._cache["tokens"]

    @property
    def doc_ends(self) -> np.ndarray:
        """Exclusive end (in tokens) of every sequence, int64; computed once per process."""
        if "ends" not in self._cache:
            self._cache["ends"] = np.cumsum(self.sequence_lengths, dtype=np.int64)
        return self._cache["ends"]

    @property
    def num_docs(self) -> int:
        """Sequences, which Megatron's GPT dataset samples and splits as documents."""
        return self.num_seqs


def open_megatron(path: str | os.PathLike) -> MegatronFile:
    """Checks `prefix.idx` against `prefix.bin` and returns the dataset (`path`: prefix or file).

    DataError, naming the file and the fix, for a missing file, a wrong magic or version, an
    unknown dtype code, an index shorter than its counts say, a negative sequence length,
    pointers that do not follow the lengths, a document index that does not rise from 0 to the
    sequence count, or a .bin whose size is not what the pointers and lengths add up to. Every
    entry of the index is checked (vectorised: 20 bytes per sequence are read).
    """
    prefix = _prefix(path)
    idx, bin_ = (files.companion(prefix, s) for s in (".idx", ".bin"))
    for file in (idx, bin_):
        if not files.is_file(file):
            raise DataError(
                f"{file}: missing (a Megatron dataset is prefix.bin + prefix.idx, "
                f"named by the prefix without extension); copy it or {_REBUILD}."
            )
    idx_size = files.size(idx)
    head = files.read_range(idx, 0, min(HEADER.size, idx_size))
    if len(head) < HEADER.size or head[:9] != MAGIC:
        raise DataError(
            f"{idx}: not a Megatron index (magic {head[:9]!r}, expected {MAGIC!r}); "
            f"the file is damaged or another format. Pass the prefix of a "
            f"prefix.bin/prefix.idx pair, or {_REBUILD}."
        )
    _, version, code, num_seqs, num_docs = HEADER.unpack(head)
    if version != VERSION:
        raise DataError(
            f"{idx}: index version {version}; only version {VERSION} (Megatron core's "
            f"MMIDIDX) is read. {_REBUILD[0].upper()}{_REBUILD[1:]}."
        )
    if code not in DTYPE_CODES:
        raise DataError(
            f"{idx}: dtype code {code} does not exist (known: "
            f"{', '.join(f'{k} {v.name}' for k, v in DTYPE_CODES.items())}); the "
            f"index is damaged: {_REBUILD}."
        )
    dtype = DTYPE_CODES[code]
    needed = HEADER.size + 12 * num_seqs + 8 * num_docs
    if idx_size < needed:
        raise DataError(
            f"{idx}: {idx_size} bytes, but its header announces {num_seqs} sequences "
            f"and {num_docs} document indices ({needed} bytes); the index is "
            f"truncated. Copy it again or {_REBUILD}."
        )
    file = MegatronFile(prefix, dtype, num_seqs, num_docs, 0)
    sizes = np.asarray(file.sequence_lengths, np.int64)
    pointers = np.asarray(file.sequence_pointers)
    if num_seqs and (negative := np.flatnonzero(sizes < 0)).size:
        # A negative length would make document ends decrease, however the pointers agree.
        bad = int(negative[0])
        raise DataError(
            f"{idx}: sequence {bad} has length {int(sizes[bad])}; lengths are token "
            f"counts and never negative. The index is damaged: {_REBUILD}."
        )
    num_tokens = int(sizes.sum())
    bin_size = files.size(bin_)
    if bin_size != num_tokens * dtype.itemsize:
        raise DataError(
            f"{bin_}: {bin_size} bytes, but {str(idx).rsplit('/', 1)[-1]} holds {num_seqs} sequences of "
            f"{num_tokens} {dtype.name} tokens = {num_tokens * dtype.itemsize} bytes; "
            f"the .bin is truncated or belongs to another index. Copy both again or "
            f"{_REBUILD}."
        )
    # The token pool reads the .bin as one array, so sequences must lie back to back in order
    # (Megatron's builder and merger always write them so).
    expected = np.concatenate([[0], np.cumsum(sizes[:-1])]) * dtype.itemsize if num_seqs else sizes
    if not np.array_equal(pointers, expected):
        bad = int(np.argmax(pointers != expected))
        raise DataError(
            f"{idx}: sequence {bad} starts at byte {int(pointers[bad])}, but the "
            f"lengths before it put it at byte {int(expected[bad])}; sequences must "
            f"lie back to back in the .bin. {_REBUILD[0].upper()}{_REBUILD[1:]}."
        )
    doc_idx = np.asarray(file.document_indices)
    if num_docs and (doc_idx[0] != 0 or doc_idx[-1] != num_seqs or np.any(np.diff(doc_idx) < 0)):
        raise DataError(
            f"{idx}: the document index must rise from 0 to the sequence count "
            f"{num_seqs} (it runs {int(doc_idx[0])}..{int(doc_idx[-1])}); the index "
            f"is damaged: {_REBUILD}."
        )
    file.num_tokens = num_tokens
    file._cache.clear()
    return file


def megatron_files(path: str | os.PathLike) -> list[MegatronFile]:
    """The datasets one path names: a prefix (or its .bin/.idx), or a folder of prefixes, sorted."""
    if files.is_url(path):
        return _bucket_megatron_files(str(path))
    p = Path(path)
    if p.is_dir():
        prefixes = sorted(f.with_suffix("") for f in p.glob("*.idx") if f.is_file())
        if not prefixes:
            raise DataError(
                f"{p}: folder holds no Megatron *.idx/*.bin datasets. Point "
                "data.paths at a dataset prefix (e.g. data/corpus_text_document) or "
                "a folder of them, or tokenize into it with tools/tokenize_corpus.py "
                "--format megatron."
            )
        return [open_megatron(f) for f in prefixes]
    if p.suffix == ".ds" or p.name.endswith((".ds.index", ".ds.metadata")):
        raise DataError(
            f"{p}: a datatrove shard, not a Megatron dataset; set data.kind='datatrove'."
        )
    prefix = _prefix(p)
    if not (
        prefix.with_name(prefix.name + ".idx").exists()
        or prefix.with_name(prefix.name + ".bin").exists()
    ):
        raise DataError(
            f"{p}: no such Megatron dataset ({prefix}.bin/.idx) or folder; fix "
            "data.paths / data.val_paths (prefixes have no extension)."
        )
    return [open_megatron(prefix)]


def _bucket_megatron_files(url: str) -> list[MegatronFile]:
    """The datasets a URL names, by the rules of a local prefix or folder."""
    prefix = _prefix(url)
    if files.is_file(f"{prefix}.idx") or files.is_file(f"{prefix}.bin"):
        return [open_megatron(prefix)]
    found = files.list_files(url)
    # Sorted as prefixes, as a local folder's are ("a-b" after "a", though "a-b.idx" < "a.idx").
    prefixes = sorted(f[: -len(".idx")] for f in found if f.endswith(".idx"))
    if not prefixes:
        raise DataError(
            f"{url}: no Megatron dataset (prefix.bin/.idx) at this prefix or under it "
            f"(an empty or wrong prefix: listing found {len(found)} other objects). Point "
            "data.paths at a dataset prefix in the bucket, e.g. "
            "s3://bucket/data/corpus_text_document, or a folder of them."
        )
    return [open_megatron(p) for p in prefixes]


class MegatronWriter:
    """Streams documents into `prefix.bin` and writes `prefix.idx` on close (one sequence each).

    Memory holds one int32 length per document, never the tokens, so corpora larger than memory
    stream through. The layout matches Megatron core's `IndexedDatasetBuilder` with one sentence
    per document: document index 0, 1, ..., S and no sequence modes.
    """

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype | str) -> None:
        self.prefix = _prefix(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_OF_DTYPE:
            raise DataError(f"dtype {self.dtype} has no Megatron dtype code.")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin = open(self.prefix.with_name(self.prefix.name + ".bin"), "wb")
        self._lengths: list[int] = []

    def add(self, doc: Sequence[int] | np.ndarray) -> None:
        """Appends one document (its token ids) as one sequence."""
        arr = np.asarray(doc, self.dtype)
        arr.tofile(self._bin)
        self._lengths.append(arr.size)

    def add_many(self, docs: Iterable[Sequence[int] | np.ndarray]) -> None:
        """Appends documents in order, written with one call for the whole group."""
        arrays = [np.asarray(d, self.dtype) for d in docs]
        if arrays:
            np.concatenate(arrays).tofile(self._bin)
            self._lengths.extend(a.size for a in arrays)

    def close(self) -> Path:
        """Finishes the .bin and writes the .idx; returns the prefix."""
        self._bin.close()
        write_index(self.prefix, self.dtype, np.asarray(self._lengths, np.int64))
        return self.prefix


def write_index(prefix: Path, dtype: np.dtype, lengths: np.ndarray) -> None:
    """Writes `prefix.idx` for back-to-back sequences of `lengths` tokens, one per document."""
    dtype = np.dtype(dtype)
    code = CODE_OF_DTYPE[dtype]
    lengths = np.asarray(lengths, np.int64)
    n = lengths.size
    pointers = np.zeros(n, np.int64)
    if n:
        pointers[1:] = np.cumsum(lengths[:-1]) * dtype.itemsize
    with open(prefix.with_name(prefix.name + ".idx"), "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, code, n, n + 1))
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(np.arange(n + 1, dtype="<i8").tobytes())


def merge_megatron(
    prefixes: Sequence[str | os.PathLike], out: str | os.PathLike, delete_inputs: bool = False
) -> Path:
    """Concatenates datasets of one dtype into `out.bin/.idx` (Megatron's merge_datasets.py)."""
    files = [open_megatron(p) for p in prefixes]
    if not files:
        raise DataError("merge_megatron needs at least one dataset.")
    dtypes = {f.dtype for f in files}
    if len(dtypes) != 1:
        raise DataError(f"cannot merge datasets of different dtypes {sorted(map(str, dtypes))}.")
    out = _prefix(out)
    chunk = 1 << 26
    with open(out.with_name(out.name + ".bin"), "wb") as dst:
        for f in files:
            with open(f.path, "rb") as src:
                while block := src.read(chunk):
                    dst.write(block)
    lengths = np.concatenate([np.asarray(f.sequence_lengths, np.int64) for f in files])
    write_index(out, files[0].dtype, lengths)
    if delete_inputs:
        for f in files:
            f.path.unlink()
            f.idx_path.unlink()
    return out
