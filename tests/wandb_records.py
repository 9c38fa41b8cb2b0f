"""What an offline wandb run holds, read back from its `run-<id>.wandb` files: the history
rows, the summary and the rewind point of each start, as the server would see them on sync.

wandb 0.19+ has no Python reader for these files any more; they are a LevelDB log (32 KiB
blocks of records with a 7-byte header, after a 7-byte file header) of `Record` protobufs.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
HEADER = 7
FULL, LAST = 1, 4


def records(path: Path):
    """Every protobuf Record of one .wandb file."""
    data = Path(path).read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", data[:HEADER])
    assert ident == b":W&B" and magic == 0xBEE1, path
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if length == 0 and kind == 0:
            pos += left
            continue
        parts += data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def _items(items) -> dict[str, Any]:
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in items}


def read_run(path: Path) -> dict[str, Any]:
    """{id, rewind (the step it resumes from, or None), history (rows by step), summary}."""
    out: dict[str, Any] = {"id": None, "rewind": None, "history": {}, "summary": {}}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["id"] = record.run.run_id
            if record.run.HasField("branch_point") and record.run.branch_point.run:
                out["rewind"] = int(record.run.branch_point.value)
        elif kind == "history":
            row = _items(record.history.item)
            out["history"].setdefault(int(row["_step"]), {}).update(row)
        elif kind == "summary":
            out["summary"].update(_items(record.summary.update))
    return out


def synced_view(run_files: list[Path]) -> tuple[str, dict[int, dict[str, Any]], dict[str, Any]]:
    """(id, history by step, summary) of the starts of one run, in order, as synced: each
    rewind drops the rows after its step before the start's own rows come in."""
    ids, history, summary = set(), {}, {}
    for path in run_files:
        run = read_run(path)
        ids.add(run["id"])
        if run["rewind"] is not None:
            history = {s: row for s, row in history.items() if s <= run["rewind"]}
        history.update(run["history"])
        summary = run["summary"]
    assert len(ids) == 1, ids
    return ids.pop(), history, summary
