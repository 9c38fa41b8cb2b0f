"""A real S3-compatible server for the object-storage tests: moto's, on 127.0.0.1, started
once per test run; the environment points clients at it as a user's would point them at MinIO."""

from __future__ import annotations

import os
import socket

import boto3
import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

SECRET = "not-a-real-secret-key"
BUCKET = "jaxtrain-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 with a bucket `jaxtrain-test`; the environment points
    clients at it as a user's would point them at MinIO."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    boto3.client("s3").create_bucket(Bucket="jaxtrain-test")
    yield env["AWS_ENDPOINT_URL"]
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
