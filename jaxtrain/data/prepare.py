"""Data that a config can build for itself before training (`data.prepare`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ml_collections import ConfigDict

from jaxtrain.config.loader import split_paths
from jaxtrain.data.demo_corpus import build_demo_data
from jaxtrain.errors import ConfigError

PREPARERS = ("", "demo")


def prepare_data(cfg: ConfigDict, progress: Callable[[str], None] | None = None) -> None:
    """Builds the shards `data.prepare` names when they are missing; a no-op otherwise.

    `progress` receives one line per stage of a build (nothing when the data is already there).
    """
    kind = cfg.data.prepare
    if kind not in PREPARERS:
        raise ConfigError(f"data.prepare={kind!r} is not one of {PREPARERS}.")
    if not kind:
        return
    paths = split_paths(cfg.data.paths)
    if not paths:
        raise ConfigError(
            'data.prepare="demo" needs data.paths (e.g. data/demo/train): the '
            "corpus is written into its parent folder."
        )
    root = Path(paths[0]).parent
    # The tokenizer goes where data.tokenizer says, which the run then reads and checks the
    # shards against; without one, beside the shards (<root>/tokenizer).
    build_demo_data(
        root,
        vocab_size=cfg.model.vocab_size,
        seed=cfg.run.seed,
        progress=progress,
        tokenizer_dir=cfg.data.tokenizer or None,
    )
