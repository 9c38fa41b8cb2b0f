"""Where a run's files may live besides a local folder: an object-store URL (`s3://bucket/key`,
`gs://bucket/key`), reached through TensorStore's own kvstore drivers.

Endpoints and credentials come from the standard environment only, so they never enter a config,
a log line or a checkpoint: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (or any other source of
the AWS default chain), `AWS_ENDPOINT_URL` for an S3-compatible store (MinIO, Ceph, moto),
`AWS_REGION`; `GOOGLE_APPLICATION_CREDENTIALS` for GCS. `kvstore_spec` copies the endpoint and
region into the spec (TensorStore's s3 driver does not read `AWS_ENDPOINT_URL` itself) and never
the keys, which the driver reads from the environment when it opens the store.

`check_reachable` turns the two mistakes users make first, a bucket that does not exist and
credentials the store refuses, into one line naming the URL and the fix, before anything is
written or trained.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jaxtrain.errors import JaxtrainError

# The URL schemes whose TensorStore kvstore driver is named here.
DRIVERS = {"s3": "s3", "gs": "gcs"}
# Written last into a local copy of a bucket folder: a copy without it is incomplete.
COPY_COMPLETE = ".jaxtrain-copy-complete"


class StorageError(JaxtrainError, RuntimeError):
    """An object-store location that cannot be used; the message names the URL and the fix."""


def is_url(path: Any) -> bool:
    """Whether `path` names an object-store location (`s3://`, `gs://`) rather than a local one."""
    return isinstance(path, str) and urlparse(path).scheme in DRIVERS


def split_url(url: str) -> tuple[str, str, str]:
    """(scheme, bucket, key prefix) of an object-store URL; the prefix ends with "/" when set."""
    parsed = urlparse(url)
    if parsed.scheme not in DRIVERS or not parsed.netloc:
        raise StorageError(
            f"{url!r} is not an object-store URL: write s3://BUCKET/PATH or gs://BUCKET/PATH."
        )
    prefix = parsed.path.strip("/")
    return parsed.scheme, parsed.netloc, prefix + "/" if prefix else ""


def kvstore_spec(url: str) -> dict[str, Any]:
    """TensorStore's kvstore spec of `url`, with the endpoint and region of the environment
    (never its credentials: the driver reads those when it opens the store)."""
    scheme, bucket, prefix = split_url(url)
    spec: dict[str, Any] = {"driver": DRIVERS[scheme], "bucket": bucket, "path": prefix}
    if scheme == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if endpoint:
            spec["endpoint"] = endpoint
        if region:
            spec["aws_region"] = region
    return spec


def _credentials_hint(scheme: str) -> str:
    if scheme == "s3":
        return (
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) to keys of this "
            "store, and AWS_ENDPOINT_URL for an S3-compatible store"
        )
    return "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file of this project"


def describe_failure(url: str, error: BaseException) -> str:
    """One line saying why `url` cannot be used and how to fix it, from a TensorStore error.

    The store's reply (its XML body, request ids) is left out: it is long, and says nothing the
    code name does not."""
    scheme, bucket, _ = split_url(url)
    text = str(error)
    code = re.search(r"<Code>([A-Za-z]+)</Code>", text)
    code = code.group(1) if code else text.split(" [", 1)[0].strip()
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return (
            f"{url}: bucket {bucket!r} does not exist at "
            f"{os.environ.get('AWS_ENDPOINT_URL') or 'the default endpoint'}. Create it "
            "first, or fix the bucket name in the URL (and AWS_ENDPOINT_URL for an "
            "S3-compatible store)."
        )
    denied = (
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "Forbidden",
        "403",
        "401",
    )
    if any(word in text for word in denied):
        return f"{url}: the store refused the credentials ({code}); {_credentials_hint(scheme)}."
    return f"{url}: cannot reach the store ({code[:200]}); {_credentials_hint(scheme)}."


def check_reachable(url: str, *, write: bool) -> None:
    """StorageError (one line) unless `url`'s bucket exists and accepts these credentials.

    Lists the prefix (a missing bucket reads as missing keys, so a read alone would pass);
    with `write`, also writes and deletes a probe object, as a checkpoint folder must allow."""
    import tensorstore as ts  # heavy: only runs that use object storage pay for it

    try:
        store = ts.KvStore.open(kvstore_spec(url)).result()
        store.list(ts.KvStore.KeyRange(".jaxtrain-probe", ".jaxtrain-probf")).result()
        if write:
            store.write(".jaxtrain-probe", b"").result()
            store.delete_range(ts.KvStore.KeyRange(".jaxtrain-probe", ".jaxtrain-probf")).result()
    except Exception as e:  # TensorStore raises ValueError with the store's whole reply
        raise StorageError(describe_failure(url, e)) from e


def folder_bytes(url: str) -> int:
    """Total size of the objects under a bucket folder, from the store's listing (fsspec's
    filesystem of the scheme: s3fs, gcsfs), without reading them."""
    import fsspec  # with etils; only listings of buckets need it

    return int(fsspec.filesystem(split_url(url)[0]).du(url))


def local_copy(url: str, root: str | os.PathLike) -> Path:
    """A local copy of the objects directly under the bucket folder `url`, made once under
    `root` and reused while the objects keep their sizes and ETags (for readers that need local
    files, such as a Hugging Face folder's safetensors). StorageError when nothing is there."""
    import fsspec

    fs = fsspec.filesystem(split_url(url)[0])
    try:
        entries = [
            e for e in fs.ls(url.rstrip("/"), detail=True, refresh=True) if e["type"] == "file"
        ]
    except FileNotFoundError:
        entries = []
    except Exception as e:
        raise StorageError(describe_failure(url, Exception(f"{type(e).__name__}: {e}"))) from e
    if not entries:
        raise StorageError(f"{url}: no objects under this prefix; fix the URL.")
    version = url + "".join(f"|{e['name']}:{e['size']}:{e.get('ETag', '')}" for e in entries)
    name = url.rstrip("/").rsplit("/", 1)[-1]
    dest = Path(root) / f"{hashlib.sha256(version.encode()).hexdigest()[:16]}-{name}"
    if (dest / COPY_COMPLETE).is_file():
        return dest
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for e in entries:
        fs.get_file(e["name"], str(partial / e["name"].rsplit("/", 1)[-1]))
    (partial / COPY_COMPLETE).touch()
    try:
        os.replace(partial, dest)  # atomic: another process never reads half a copy
    except OSError:  # another process finished the same copy first
        shutil.rmtree(partial, ignore_errors=True)
    return dest
