"""Were the shards written with the tokenizer the config names? (`.ds.metadata` vs data.tokenizer)

datatrove records the tokenizer's name or path in each shard's metadata. When both that record and
`data.tokenizer` are tokenizer files on this machine, their vocabularies are compared and a
difference is an error: the token ids would mean other words. When either side is only a name (a
hub id, or a path from the machine that tokenized), the names are compared and a difference is a
warning, since copies and sibling models often share one tokenizer. Megatron files record no
tokenizer, so they are not checked.

Before any of that, `check_tokenizer_folder` refuses a `data.tokenizer` that names a local folder
which does not exist or holds no tokenizer files: the run would train and only sampling or an
export would find out.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxtrain.data.errors import DataError
from jaxtrain.data.text_inputs import tokenizer_json
from jaxtrain.errors import ConfigError

# What datatrove writes when it was given no tokenizer name.
UNKNOWN_NAMES = ("", "unknown tokenizer")


# Any one of these makes a folder loadable by transformers' AutoTokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# A Hugging Face hub id: `name` or `org/name`.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def _hub_id(name: str) -> bool:
    """Whether `name`, which is not a path here, reads as a hub id (`gpt2`, `org/name`) rather
    than a local path: no `/`, `./` or `~` in front, one slash at most, and no folder here named
    like its organisation (`data/tokenizer` is a path when `data/` exists)."""
    if not _HUB_ID.fullmatch(name):
        return False
    org, slash, _ = name.partition("/")
    return not (slash and Path(org).is_dir())


def check_tokenizer_folder(tokenizer: str, key: str = "data.tokenizer", fix: str = "") -> None:
    """ConfigError naming `key` when `tokenizer` is a local path that does not exist, or a
    folder without tokenizer files; "" (no tokenizer) and hub ids pass. `fix` ends the message
    (by default: what to set data.tokenizer to)."""
    if not tokenizer:
        return
    path = Path(tokenizer).expanduser()
    fix = fix or (
        "Point data.tokenizer at the tokenizer folder the shards were written with (one holding "
        'tokenizer.json), or set data.tokenizer="" to train without one (no sample, no '
        "tokenizer in exports)."
    )
    if path.is_dir():
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise ConfigError(
                f"{key}={tokenizer!r}: {path.absolute()} holds no tokenizer files "
                f"({', '.join(TOKENIZER_FILES)}). {fix}"
            )
    elif path.is_file():
        if tokenizer_json(path) is None:
            raise ConfigError(f"{key}={tokenizer!r} is a file, not a tokenizer folder. {fix}")
    elif not _hub_id(tokenizer):
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise ConfigError(f"{key}={tokenizer!r} does not exist{where}. {fix}")


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
