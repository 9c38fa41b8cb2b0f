"""Reader of datatrove `DocumentTokenizer` shards: X.ds, X.ds.index, X.ds.metadata, X.ds.loss.

Byte layouts are in FORMATS.md. Each shard is checked against its own metadata when it is found
(file sizes, and every document end of the index: 8 bytes per document; no token is read), and
its arrays are memory-mapped on first use, so finding thousands of shards is cheap and a reader
process maps only the files it touches.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from jaxtrain.data import bucket_files as files
from jaxtrain.data.errors import DataError

# Token width in bytes (second field of the metadata's first line) -> on-disk dtype.
TOKEN_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
# How many leading tokens of a shard the EOS check looks at.
EOS_SAMPLE_TOKENS = 65536
# Document ends checked per numpy call when a shard is opened (32 MB of index at a time).
INDEX_CHUNK = 1 << 22

_RETOKENIZE = (
    "re-run the tokenizer (tools/tokenize_corpus.py or datatrove's DocumentTokenizer) "
    "into an empty folder"
)


class Shard:
    """One datatrove shard: its metadata, and memory-mapped tokens, document ends and loss mask.

    The arrays open lazily and are dropped when the shard is pickled (grain worker processes
    re-open them), so a Shard is cheap to create, copy and send.
    """

    def __init__(
        self,
        path: Path | str,
        dtype: np.dtype,
        tokenizer_name: str,
        num_tokens: int,
        has_loss: bool,
    ) -> None:
        self.path = path if files.is_url(path) else Path(path)
        self.dtype = np.dtype(dtype)
        self.tokenizer_name = tokenizer_name
        self.num_tokens = int(num_tokens)
        self.has_loss = has_loss
        self._cache: dict[str, np.ndarray] = {}

    def __repr__(self) -> str:
        return (
            f"Shard({str(self.path)!r}, dtype={self.dtype.name}, "
            f"num_tokens={self.num_tokens}, tokenizer={self.tokenizer_name!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # A pickled np.memmap carries its whole content; re-map in the receiving process instead.
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state

    def _map(
        self, key: str, suffix: str, dtype: np.dtype | str, count: int, whole: bool = False
    ) -> np.ndarray:
        if key not in self._cache:
            file = files.companion(self.path, suffix)
            self._cache[key] = files.open_array(file, dtype, count, whole=whole)
        return self._cache[key]

    @property
    def tokens(self) -> np.ndarray:
        """The token ids, memory-mapped, in the shard's own dtype (uint16 or uint32)."""
        return self._map("tokens", "", self.dtype, self.num_tokens)

    @property
    def doc_ends(self) -> np.ndarray:
        """Exclusive end offset (in tokens) of every document, uint64, memory-mapped (read
        whole from a bucket: 8 bytes per document)."""
        if "doc_ends" not in self._cache:  # the size needs a stat: only on first use
            index = files.companion(self.path, ".index")
            self._map("doc_ends", ".index", "<u8", files.size(index) // 8, whole=True)
        return self._cache["doc_ends"]

    @property
    def loss_mask(self) -> np.ndarray | None:
        """One uint8 per token (1 = train on it) from `X.ds.loss`, or None when absent."""
        if not self.has_loss:
            return None
        return self._map("loss", ".loss", np.uint8, self.num_tokens)

    @property
    def num_docs(self) -> int:
        """The number of documents (entries of the index)."""
        return len(self.doc_ends)


def _parse_metadata(file: Path | str) -> tuple[str, int, int]:
    """Returns (tokenizer name, token width in bytes, token count) from a `.ds.metadata` file."""
    raw = files.read_bytes(file)
    # Undecodable bytes are kept visible (as \udcXX) in the message instead of failing here.
    lines = raw.decode("utf-8", errors="surrogateescape").split("\n")
    # The tokenizer name may itself hold a '|' (datatrove's "Unknown Tokenizer|2" placeholder).
    name, sep, width = lines[0].rpartition("|")
    try:
        raw.decode("utf-8")  # datatrove writes UTF-8: anything else is not its metadata
        if not sep or len(lines) < 2:
            raise ValueError
        width_bytes, num_tokens = int(width), int(lines[1])
    except ValueError:  # UnicodeDecodeError is one
        shown = [line[:80] for line in lines[:2]]  # a binary file would flood the message
        raise DataError(
            f"{file}: malformed datatrove metadata {shown!r}; expected a first "
            "line '<tokenizer>|<bytes per token>' and the token count on the second "
            f"(UTF-8 text); {_RETOKENIZE}."
        ) from None
    if width_bytes not in TOKEN_DTYPES:
        raise DataError(
            f"{file}: unknown token width {width_bytes} bytes; datatrove writes 2 "
            f"(uint16) or 4 (uint32). The file is damaged or not datatrove output; "
            f"{_RETOKENIZE}."
        )
    return name, width_bytes, num_tokens


def _check_index(index: Path | str, ds: Path | str, num_tokens: int, index_size: int) -> None:
    """DataError at the first document end that lies past the token count or before the end
    before it (so every document is a valid, possibly empty, slice of the tokens)."""
    ends = files.open_array(index, "<u8", index_size // 8, whole=True)
    previous = 0
    for lo in range(0, ends.size, INDEX_CHUNK):
        chunk = np.asarray(ends[lo : lo + INDEX_CHUNK])
        before = np.concatenate([np.asarray([previous], np.uint64), chunk[:-1]])
        bad = np.flatnonzero((chunk > num_tokens) | (chunk < before))
        if bad.size:
            i = int(bad[0])
            doc, end = lo + i, int(chunk[i])
            if end > num_tokens:
                raise DataError(
                    f"{index}: document {doc} ends at token {end}, past the "
                    f"{num_tokens} tokens of {_name(ds)}; the index is damaged or "
                    f"belongs to another shard: copy both again or {_RETOKENIZE}."
                )
            raise DataError(
                f"{index}: document {doc} ends at token {end}, before the document "
                f"ahead of it (at {int(before[i])}); document ends never decrease. "
                f"The index is damaged: copy it again or {_RETOKENIZE}."
            )
        previous = int(chunk[-1])


def _name(path: Path | str) -> str:
    return str(path).rsplit("/", 1)[-1]


def open_shard(path: str | os.PathLike) -> Shard:
    """Checks one `X.ds` shard (a file or an object-store URL) against its `.index` and
    `.metadata` files and returns it.

    Raises DataError naming the file when a companion file is missing, the token file is not
    `n_tokens * width` bytes long (truncated copy), or the index does not end at the token count,
    has an end past it or an end before the one ahead of it.
    """
    ds = path if files.is_url(path) else Path(path)
    index, metadata, loss = (files.companion(ds, s) for s in (".index", ".metadata", ".loss"))
    for companion in (index, metadata):
        if not files.is_file(companion):
            raise DataError(
                f"{ds}: its companion file {_name(companion)} is missing (datatrove "
                "writes X.ds, X.ds.index and X.ds.metadata together); copy it with "
                f"the shard or {_RETOKENIZE}."
            )
    name, width, num_tokens = _parse_metadata(metadata)
    size = files.size(ds)
    if size != num_tokens * width:
        raise DataError(
            f"{ds}: {size} bytes, but {_name(metadata)} says {num_tokens} tokens of "
            f"{width} bytes = {num_tokens * width} bytes; the file is truncated or "
            f"belongs to another run. Copy it again or {_RETOKENIZE}."
        )
    index_size = files.size(index)
    if index_size % 8:
        raise DataError(
            f"{index}: {index_size} bytes is not a whole number of uint64 document "
            f"ends; the index is truncated. Copy it again or {_RETOKENIZE}."
        )
    last = 0
    if index_size:
        last = int(np.frombuffer(files.read_range(index, index_size - 8, index_size), "<u8")[0])
    if last != num_tokens:
        raise DataError(
            f"{index}: the last document ends at token {last}, but {_name(ds)} holds "
            f"{num_tokens} tokens; index and tokens come from different runs or one "
            f"is truncated: copy both again or {_RETOKENIZE}."
        )
    if index_size:
        _check_index(index, ds, num_tokens, index_size)
    has_loss = files.is_file(loss)
    if has_loss and files.size(loss) != num_tokens:
        raise DataError(
            f"{loss}: {files.size(loss)} bytes, but the shard holds {num_tokens} "
            "tokens (one loss byte per token); the file is truncated. Copy it again "
            f"or {_RETOKENIZE}."
        )
    return Shard(ds, TOKEN_DTYPES[width], name, num_tokens, has_loss)


def _bucket_shard_files(url: str) -> list[str]:
    """The `.ds` objects one URL names, by the rules of a local folder or file."""
    if url.endswith(".ds") and files.is_file(url):
        return [url]
    found = files.list_files(url)
    shards = [f for f in found if f.endswith(".ds")]
    if shards:
        return shards
    if url.endswith((".ds.index", ".ds.metadata", ".ds.loss")):
        raise DataError(
            f"{url}: not a datatrove shard (pass X.ds, not its .index/.metadata/.loss "
            "companions, or the prefix of a folder of shards)."
        )
    raise DataError(
        f"{url}: no *.ds shards under this prefix (an empty or wrong prefix: listing found "
        f"{len(found)} other objects). Point data.paths at the bucket folder holding the "
        "datatrove shards, e.g. s3://bucket/tokens/train, or upload them there."
    )


def _shard_files(path: str) -> list[Path] | list[str]:
    """The `.ds` files one `data.paths` entry names: a folder's shards, sorted, or one file."""
    if files.is_url(path):
        return _bucket_shard_files(path)
    p = Path(path)
    if p.is_dir():
        found = sorted(f for f in p.glob("*.ds") if f.is_file())
        if not found:
            nested = sorted(p.glob("*/*.ds"))
            hint = (
                f" (its subfolder {nested[0].parent.name!r} has some: point the path there)"
                if nested
                else ""
            )
            raise DataError(
                f"{p}: folder holds no *.ds shards{hint}. Point data.paths at the "
                "output folder of datatrove's DocumentTokenizer, or tokenize a corpus "
                "into it with tools/tokenize_corpus.py."
            )
        return found
    if p.is_file():
        if p.suffix != ".ds":
            raise DataError(
                f"{p}: not a datatrove shard (expected a folder of shards or an "
                "X.ds file; pass X.ds, not its .index/.metadata/.loss companions)."
            )
        return [p]
    raise DataError(
        f"{p}: no such file or folder; fix data.paths / data.val_paths or tokenize a "
        "corpus there with tools/tokenize_corpus.py."
    )


def warn_if_no_eos(shard: Shard, eos_id: int, sample: int = EOS_SAMPLE_TOKENS) -> bool:
    """Warns (and returns False) when the shard's first `sample` tokens never hold `eos_id`."""
    head = np.asarray(shard.tokens[:sample])
    if head.size and not np.any(head == eos_id):
        warnings.warn(
            f"{shard.path}: no EOS token (id {eos_id}) in its first {head.size} tokens, "
            "so documents run together with no separator. Tokenize with an EOS token "
            "(tools/tokenize_corpus.py appends one; datatrove needs eos_token=...).",
            stacklevel=2,
        )
        return False
    return True


def find_shards(paths: list[str] | tuple[str, ...], eos_id: int | None = None) -> list[Shard]:
    """Every non-empty shard under `paths`, in the order given (each folder's shards sorted).

    Empty shards (a tokenizer run with more tasks than inputs leaves some) are skipped. When
    `eos_id` is given, shards whose first tokens hold no EOS are warned about.
    """
    if not paths:
        raise DataError("no data paths given; set data.paths to folders of datatrove shards.")
    shards = [open_shard(f) for p in paths for f in _shard_files(p)]
    non_empty = [s for s in shards if s.num_tokens > 0]
    if not non_empty:
        raise DataError(
            f"all {len(shards)} shards under {', '.join(map(str, paths))} are empty "
            "(0 tokens); the tokenizer read no documents. Check its input files and "
            "text key, then tokenize again."
        )
    if eos_id is not None:
        for shard in non_empty:
            warn_if_no_eos(shard, eos_id)
    return non_empty
