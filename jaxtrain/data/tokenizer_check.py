"""Were the shards written with the tokenizer the config names? (`.ds.metadata` vs data.tokenizer)

datatrove records the tokenizer's name or path in each shard's metadata. When both that record and
`data.tokenizer` are tokenizer files on this machine, their vocabularies are compared and a
difference is an error: the token ids would mean other words. When either side is only a name (a
hub id, or a path from the machine that tokenized), the names are compared and a difference is a
warning, since copies and sibling models often share one tokenizer. Megatron files record no
tokenizer, so they are not checked.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxtrain.data.errors import DataError
from jaxtrain.data.text_inputs import tokenizer_json

# What datatrove writes when it was given no tokenizer name.
UNKNOWN_NAMES = ("", "unknown tokenizer")


def vocabulary(file: Path) -> dict[str, int]:
    """token -> id of a `tokenizer.json`: its model vocabulary plus the added tokens."""
    data = json.loads(Path(file).read_text(encoding="utf-8"))
    vocab = data.get("model", {}).get("vocab") or {}
    ids = (
        dict(vocab) if isinstance(vocab, dict) else {entry[0]: i for i, entry in enumerate(vocab)}
    )  # Unigram: [token, score] pairs
    ids.update({t["content"]: int(t["id"]) for t in data.get("added_tokens", [])})
    return ids


def short_name(name: str | os.PathLike) -> str:
    """A comparable name: the folder of a tokenizer.json, the last part of a path or hub id."""
    path = Path(str(name).rstrip("/"))
    if path.name == "tokenizer.json":
        path = path.parent
    return path.name.lower()


def _difference(ours: dict[str, int], theirs: dict[str, int]) -> str:
    for token in sorted(set(ours) | set(theirs)):
        a, b = ours.get(token), theirs.get(token)
        if a != b:
            return (
                f"e.g. {token!r} is id {a if a is not None else 'absent'} in the shards' "
                f"tokenizer and {b if b is not None else 'absent'} in data.tokenizer"
            )
    return "the vocabularies differ"


def check_tokenizer(shards: Sequence[Any], tokenizer: str) -> None:
    """Raises DataError (both local and different) or warns (names differ) per distinct record."""
    if not tokenizer:
        return
    seen: dict[str, Any] = {}
    for shard in shards:
        name = getattr(shard, "tokenizer_name", "")
        if name.strip().lower() not in UNKNOWN_NAMES:
            seen.setdefault(name, shard)
    configured = tokenizer_json(tokenizer)
    for name, shard in seen.items():
        recorded = tokenizer_json(name)
        if configured is not None and recorded is not None:
            if (
                recorded.resolve() == configured.resolve()
                or recorded.read_bytes() == configured.read_bytes()
            ):
                continue
            ours, theirs = vocabulary(recorded), vocabulary(configured)
            if ours != theirs:
                raise DataError(
                    f"{shard.path}: written with the tokenizer {name!r} ({len(ours)} tokens), but "
                    f"data.tokenizer={tokenizer!r} ({len(theirs)} tokens) has another vocabulary "
                    f"({_difference(ours, theirs)}). Set data.tokenizer to the tokenizer the "
                    f"shards were written with, or tokenize the corpus again with "
                    f"tools/tokenize_corpus.py --tokenizer {tokenizer}."
                )
            continue
        if short_name(name) != short_name(tokenizer):
            warnings.warn(
                f"{shard.path}: written with the tokenizer {name!r}, but data.tokenizer is "
                f"{tokenizer!r}; they cannot be compared here (one is not a local tokenizer.json). "
                "If they differ, the token ids mean other words: set data.tokenizer to the "
                "shards' tokenizer or tokenize again.",
                stacklevel=2,
            )
