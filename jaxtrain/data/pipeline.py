"""The grain input pipeline: shuffled global batches, each process reading only its own rows.

Sources. `data.kind` picks the shard format (datatrove `.ds`, Megatron `.bin/.idx`, or synthetic
tokens); "text" reads raw text tokenized while training (`text_pipeline`). `data.paths` entries
without weights form one token pool (`batches.epoch_stream`:
epochs of whole global batches); with weights each entry is a source of a mixture
(`mixture.mixture_stream`: rows drawn in proportion, each source with its own epochs).
See `sources` for the path, weight, blend and split syntax, `windows` for the windowing and
`documents` for the document-boundary fields.

Datasets. Everything after reading a window is grain's own: `MapDataset.source`, `shuffle`,
`slice`, `repeat`, `select_from_datasets`, `batch` and the process slice, then
`to_iter_dataset` with reader threads (and `mp_prefetch` for `data.worker_count`). The batches and
iterator states are bit for bit those of the hand-written batch sources this replaced. grain's
layers cost some CPU per batch (a Python call per layer and window) and still deliver thousands of
times what a training step consumes; docs/data.md ("Speed") has the figures. grain's
`MapDataset.source` wrapper is the one piece not used: its per-read metrics cost more than the
read (see `batches.SourceDataset`).

State. The iterator is a grain `DatasetIterator` over global batch numbers; `get_state()` is a small
dict ({"next_index": n} without worker processes, as before) and `set_state()` on a freshly built
iterator continues with exactly the same batches, since every row is a pure function of (config,
batch number, process).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import grain
import numpy as np
from ml_collections import ConfigDict

from jaxtrain.config.loader import split_paths
from jaxtrain.data import text_pipeline
from jaxtrain.data.batches import BatchPlan, RowSource, epoch_stream, process_batches
from jaxtrain.data.bucket_files import is_url
from jaxtrain.data.datatrove import find_shards, warn_if_no_eos
from jaxtrain.data.documents import DocumentOptions
from jaxtrain.data.errors import DataError
from jaxtrain.data.grain_options import iterate
from jaxtrain.data.mixture import Interleave, mixture_stream
from jaxtrain.data.sources import has_split_part, load_datasets, parse_sources
from jaxtrain.data.synthetic import SyntheticSource
from jaxtrain.data.text_inputs import eos_id_from_tokenizer
from jaxtrain.data.tokenizer_check import check_tokenizer
from jaxtrain.data.windows import TokenPool, WindowSource
from jaxtrain.errors import ConfigError

__all__ = [
    "BatchPlan",
    "RowSource",
    "Sources",
    "batch_fields",
    "build_sources",
    "data_summary",
    "make_eval_batches",
    "make_train_iterator",
    "window_source",
]


def batch_fields(cfg: ConfigDict) -> dict[str, np.dtype]:
    """{name: dtype} of every array in a batch the iterators of `cfg` yield (each of shape
    [rows, train.seq_len]): what the train step is compiled for before any batch is read."""
    fields = {
        "inputs": np.dtype(np.int32),
        "targets": np.dtype(np.int32),
        "loss_mask": np.dtype(np.float32),
    }
    if cfg.data.kind != "synthetic":  # synthetic windows carry no documents
        documents = DocumentOptions.from_config(cfg.data)
        if documents.reset_attention_mask:
            fields["segment_ids"] = np.dtype(np.int32)
        if documents.reset_position_ids:
            fields["positions"] = np.dtype(np.int32)
    return fields


# Pools up to this many tokens are scanned whole for out-of-vocabulary ids at start-up (about a
# second from page cache); larger ones have each shard's head scanned.
FULL_VOCAB_SCAN_TOKENS = 1 << 28
HEAD_VOCAB_SCAN_TOKENS = 1 << 22
# Shards in a bucket have only this many head tokens scanned (one small ranged read each, the one
# the EOS check makes): a whole-pool scan would download every token file, and each window is
# checked again when it is read.
BUCKET_VOCAB_SCAN_TOKENS = 1 << 16
# Synthetic validation windows come from a different stream than the training ones.
SYNTHETIC_EVAL_SEED_OFFSET = 1_000_003


def _check_vocab(source: WindowSource, vocab_size: int | None) -> WindowSource:
    if vocab_size is not None:
        head = None if len(source.pool) <= FULL_VOCAB_SCAN_TOKENS else HEAD_VOCAB_SCAN_TOKENS
        if any(is_url(str(shard.path)) for shard in source.pool.shards):
            head = BUCKET_VOCAB_SCAN_TOKENS
        source.validate_vocab(vocab_size, head)
    return source


def window_source(
    paths: str | list[str], seq_len: int, vocab_size: int | None = None, eos_id: int | None = None
) -> WindowSource:
    """Windows over every datatrove shard under `paths` (one pool), checked against the vocab."""
    return _check_vocab(
        WindowSource(TokenPool(find_shards(split_paths(paths), eos_id)), seq_len), vocab_size
    )


@dataclasses.dataclass
class Sources:
    """The window sources of training or validation data, and their mixture weights if any."""

    sources: list[WindowSource]
    weights: list[float] | None
    what: str
    names: list[str]


def _eos_id(cfg: ConfigDict) -> int | None:
    return eos_id_from_tokenizer(cfg.data.tokenizer) if cfg.data.tokenizer else None


def build_sources(cfg: ConfigDict, vocab_size: int | None, which: str = "train") -> Sources | None:
    """The sources `which` ("train" or "valid") reads; None when there is no validation data.

    Validation is `data.val_paths` (whole datasets) or else the valid part of `data.split`.
    `cfg` is a validated config (`jaxtrain.run.validate`) of a kind with files: its data.kind and
    data.paths were checked there.
    """
    d = cfg.data
    if which == "train":
        specs, split, part, key = (
            parse_sources(d.paths, d.kind, d.weights),
            d.split,
            "train",
            "data.paths",
        )
    elif split_paths(d.val_paths):
        specs = parse_sources(d.val_paths, d.kind, key="data.val_paths")
        split, part, key = "", "train", "data.val_paths"
    elif has_split_part(d.split, "valid"):
        specs, split, part = parse_sources(d.paths, d.kind, d.weights), d.split, "valid"
        key = f"the valid part of data.split={d.split!r} of data.paths"
    else:
        return None
    datasets = load_datasets(specs, d.kind, split, part)
    shards = [s for ds in datasets for s in ds.shards]
    if d.tokenizer:
        # First: with another tokenizer's shards, a missing-EOS warning would only mislead.
        check_tokenizer(shards, d.tokenizer)
        eos_id = _eos_id(cfg)
        for shard in shards if eos_id is not None else ():
            warn_if_no_eos(shard, eos_id)
    documents = DocumentOptions.from_config(d)
    seq_len, windowing = cfg.train.seq_len, d.windowing
    what = f"{key} ({', '.join(s.path for s in specs)})"
    if specs[0].weight is None:
        pool = TokenPool(
            [s for ds in datasets for s in ds.shards], [r for ds in datasets for r in ds.ranges]
        )
        source = WindowSource(pool, seq_len, windowing, documents)
        return Sources([_check_vocab(source, vocab_size)], None, what, [what])
    sources = [
        _check_vocab(
            WindowSource(TokenPool(ds.shards, ds.ranges), seq_len, windowing, documents), vocab_size
        )
        for ds in datasets
    ]
    return Sources(
        sources, [ds.spec.weight for ds in datasets], what, [ds.spec.path for ds in datasets]
    )


def _plan(
    cfg: ConfigDict, num_windows: int, process_index: int, process_count: int, what: str
) -> BatchPlan:
    """Checks the batch against the data, and returns the plan.

    That the processes split the global batch evenly is a setting checked before any data is
    read (`jaxtrain.run.setup`, for the processes of the run).
    """
    g = cfg.train.global_batch_size
    if process_count <= 0 or not 0 <= process_index < process_count:
        raise ConfigError(
            f"process_index={process_index} must lie in 0..process_count-1 "
            f"(process_count={process_count})."
        )
    if num_windows < g:
        raise DataError(
            f"{what} hold {num_windows} windows of train.seq_len + 1 = "
            f"{cfg.train.seq_len + 1} tokens, fewer than one global batch of "
            f"train.global_batch_size={g}. Add data, or lower the batch or seq_len."
        )
    return BatchPlan(num_windows, g, process_index, process_count)


def _iterator(cfg: ConfigDict, batches: grain.MapDataset, workers: bool) -> grain.DatasetIterator:
    return iterate(batches, cfg.data.prefetch, cfg.data.worker_count if workers else 0)


def make_train_iterator(
    cfg: ConfigDict, vocab_size: int, *, process_index: int = 0, process_count: int = 1
) -> grain.DatasetIterator:
    """The training batch iterator of one process: an endless, checkpointable grain iterator.

    Each element is {"inputs", "targets": int32, "loss_mask": float32} and, when the document
    options ask, "segment_ids" / "positions" int32, all of shape
    [train.global_batch_size // process_count, train.seq_len].
    """
    if cfg.data.kind == "text":
        return text_pipeline.train_iterator(cfg, vocab_size, process_index, process_count)
    if cfg.data.kind == "synthetic":
        source = SyntheticSource(vocab_size, cfg.train.seq_len, seed=cfg.run.seed)
        plan = _plan(cfg, len(source), process_index, process_count, "synthetic data")
        stream = epoch_stream(source, plan, shuffle=False, seed=cfg.run.seed)
        return _iterator(cfg, process_batches(stream, plan), True)
    built = build_sources(cfg, vocab_size, "train")
    if built.weights is None:
        (source,) = built.sources
        plan = _plan(cfg, len(source), process_index, process_count, built.what)
        stream = epoch_stream(source, plan, shuffle=cfg.data.shuffle, seed=cfg.run.seed)
    else:
        # Sources repeat independently, so even a tiny one can fill any number of batches.
        plan = _plan(cfg, sys.maxsize, process_index, process_count, built.what)
        stream = mixture_stream(
            built.sources, built.weights, shuffle=cfg.data.shuffle, seed=cfg.run.seed
        )
    return _iterator(cfg, process_batches(stream, plan), True)


def make_eval_batches(
    cfg: ConfigDict, vocab_size: int, *, process_index: int = 0, process_count: int = 1
) -> Callable[[], grain.DatasetIterator] | None:
    """A function returning a fresh iterator over the same validation batches every call.

    The batches are the first `train.eval_batches` global batches of the validation windows in
    file order (a mixture interleaves its sources' windows in file order), never more than the
    data holds without repeating, sliced among processes like training batches. Synthetic data
    gets a synthetic stream with another seed. None when there is no validation data or
    `train.eval_batches` is 0.
    """
    if cfg.train.eval_batches <= 0:
        return None
    g = cfg.train.global_batch_size
    if cfg.data.kind == "text":
        return text_pipeline.eval_batches(cfg, vocab_size, process_index, process_count)
    if cfg.data.kind == "synthetic":
        source: RowSource = SyntheticSource(
            vocab_size, cfg.train.seq_len, seed=cfg.run.seed + SYNTHETIC_EVAL_SEED_OFFSET
        )
        plan = _plan(cfg, len(source), process_index, process_count, "synthetic data")
        batches = process_batches(
            epoch_stream(source, plan, shuffle=False, seed=0), plan, cfg.train.eval_batches
        )
        return lambda: _iterator(cfg, batches, False)
    built = build_sources(cfg, vocab_size, "valid")
    if built is None:
        return None
    if built.weights is None:
        (source,) = built.sources
        plan = _plan(cfg, len(source), process_index, process_count, built.what)
        num_batches = min(cfg.train.eval_batches, plan.steps_per_epoch)
        stream = epoch_stream(source, plan, shuffle=False, seed=0)
    else:
        plan = _plan(cfg, sys.maxsize, process_index, process_count, built.what)
        rows = Interleave(built.weights).rows_before_wrap([len(s) for s in built.sources])
        num_batches = max(1, min(cfg.train.eval_batches, rows // g))
        stream = mixture_stream(built.sources, built.weights, shuffle=False, seed=0)
    batches = process_batches(stream, plan, num_batches)
    return lambda: _iterator(cfg, batches, False)


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def _describe(source: WindowSource, cfg: ConfigDict, rows_per_step: float) -> str:
    t = cfg.train
    epochs = t.steps * rows_per_step / len(source)
    return (
        f"{len(source.pool.shards)} shards, {_count(len(source.pool))} tokens, "
        f"{_count(len(source))} windows of {t.seq_len + 1}, {epochs:.3g} epochs in "
        f"{t.steps} steps"
    )


def data_summary(cfg: ConfigDict) -> str:
    """One line for the run log: shards, tokens, windows and how many epochs the run covers."""
    t = cfg.train
    if cfg.data.kind == "text":
        return text_pipeline.summary(cfg)
    if cfg.data.kind == "synthetic":
        return (
            f"data: synthetic tokens, {t.global_batch_size} x {t.seq_len} per step, "
            f"{_count(t.steps * t.global_batch_size * t.seq_len)} tokens in {t.steps} steps"
        )
    train = build_sources(cfg, None, "train")
    if train.weights is None:
        (source,) = train.sources
        steps_per_epoch = len(source) // t.global_batch_size
        text = f"data: {_describe(source, cfg, t.global_batch_size)}, {steps_per_epoch} steps/epoch"
    else:
        total = sum(train.weights)
        parts = [
            f"{w / total:.3g} x {name} ({_describe(s, cfg, t.global_batch_size * w / total)})"
            for name, s, w in zip(train.names, train.sources, train.weights)
        ]
        text = "data: mixture of " + "; ".join(parts)
    val = build_sources(cfg, None, "valid")
    if val is not None:
        tokens = sum(len(s.pool) for s in val.sources)
        text += (
            f"; val: {sum(len(s.pool.shards) for s in val.sources)} shards, {_count(tokens)} tokens"
        )
    return text
