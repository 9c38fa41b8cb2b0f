"""Random access to the documents of raw-text files: document i of many files, by number.

Indexing is cheap and done at start-up by every process: a JSONL file's line starts come from one
scan for newlines (a compressed file is decompressed once into a cache first, see
`text_files.readable_copy`), a Parquet file's row counts from its footer, an ArrayRecord file's
record count from its own index, a text file is one document. Reading document i then costs one
line, one Parquet row group (the last two read are kept), or one record.

A blank line, an empty text and a whitespace-only text file are documents of no text, which the
windows skip entirely, as `tools/tokenize_corpus.py` does. A JSONL line that is not a JSON object,
or lacks `data.text_key`, is refused naming the file and line when it is read (the first document
of every file is read at start-up, so a wrong key is caught before training starts).

The source is pickled into grain's worker processes: open files are dropped on pickling and
reopened lazily in each process.
"""

from __future__ import annotations

import collections
import json
import mmap
from pathlib import Path
from typing import Any

import numpy as np

from jaxtrain.data import example_proto
from jaxtrain.data.errors import DataError
from jaxtrain.data.text_files import file_kind, open_binary, readable_copy

PARQUET_GROUPS_KEPT = 2


def _field(row: Any, key: str, where: str) -> str:
    if not isinstance(row, dict):
        raise DataError(f"{where}: a {type(row).__name__}, not a JSON object with a {key!r} field.")
    if key not in row:
        fields = ", ".join(row) or "none"
        raise DataError(
            f"{where}: no {key!r} field (fields: {fields}); set data.text_key to the field "
            "that holds the text."
        )
    text = row[key]
    if text is None:
        return ""
    if not isinstance(text, str):
        raise DataError(f"{where}: field {key!r} holds a {type(text).__name__}, not text.")
    return text


class _Reader:
    """One file's documents; subclasses open their file lazily (after unpickling)."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self._handle: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handle": None}

    def __len__(self) -> int:
        raise NotImplementedError

    def text(self, i: int) -> str:
        """Document i's text ("" for a document of no text)."""
        raise NotImplementedError


