"""Files of the data layer that may live in a bucket (`s3://bucket/key`, `gs://...`) or locally.

Every function takes a local path or an object-store URL and behaves alike for both, so the
shard readers (datatrove, Megatron) have one code path. Buckets are reached through fsspec
(s3fs for s3://, gcsfs for gs://) rather than TensorStore's kvstore, which the checkpoints use:
a fsspec listing carries each object's size, so a shard is checked against its metadata without
a request per file, and `cat_file(start, end)` is one HTTP Range request.

Token files are never downloaded: `open_array` gives a `BucketArray` whose slices are ranged
reads, one request per slice. Index files are small and are read whole. Filesystem clients are
made lazily, once per process (fsspec's own instance cache is keyed on the process id too), so
shards pickle without them and grain worker processes make their own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from jaxtrain.data.errors import DataError
from jaxtrain.rundir.object_store import describe_failure, is_url, split_url

_FILESYSTEMS: dict[tuple[int, str], Any] = {}


def _filesystem(url: str) -> Any:
    scheme = split_url(url)[0]
    key = (os.getpid(), scheme)
    if key not in _FILESYSTEMS:
        import fsspec  # only runs that read buckets pay for s3fs/aiobotocore

        try:
            _FILESYSTEMS[key] = fsspec.filesystem(scheme)
        except ImportError as e:  # fsspec names the missing driver (s3fs, gcsfs)
            extra = "s3" if scheme == "s3" else "gcs"
            raise DataError(
                f"{url}: reading {scheme}:// needs a filesystem driver that is not installed "
                f"({e}); install it, e.g. `pip install 'jaxtrain[{extra}]'` or "
                f"`pip install {'s3fs' if scheme == 's3' else 'gcsfs'}`"
            ) from e
    return _FILESYSTEMS[key]


def _fail(url: str, error: BaseException) -> DataError:
    """A DataError of one line naming `url` and the fix, from a filesystem error."""
    text = " ".join(f"{type(error).__name__}: {error}".split())  # one line, whatever the store says
    if isinstance(error, PermissionError) and "Forbidden" not in text:
        text += " (403 Forbidden)"  # s3fs maps refused keys to PermissionError
    return DataError(describe_failure(url, Exception(text)))


def companion(path: str | os.PathLike, suffix: str) -> str | Path:
    """`path` with `suffix` appended to its name (X.ds -> X.ds.index), kept a URL or a Path."""
    if is_url(path):
        return str(path) + suffix
    p = Path(path)
    return p.with_name(p.name + suffix)


def _info(url: str) -> dict[str, Any] | None:
    try:
        return _filesystem(url).info(url)
    except FileNotFoundError:
        return None
    except Exception as e:
        raise _fail(url, e) from e


def check_bucket(url: str) -> None:
    """DataError naming the URL when its bucket does not exist or refuses these credentials.

    Asked only once a listing came back empty (a missing bucket lists as an empty prefix), since
    listing a bucket's top level costs requests in proportion to its size."""
    bucket = split_url(url)[1]
    try:
        _filesystem(url).ls(bucket, detail=False)
    except FileNotFoundError as e:
        raise DataError(describe_failure(url, Exception("NoSuchBucket"))) from e
    except Exception as e:
        raise _fail(url, e) from e


def is_file(path: str | os.PathLike) -> bool:
    """Whether `path` is a file (an object, for a URL)."""
    if is_url(path):
        info = _info(str(path))
        return info is not None and info.get("type") == "file"
    return Path(path).is_file()


def size(path: str | os.PathLike) -> int:
    """The size of a file or object in bytes."""
    if is_url(path):
        info = _info(str(path))
        if info is None:
            raise DataError(f"{path}: no such object; fix data.paths / data.val_paths.")
        return int(info["size"])
    return Path(path).stat().st_size


def read_bytes(path: str | os.PathLike) -> bytes:
    """The whole content of a (small) file: metadata and index files."""
    if is_url(path):
        try:
            return _filesystem(str(path)).cat_file(str(path))
        except Exception as e:
            raise _fail(str(path), e) from e
    return Path(path).read_bytes()


