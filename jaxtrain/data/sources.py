"""Which tokens a run reads: `data.paths` entries, their weights, and Megatron's `data.split`.

Syntax of `data.paths` / `data.val_paths` (both kinds):
- `a,b,c`: comma-separated folders or files, read as ONE token pool (no weights).
- `0.7:a,0.3:b`: a weighted mixture; each entry is `<weight>:<path>`. Weights need not sum to 1.
- `data.weights = "0.7,0.3"`: the same weights given apart, one per entry, in order.
- Megatron's blend (data.kind="megatron" only): `"0.7 prefix_a 0.3 prefix_b"`, weight then prefix,
  space-separated, exactly as Primus/Megatron's `data_path`/`train_data_path` take it.

`data.split = "99,1,0"` carves every dataset (one entry) into train/valid/test by document ranges,
as Megatron's `BlendedMegatronDatasetBuilder` does: the numbers are normalised to fractions, and
documents [round(lo * n), round(hi * n)) of the dataset's n documents form each part (for Megatron
files the documents are the .idx sequences). The valid part is the validation data when
`data.val_paths` is empty; the test part is never read. An empty split means all documents train.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxtrain.config.loader import split_paths
from jaxtrain.data.datatrove import find_shards, warn_if_no_eos
from jaxtrain.data.errors import DataError
from jaxtrain.data.megatron import megatron_files
from jaxtrain.data.text_config import check_text_config
from jaxtrain.data.tokenizer_check import check_tokenizer_folder
from jaxtrain.errors import ConfigError
from jaxtrain.rundir.object_store import is_url

SPLIT_PARTS = ("train", "valid", "test")


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """One `data.paths` entry: a path (folder, file or Megatron prefix) and its weight, if any."""

    path: str
    weight: float | None = None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _check_weight(weight: float, entry: str, key: str) -> float:
    if not math.isfinite(weight) or weight <= 0:
        raise ConfigError(f"{key}: weight {weight} of {entry!r} must be a positive number.")
    return weight


def parse_sources(
    paths: str | Sequence[str],
    kind: str,
    weights: str | Sequence[float] = "",
    key: str = "data.paths",
) -> list[SourceSpec]:
    """The entries of `data.paths` (or `data.val_paths`) with their weights; see the module doc."""
    entries = split_paths(paths)
    specs: list[SourceSpec] = []
    for entry in entries:
        words = entry.split()
        if kind == "megatron" and len(words) > 1 and all(_float(w) is None for w in words):
            specs += [SourceSpec(w) for w in words]  # Megatron's unweighted list of prefixes
            continue
        if kind == "megatron" and len(words) > 1:
            if len(words) % 2 or any(_float(w) is None for w in words[::2]):
                raise ConfigError(
                    f"{key}={entry!r}: a Megatron blend alternates weights and "
                    "prefixes, e.g. '0.7 data/a_text_document 0.3 "
                    "data/b_text_document'."
                )
            specs += [
                SourceSpec(p, _check_weight(float(w), p, key))
                for w, p in zip(words[::2], words[1::2])
            ]
            continue
        head, sep, tail = entry.partition(":")
        weight = _float(head) if sep and tail else None
        specs.append(
            SourceSpec(tail, _check_weight(weight, tail, key))
            if weight is not None
            else SourceSpec(entry)
        )
    extra = split_paths(weights) if isinstance(weights, str) else [str(w) for w in weights]
    if extra:
        if any(s.weight is not None for s in specs):
            raise ConfigError(
                f"data.weights={weights!r} and weights inside {key} are both set; "
                "give the weights one way."
            )
        if len(extra) != len(specs) or any(_float(w) is None for w in extra):
            raise ConfigError(
                f"data.weights={weights!r} must hold one number per {key} entry "
                f"({len(specs)}: {', '.join(s.path for s in specs)})."
            )
        specs = [
            SourceSpec(s.path, _check_weight(float(w), s.path, "data.weights"))
            for s, w in zip(specs, extra)
        ]
    weighted = {s.weight is not None for s in specs}
    if len(weighted) > 1:
        raise ConfigError(
            f"{key}: either every entry has a weight or none does (a mixture or "
            f"one pool); got {', '.join(repr(e) for e in entries)}."
        )
    return specs


def parse_split(text: str) -> list[tuple[float, float] | None]:
    """Megatron's split string ("99,1,0", "969, 30, 1", "98/2") as [lo, hi) fractions per part.

    A part of weight 0 is None. "" means everything trains: [(0, 1), None, None].
    """
    if not text.strip():
        return [(0.0, 1.0), None, None]
    # The sign is read too: "-5,1,0" is refused, not taken as 5.
    numbers = [float(x) for x in re.findall(r"-?[.0-9]+", text)]
    if not numbers or len(numbers) > 3 or sum(numbers) <= 0 or min(numbers) < 0:
        raise ConfigError(
            f"data.split={text!r}: expected up to three non-negative numbers "
            "train,valid,test such as '99,1,0'."
        )
    numbers += [0.0] * (3 - len(numbers))
    total = sum(numbers)
    bounds, lo = [], 0.0
    for x in numbers:
        hi = lo + x / total
        bounds.append(None if x == 0 else (lo, hi))
        lo = hi
    return bounds


def has_split_part(text: str, part: str) -> bool:
    """Whether `data.split` gives `part` ("valid", ...) any documents."""
    return parse_split(text)[SPLIT_PARTS.index(part)] is not None


@dataclasses.dataclass
class Dataset:
    """One entry's shards, restricted to a document range: the pieces of a token pool."""

    spec: SourceSpec
    shards: list[Any]
    ranges: list[tuple[int, int]]

    @property
    def num_tokens(self) -> int:
        """Tokens in the dataset's pieces."""
        return sum(b - a for a, b in self.ranges)