class JsonlReader(_Reader):
    """JSONL: line starts from one newline scan; document i is line i."""

    def __init__(self, path: Path, key: str) -> None:
        super().__init__(path, key)
        self.copy = readable_copy(path)
        with open_binary(self.copy) as f:
            size = f.seek(0, 2)
            if size == 0:
                self.starts = np.zeros(1, np.int64)
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                newlines = np.flatnonzero(np.frombuffer(m, np.uint8) == ord("\n"))
        ends = newlines + 1
        if not len(ends) or ends[-1] != size:  # a last line without its newline
            ends = np.append(ends, size)
        self.starts = np.concatenate([[0], ends]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def text(self, i: int) -> str:
        if self._handle is None:
            self._handle = open_binary(self.copy)
        self._handle.seek(int(self.starts[i]))
        line = self._handle.read(int(self.starts[i + 1] - self.starts[i]))
        if not line.strip():
            return ""
        where = f"{self.path}:{i + 1}"
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(
                f"{where}: not a JSON object ({e.__class__.__name__}: {e}); every line of a "
                "JSONL file must be one JSON object."
            ) from None
        return _field(row, self.key, where)


class TextFileReader(_Reader):
    """A plain text file: one document, the whole file."""

    def __len__(self) -> int:
        return 1

    def text(self, i: int) -> str:
        with open_binary(readable_copy(self.path)) as f:
            text = f.read().decode("utf-8")
        return text if text.strip() else ""


class ParquetReader(_Reader):
    """Parquet: rows counted per row group from the footer; a document read decodes its group."""

    def __init__(self, path: Path, key: str) -> None:
        super().__init__(path, key)
        parquet = self._open()
        columns = parquet.schema_arrow.names
        if key not in columns:
            raise DataError(
                f"{path}: no {key!r} column (columns: {', '.join(columns)}); set data.text_key "
                "to the column that holds the text."
            )
        rows = [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
        self.group_starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self._groups: collections.OrderedDict[int, list[Any]] = collections.OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_groups": collections.OrderedDict()}

    def _open(self) -> Any:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            hint = "pip install pyarrow"
            raise DataError(f"{self.path}: reading Parquet needs pyarrow ({hint}).") from None
        if self._handle is None:
            self._handle = pq.ParquetFile(open_binary(self.path))
        return self._handle

    def __len__(self) -> int:
        return int(self.group_starts[-1])

    def text(self, i: int) -> str:
        g = int(np.searchsorted(self.group_starts, i, side="right")) - 1
        if g not in self._groups:
            table = self._open().read_row_group(g, columns=[self.key])
            self._groups[g] = table.column(0).to_pylist()
            while len(self._groups) > PARQUET_GROUPS_KEPT:
                self._groups.popitem(last=False)
        text = self._groups[g][i - int(self.group_starts[g])]
        return _field({self.key: text}, self.key, f"{self.path}: row {i}")


class ArrayRecordReader(_Reader):
    """ArrayRecord: document i is record i, decoded by the format of the file's first record."""

    def __init__(self, path: Path, key: str) -> None:
        super().__init__(path, key)
        self.count = self._open().num_records()
        self.format = self._detect() if self.count else "text"

    def _open(self) -> Any:
        if self._handle is None:
            from array_record.python.array_record_module import ArrayRecordReader as Raw

            # Random access is the point: reading ahead would fetch records never used.
            self._handle = Raw(str(self.path), "readahead_buffer_size:0")
        return self._handle

    def _detect(self) -> str:
        """ "json", "example" or "text" from the first record's bytes."""
        first = self._open().read([0])[0]
        if first.lstrip()[:1] == b"{":
            return "json"
        try:
            if self.key in example_proto.bytes_features(first):
                return "example"
        except (example_proto.ProtoError, UnicodeDecodeError):
            pass
        return "text"

    def __len__(self) -> int:
        return self.count

    def text(self, i: int) -> str:
        record = self._open().read([i])[0]
        where = f"{self.path}: record {i}"
        if self.format == "json":
            try:
                return _field(json.loads(record), self.key, where)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise DataError(f"{where}: not a JSON object ({e}).") from None
        if self.format == "example":
            try:
                values = example_proto.bytes_features(record).get(self.key)
            except example_proto.ProtoError as e:
                raise DataError(f"{where}: not a tf.train.Example ({e}).") from None
            if values is None:
                raise DataError(f"{where}: no {self.key!r} feature; set data.text_key.")
            return values[0].decode("utf-8") if values else ""
        return record.decode("utf-8")


READERS = {
    "jsonl": JsonlReader,
    "text": TextFileReader,
    "parquet": ParquetReader,
    "arrayrecord": ArrayRecordReader,
}


class DocumentSource:
    """Random-access source (grain `RandomAccessDataSource`) of the documents of many files, in
    file order: item i is document i's text."""

    def __init__(self, files: list[Path], key: str) -> None:
        self.readers = [READERS[file_kind(f)](f, key) for f in files]
        sizes = [len(r) for r in self.readers]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        for reader in self.readers:  # a wrong text key or a non-JSON file fails here, not later
            if len(reader):
                reader.text(0)
        if len(self) == 0:
            raise DataError(f"{', '.join(map(str, files))}: hold no document.")

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: int) -> str:
        index = int(index)
        k = int(np.searchsorted(self.starts, index, side="right")) - 1
        return self.readers[k].text(index - int(self.starts[k]))

    def __repr__(self) -> str:
        return f"DocumentSource({len(self.readers)} files, {len(self)} documents)"

    @property
    def paths(self) -> list[str]:
        """The files, in document order."""
        return [str(r.path) for r in self.readers]