def read_range(path: str | os.PathLike, start: int, stop: int) -> bytes:
    """Bytes [start, stop) of a file: one ranged request for a URL."""
    if stop <= start:
        return b""
    if is_url(path):
        try:
            return _filesystem(str(path)).cat_file(str(path), start=start, end=stop)
        except Exception as e:
            raise _fail(str(path), e) from e
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(stop - start)


def list_files(url: str) -> list[str]:
    """URLs of the objects directly under the folder `url` (not deeper), sorted by name.

    An empty list when the prefix holds nothing; DataError when the bucket is missing or refuses
    the credentials."""
    try:
        entries = _filesystem(url).ls(url.rstrip("/"), detail=True, refresh=True)
    except FileNotFoundError:
        entries = []
    except Exception as e:
        raise _fail(url, e) from e
    if not entries:
        check_bucket(url)
    scheme = split_url(url)[0]
    return sorted(f"{scheme}://{e['name']}" for e in entries if e.get("type") == "file")


class BucketArray:
    """A read-only 1-D array of an object, read by ranged requests: one per slice taken.

    Slicing (`a[lo:hi]`, step 1) and single items are what the token pool and its checks use."""

    def __init__(self, url: str, dtype: np.dtype | str, count: int, offset: int = 0) -> None:
        self.url, self.dtype, self.offset = url, np.dtype(dtype), int(offset)
        self.shape = (int(count),)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        """Items in the array."""
        return self.shape[0]

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            lo, hi, step = index.indices(len(self))
            if step != 1:
                raise IndexError(f"{self.url}: strided reads are not supported")
            hi = max(hi, lo)
            raw = read_range(
                self.url,
                self.offset + lo * self.dtype.itemsize,
                self.offset + hi * self.dtype.itemsize,
            )
            return np.frombuffer(raw, self.dtype, hi - lo)
        i = range(len(self))[index]  # IndexError past the end, as numpy
        return self[i : i + 1][0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)


def open_array(
    path: str | os.PathLike, dtype: np.dtype | str, count: int, offset: int = 0, whole: bool = False
) -> Any:
    """`count` items of `dtype` from byte `offset` of a file: memory-mapped locally; from a bucket,
    read whole when `whole` (index files), else a BucketArray of ranged reads (token files)."""
    if count == 0:
        return np.zeros(0, dtype)  # np.memmap refuses empty files
    if not is_url(path):
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))
    if whole:
        nbytes = count * np.dtype(dtype).itemsize
        return np.frombuffer(read_range(path, offset, offset + nbytes), dtype, count)
    return BucketArray(str(path), dtype, count, offset)


def find_files(url: str) -> list[str]:
    """URLs of every object under the folder `url`, at any depth, in the order sorted local
    paths have: part by part ("a/b" before "a-c", though "-" sorts before "/")."""
    try:
        found = _filesystem(url).find(url.rstrip("/"), detail=False)
    except FileNotFoundError:
        found = []
    except Exception as e:
        raise _fail(url, e) from e
    if not found:
        check_bucket(url)
    scheme = split_url(url)[0]
    return sorted((f"{scheme}://{n}" for n in found), key=lambda u: u.split("/"))


def open_object(url: str) -> Any:
    """A seekable binary file of an object, read by ranged requests as it is read."""
    try:
        return _filesystem(url).open(url, "rb")
    except FileNotFoundError:
        raise DataError(f"{url}: no such object (data.paths / data.val_paths).") from None
    except Exception as e:
        raise _fail(url, e) from e


def version_tag(url: str) -> str:
    """What changes when the object is rewritten: its size and ETag (or modification time)."""
    info = _info(url)
    if info is None:
        raise DataError(f"{url}: no such object (data.paths / data.val_paths).")
    return f"{info.get('size')}:{info.get('ETag') or info.get('LastModified') or ''}"