def document_range(shards: Sequence[Any], bounds: tuple[float, float]) -> Dataset:
    """Documents [round(lo * n), round(hi * n)) of the shards' n documents, as token ranges."""
    total = sum(s.num_docs for s in shards)
    beg, end = int(round(bounds[0] * total)), int(round(bounds[1] * total))
    kept, ranges, first = [], [], 0
    for shard in shards:
        a, b = max(beg - first, 0), min(end - first, shard.num_docs)
        first += shard.num_docs
        if a >= b:
            continue
        ends = shard.doc_ends
        lo = int(ends[a - 1]) if a else 0
        hi = int(ends[b - 1])
        if hi > lo:
            kept.append(shard)
            ranges.append((lo, hi))
    return Dataset(SourceSpec(""), kept, ranges)


def open_dataset(path: str, kind: str, eos_id: int | None = None) -> list[Any]:
    """The non-empty shards (datatrove) or files (Megatron) one entry names, in order."""
    if kind == "datatrove":
        return find_shards([path], eos_id)
    if kind == "megatron":
        files = [f for f in megatron_files(path) if f.num_tokens > 0]
        if not files:
            raise DataError(
                f"{path}: every Megatron dataset there is empty (0 tokens); check "
                "the preprocessing input and run it again."
            )
        if eos_id is not None:
            for f in files:
                warn_if_no_eos(f, eos_id)
        return files
    raise ConfigError(f"data.kind={kind!r} has no shard files to open.")


def load_datasets(
    specs: Sequence[SourceSpec], kind: str, split: str, part: str, eos_id: int | None = None
) -> list[Dataset]:
    """Each entry's document range for `part` of `split` ("" split: whole datasets).

    Entries whose part holds no document are dropped; DataError when none is left, or when a
    weighted entry (a mixture source) would be empty.
    """
    bounds = parse_split(split)[SPLIT_PARTS.index(part)]
    if bounds is None:
        raise DataError(f"data.split={split!r} gives the {part} part no documents.")
    datasets = []
    for spec in specs:
        shards = open_dataset(spec.path, kind, eos_id)
        ds = document_range(shards, bounds)
        ds.spec = spec
        if not ds.shards:
            if spec.weight is not None:
                raise DataError(
                    f"{spec.path}: its {part} part of data.split={split!r} holds no "
                    f"document ({sum(s.num_docs for s in shards)} documents in "
                    "all); give it more data or change the split."
                )
            continue
        datasets.append(ds)
    if not datasets:
        raise DataError(
            f"the {part} part of data.split={split!r} holds no document in "
            f"{', '.join(s.path for s in specs)}; change data.split or add data."
        )
    return datasets


def _exists(path: str, kind: str) -> bool:
    if is_url(path):
        return True  # checked when the shards are listed, with the store's own reason
    p = Path(path)
    if kind == "megatron" and p.suffix not in (".bin", ".idx"):
        return (
            p.is_dir()
            or p.with_name(p.name + ".idx").is_file()
            or p.with_name(p.name + ".bin").is_file()
        )
    return p.exists()


def validate_data_config(cfg: Any, check_data: bool = True) -> None:
    """The `data` checks of `config.validate`; ConfigError naming the key and the fix.

    Syntax (windowing, split, weights) is always checked; `check_data` also checks that every
    path exists (data.tokenizer's too, when the run reads it) and that periodic validation has
    data to read.
    """
    d, t = cfg.data, cfg.train
    windowing = d.get("windowing", "pool")
    if windowing not in ("pool", "per_file"):
        raise ConfigError(f"data.windowing={windowing!r} is not one of ('pool', 'per_file').")
    split = d.get("split", "")
    parse_split(split)
    # The run reads data.tokenizer to check shards against it and to sample after training.
    sample = cfg.get("sample")
    if check_data and (d.kind != "synthetic" or (sample is not None and sample.get("prompt"))):
        check_tokenizer_folder(d.get("tokenizer", ""))
    if d.kind == "synthetic":
        return
    if d.kind == "text":
        check_text_config(cfg)
    train = parse_sources(d.paths, d.kind, d.get("weights", ""))
    val = parse_sources(d.val_paths, d.kind, key="data.val_paths")
    if not check_data:
        return
    if not train:
        raise ConfigError(
            f"data.kind={d.kind!r} needs data.paths: the shard folders (or "
            "Megatron prefixes) to train on, comma-separated, e.g. "
            "--config.data.paths=data/train."
        )
    for spec in train + val:
        if not _exists(spec.path, d.kind):
            raise ConfigError(
                f"data path {spec.path!r} (data.paths / data.val_paths) does not "
                "exist; tokenize a corpus first (tools/tokenize_corpus.py) or fix the "
                "path."
            )
    if t.eval_every and not val and not has_split_part(split, "valid"):
        raise ConfigError(
            f"train.eval_every={t.eval_every} but there is no validation data: "
            "set data.val_paths, give data.split a valid part (e.g. '99,1,0') or "
            "set train.eval_every=0."
        )
