"""Small per-process records (a host's check figures) gathered onto every process.

A record is a JSON object sent as a fixed number of bytes, so that every process contributes
an array of the same shape to one `process_allgather`: the only collective whose inputs may
differ in content between processes without a mesh of their own.
"""

from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils


def allgather_json(record: dict[str, Any], wire_bytes: int) -> list[dict[str, Any]]:
    """Every process's `record`, in process order, on every process (every process must call
    it, with the same `wire_bytes`)."""
    wire = json.dumps(record).encode()
    if len(wire) > wire_bytes:  # cut short it would not parse on the other side
        raise ValueError(f"a host record of {len(wire)} bytes exceeds its {wire_bytes}-byte slot")
    row = np.zeros(wire_bytes, np.uint8)
    row[: len(wire)] = np.frombuffer(wire, np.uint8)
    if jax.process_count() == 1:
        rows = row[None]
    else:
        rows = np.asarray(multihost_utils.process_allgather(row)).reshape(-1, wire_bytes)
    return [json.loads(bytes(r).rstrip(b"\0")) for r in rows]
