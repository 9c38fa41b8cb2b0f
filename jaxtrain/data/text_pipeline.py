"""`data.kind="text"`: the training and validation iterators over raw text, from a config.

`data.paths` entries are raw-text files or folders (`text_files`), read as one stream of
documents (`text_stream`), tokenized with `data.tokenizer` while training. With weights
(`0.7:corpus/,0.3:data/shards` or `data.weights`) each entry is a source of a mixture, and an
entry holding tokenized shards (datatrove `.ds`, Megatron `.bin/.idx`) is read as such
(`text_mixture`). Validation is `data.val_paths`: its first `train.eval_batches` batches in file
order, never past its first epoch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ml_collections import ConfigDict

from jaxtrain.config.loader import split_paths
from jaxtrain.data import bucket_files
from jaxtrain.data.bucket_files import is_url
from jaxtrain.data.documents import DocumentOptions
from jaxtrain.data.errors import DataError
from jaxtrain.data.mixture import SOURCE_SEED_SALT
from jaxtrain.data.sources import SourceSpec, load_datasets, parse_sources
from jaxtrain.data.text_documents import DocumentSource
from jaxtrain.data.text_files import is_tokenized, text_files
from jaxtrain.data.text_inputs import eos_token_of
from jaxtrain.data.text_mixture import MixedBatches
from jaxtrain.data.text_stream import TextBatches, TextWindows, Tokenize, document_stream
from jaxtrain.data.windows import TokenPool, WindowSource
from jaxtrain.errors import ConfigError


def tokenize_step(cfg: ConfigDict, vocab_size: int | None) -> Tokenize:
    """The tokenizer step of `cfg`, loaded once here to check it against the model."""
    d = cfg.data
    eos = d.get("eos_token", "") or eos_token_of(d.tokenizer)
    if not eos:
        raise ConfigError(
            f"data.tokenizer={d.tokenizer!r} declares no eos_token (tokenizer_config.json); set "
            "data.eos_token to the token appended after every document."
        )
    step = Tokenize(str(d.tokenizer), eos)
    _, vocab, _ = step.load()
    if vocab_size is not None and vocab > vocab_size:
        raise ConfigError(
            f"data.tokenizer={d.tokenizer!r} has {vocab} tokens, more than "
            f"model.vocab_size={vocab_size}; use the model's tokenizer or a larger vocabulary."
        )
    return step


def documents_of(entry: str, text_key: str) -> DocumentSource:
    """The documents of one `data.paths` entry."""
    return DocumentSource(text_files(entry), text_key)


def _windows(
    cfg: ConfigDict,
    docs: DocumentSource,
    tokenize: Tokenize,
    group: int,
    what: str,
    *,
    shuffle: bool,
    seed: int,
    one_epoch: bool = False,
    workers: int = 0,
) -> TextWindows:
    open_stream = functools.partial(
        document_stream,
        docs,
        tokenize,
        shuffle=shuffle,
        seed=seed,
        prefetch=int(cfg.data.prefetch),
        workers=workers,
    )
    return TextWindows(open_stream, len(docs), cfg.train.seq_len, group, what, one_epoch=one_epoch)


def _token_source(cfg: ConfigDict, spec: SourceSpec) -> WindowSource:
    if is_url(spec.path):
        is_shards = spec.path.endswith(".ds") or any(
            f.endswith(".ds") for f in bucket_files.find_files(spec.path)
        )
    else:
        is_shards = Path(spec.path).is_dir() or spec.path.endswith(".ds")
    kind = "datatrove" if is_shards else "megatron"
    (ds,) = load_datasets([spec], kind, "", "train")
    pool = TokenPool(ds.shards, ds.ranges)
    return WindowSource(pool, cfg.train.seq_len, "pool", DocumentOptions.from_config(cfg.data))


def train_iterator(
    cfg: ConfigDict, vocab_size: int, process_index: int, process_count: int
) -> TextBatches | MixedBatches:
    """The training batches of one process (see the module doc)."""
    d, g = cfg.data, cfg.train.global_batch_size
    tokenize = tokenize_step(cfg, vocab_size)
    specs = parse_sources(d.paths, "text", d.weights)
    documents = DocumentOptions.from_config(d)
    workers = int(d.worker_count)
    if specs[0].weight is None:
        entries = [s.path for s in specs]
        docs = DocumentSource([f for e in entries for f in text_files(e)], d.text_key)
        what = f"data.paths ({', '.join(entries)})"
        seed = int(cfg.run.seed)
        stream = _windows(
            cfg, docs, tokenize, g, what, shuffle=d.shuffle, seed=seed, workers=workers
        )
        return TextBatches(stream, documents, process_index, process_count)
    sources: list[Any] = []
    for k, spec in enumerate(specs):
        if is_tokenized(spec.path):
            source = _token_source(cfg, spec)
            source.validate_vocab(vocab_size)
            sources.append(source)
            continue
        docs = documents_of(spec.path, d.text_key)
        # Each text source's document order gets its own seed, as each shard source's does.
        seed = int(cfg.run.seed) + k * SOURCE_SEED_SALT
        sources.append(
            _windows(
                cfg, docs, tokenize, 1, spec.path, shuffle=d.shuffle, seed=seed, workers=workers
            )
        )
    return MixedBatches(
        sources,
        [s.weight for s in specs],
        g,
        documents,
        process_index,
        process_count,
        shuffle=bool(d.shuffle),
        seed=int(cfg.run.seed),
    )


def eval_batches(
    cfg: ConfigDict, vocab_size: int, process_index: int, process_count: int
) -> Callable[[], TextBatches] | None:
    """A function returning the same validation batches every call, None without val_paths."""
    d = cfg.data
    entries = [s.path for s in parse_sources(d.val_paths, "text", key="data.val_paths")]
    if not entries or cfg.train.eval_batches <= 0:
        return None
    tokenize = tokenize_step(cfg, vocab_size)
    docs = DocumentSource([f for e in entries for f in text_files(e)], d.text_key)
    what = f"data.val_paths ({', '.join(entries)})"
    documents = DocumentOptions.from_config(d)
    g, limit = cfg.train.global_batch_size, cfg.train.eval_batches

    def fresh() -> TextBatches:
        stream = _windows(cfg, docs, tokenize, g, what, shuffle=False, seed=0, one_epoch=True)
        return TextBatches(stream, documents, process_index, process_count, limit=limit)

    return fresh


def summary(cfg: ConfigDict) -> str:
    """One line for the run log: files and documents; tokens are counted only when read."""
    d = cfg.data
    specs = parse_sources(d.paths, "text", d.weights)
    parts = []
    for spec in specs:
        if is_tokenized(spec.path):
            parts.append(f"{spec.path} (tokenized shards)")
            continue
        files = text_files(spec.path)
        parts.append(f"{spec.path} ({len(files)} files)")
    weights = "" if specs[0].weight is None else " mixed by data.weights"
    text = f"data: raw text tokenized while training, {', '.join(parts)}{weights}"
    if split_paths(d.val_paths):
        text += f"; val: {d.val_paths}"
    if not parts:
        raise DataError("data.paths names no data.")
    return text
