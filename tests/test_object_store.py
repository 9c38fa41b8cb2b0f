"""Object-store URLs against a real S3-compatible server (moto's, on 127.0.0.1, once per run):
the kvstore spec built from the standard environment reads and writes there, and a missing
bucket is one line naming it, without the keys."""

from __future__ import annotations

import boto3
import pytest
from s3_fixture import SECRET

from jaxtrain.rundir import object_store


def test_is_url_tells_object_store_from_local_paths():
    assert object_store.is_url("s3://b/ckpt")
    assert object_store.is_url("gs://b/ckpt")
    assert not object_store.is_url("/tmp/ckpt")
    assert not object_store.is_url("runs/s3:/x")


def test_spec_takes_endpoint_and_region_from_the_environment_never_keys(s3_server):
    spec = object_store.kvstore_spec("s3://jaxtrain-test/runs/a")
    assert spec == {
        "driver": "s3",
        "bucket": "jaxtrain-test",
        "path": "runs/a/",
        "endpoint": s3_server,
        "aws_region": "us-east-1",
    }
    assert SECRET not in repr(spec)
    assert object_store.kvstore_spec("gs://b/x/")["driver"] == "gcs"


def test_spec_reads_and_writes_the_bucket(s3_server):
    import tensorstore as ts

    object_store.check_reachable("s3://jaxtrain-test/runs/a", write=True)
    store = ts.KvStore.open(object_store.kvstore_spec("s3://jaxtrain-test/runs/a")).result()
    store.write("x", b"bytes").result()
    assert store.read("x").result().value == b"bytes"
    # The probe leaves nothing behind.
    assert store.list().result() == [b"x"]


def test_missing_bucket_is_one_line_naming_it(s3_server):
    with pytest.raises(object_store.StorageError) as raised:
        object_store.check_reachable("s3://no-such-bucket/ckpt", write=False)
    message = str(raised.value)
    assert "\n" not in message
    assert "bucket 'no-such-bucket' does not exist" in message
    assert SECRET not in message


def test_a_url_without_a_bucket_is_refused():
    with pytest.raises(object_store.StorageError, match="s3://BUCKET/PATH"):
        object_store.kvstore_spec("s3:///ckpt")


def _manager(url: str, keep: int = 2):
    import orbax.checkpoint as ocp
    from etils import epath

    from jaxtrain.checkpoint import orbax_s3

    options = orbax_s3.options(url, max_to_keep=keep, enable_async_checkpointing=True)
    return ocp.CheckpointManager(epath.Path(url), options=options)


def test_orbax_saves_keeps_and_restores_arrays_in_the_bucket(s3_server):
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp

    manager = _manager("s3://jaxtrain-test/ckpt-keep")
    for step in (1, 2, 3):
        manager.save(step, args=ocp.args.StandardSave({"w": jnp.arange(8.0) * step}))
    manager.wait_until_finished()
    assert manager.all_steps() == [2, 3]  # keep-2 deleted step 1 from the bucket
    keys = [
        o["Key"]
        for o in boto3.client("s3").list_objects_v2(Bucket="jaxtrain-test", Prefix="ckpt-keep/")[
            "Contents"
        ]
    ]
    assert not any(k.startswith("ckpt-keep/1/") for k in keys)
    assert "ckpt-keep/3/commit_success.txt" in keys
    restored = manager.restore(3, args=ocp.args.StandardRestore({"w": np.zeros(8, np.float32)}))
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.arange(8.0) * 3)
    manager.close()


def test_a_step_without_its_commit_marker_is_not_complete(s3_server):
    """What a writer killed mid-save leaves: the step's files, but no marker."""
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    manager = _manager("s3://jaxtrain-test/ckpt-commit")
    manager.save(1, args=ocp.args.StandardSave({"w": jnp.ones(4)}))
    manager.save(2, args=ocp.args.StandardSave({"w": jnp.ones(4) * 2}))
    manager.close()
    boto3.client("s3").delete_object(Bucket="jaxtrain-test", Key="ckpt-commit/2/commit_success.txt")
    assert _manager("s3://jaxtrain-test/ckpt-commit").latest_step() == 1


def test_step_listing_in_a_bucket_goes_by_the_commit_marker(s3_server):
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    from jaxtrain.rundir import step_folders

    url = "s3://jaxtrain-test/ckpt-list"
    assert step_folders.committed_steps(url) == []
    assert step_folders.unfinished_saves(url) == []
    manager = _manager(url, keep=3)
    for step in (1, 2):
        manager.save(step, args=ocp.args.StandardSave({"w": jnp.ones(4) * step}))
    manager.close()
    assert step_folders.committed_steps(url) == [1, 2]
    assert str(step_folders.step_folder(url, 2)) == url + "/2"
    boto3.client("s3").delete_object(Bucket="jaxtrain-test", Key="ckpt-list/2/commit_success.txt")
    assert step_folders.committed_steps(url) == [1]
    assert [str(p) for p in step_folders.unfinished_saves(url)] == [url + "/2"]


def test_checkpointer_in_a_bucket_saves_checks_and_resumes_past_a_killed_save(s3_server):
    """The run's Checkpointer on s3://: checksums are saved and checked, keep-N deletes, and a
    step whose save never committed (its marker missing, as after SIGKILL) is not resumed from
    and is written afresh."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxtrain.checkpoint.manager import Checkpointer

    url = "s3://jaxtrain-test/run-ckpt"
    state = {"params": {"w": jnp.arange(12.0).reshape(3, 4)}, "step": jnp.int32(0)}
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
    checkpointer = Checkpointer(url, keep=2)
    for step in (1, 2, 3):
        checkpointer.save(step, jax.tree.map(lambda x, s=step: x * s, state), {"batch": step}, {})
    checkpointer.close()
    boto3.client("s3").delete_object(Bucket="jaxtrain-test", Key="run-ckpt/3/commit_success.txt")

    checkpointer = Checkpointer(url, keep=2)
    assert checkpointer.latest_step() == 2
    restored, data, _ = checkpointer.restore(2, abstract)
    np.testing.assert_array_equal(
        np.asarray(restored["params"]["w"]), np.arange(12.0).reshape(3, 4) * 2
    )
    assert data == {"batch": 2}
    assert checkpointer.saved_checksums(2)
    checkpointer.save(3, jax.tree.map(lambda x: x * 3, state), {"batch": 3}, {})
    checkpointer.close()
    assert Checkpointer(url, read_only=True).all_steps() == [2, 3]


def test_checkpointer_on_a_missing_bucket_is_one_line(s3_server):
    from jaxtrain.checkpoint.manager import Checkpointer

    with pytest.raises(object_store.StorageError, match="bucket 'no-such-bucket' does not exist"):
        Checkpointer("s3://no-such-bucket/ckpt")
