"""The checks of `data.kind="text"` settings made before anything is read."""

from __future__ import annotations

from typing import Any

from jaxtrain.config.loader import split_paths
from jaxtrain.data.text_files import is_tokenized
from jaxtrain.errors import ConfigError


def check_text_config(cfg: Any) -> None:
    """The checks of `data.kind="text"` made before anything is read; ConfigError with the fix."""
    d = cfg.data
    if not d.get("tokenizer"):
        raise ConfigError(
            "data.kind='text' tokenizes while training and needs data.tokenizer: a Hugging Face "
            "tokenizer folder (or its tokenizer.json)."
        )
    if d.get("split", ""):
        raise ConfigError(
            f"data.split={d.split!r} is not applied to raw text (data.kind='text'); give the "
            "validation files as data.val_paths."
        )
    if d.get("windowing", "pool") != "pool":
        raise ConfigError(
            f"data.windowing={d.windowing!r}: raw text is cut as one pool "
            "(data.windowing='pool'); tokenize first (tools/tokenize_corpus.py) for per_file."
        )
    if any(is_tokenized(p) for p in split_paths(d.val_paths)):
        raise ConfigError(
            f"data.val_paths={d.val_paths!r} holds tokenized shards; with data.kind='text' "
            "validation reads raw-text files."
        )
