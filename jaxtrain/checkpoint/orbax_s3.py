"""Orbax checkpoints in an S3 bucket, through TensorStore's own s3 kvstore driver.

Orbax (0.12.8, `_src/serialization/tensorstore_utils.build_kvstore_tspec`) builds the TensorStore
spec of an array folder for `gs://` (its gcs driver) and local paths only: an `s3://` folder is
normalised to `s3:/...` and refused as "not absolute". Every spec Orbax builds (writing, merging
the per-process OCDBT trees, reading) goes through that one module-level function, so `install`
wraps it: an `s3://` folder is built as the `gs://` one would be (the same OCDBT layout and
object-store data-file size) and its gcs driver spec replaced by the s3 spec of
`rundir.object_store`, which carries the environment's endpoint and region. Files that are not
arrays (metadata, the JSON items, the commit marker) go through `etils.epath`, which reads
`s3://` with `s3fs`.

`options` makes the commit a marker file: a bucket has no atomic rename (s3fs copies then
deletes), so a step is complete only once `commit_success.txt` is written after all its files,
and Orbax lists no step without it.
"""

from __future__ import annotations

import functools
from typing import Any

import orbax.checkpoint as ocp
from orbax.checkpoint._src.serialization import tensorstore_utils

from jaxtrain.rundir import object_store

# What Orbax names the file that marks a step (and each item) complete on object storage.
COMMIT_MARKER = "commit_success.txt"


def _as_s3(node: Any) -> Any:
    """`node` (a spec built for gs://) with each gcs driver spec replaced by the s3 one."""
    if isinstance(node, dict):
        if node.get("driver") in ("gcs", "gcs_grpc") and "bucket" in node:
            spec = object_store.kvstore_spec(f"s3://{node['bucket']}/")
            spec["path"] = node.get("path", "")
            return spec
        return {key: _as_s3(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_as_s3(value) for value in node]
    return node


def _s3_aware(build: Any) -> Any:
    @functools.wraps(build)
    def build_kvstore_tspec(directory: Any, *args: Any, **kwargs: Any) -> Any:
        path = str(directory)
        if path.startswith("s3://"):
            return _as_s3(build("gs://" + path[len("s3://") :], *args, **kwargs))
        return build(directory, *args, **kwargs)

    build_kvstore_tspec.jaxtrain_s3 = True
    return build_kvstore_tspec


def install() -> None:
    """Lets Orbax write and read arrays under `s3://` (idempotent)."""
    build = tensorstore_utils.build_kvstore_tspec
    if not getattr(build, "jaxtrain_s3", False):
        tensorstore_utils.build_kvstore_tspec = _s3_aware(build)


def options(directory: str, **kwargs: Any) -> ocp.CheckpointManagerOptions:
    """Orbax manager options for `directory`, committing by marker file on object storage."""
    if object_store.is_url(directory):
        install()
        kwargs["atomicity_options"] = ocp.options.AtomicityOptions(
            mode=ocp.options.AtomicityMode.COMMIT_FILE
        )
    return ocp.CheckpointManagerOptions(**kwargs)
