"""MaxText's data keys -> jaxtrain: synthetic data, or local raw text read by `data.kind="text"`.

- `dataset_type: grain`: `grain_train_files` / `grain_eval_files` are file patterns (globs),
  several as `pattern,weight;pattern,weight` (MaxText's mixture syntax); `grain_file_type`
  `arrayrecord` (records: tf.train.Example, JSON or UTF-8 text) or `parquet`.
- `dataset_type: hf` from local files: `hf_path` a local folder of files, or a file-format
  builder (`json`, `parquet`, `arrow`...) with `hf_train_files` / `hf_data_files` local globs
  (`hf_eval_files` for validation). Datasets on the Hugging Face Hub are refused by name.
- `dataset_type: tfds` (MaxText's default) and `c4_mlperf` are refused: TFDS needs TensorFlow.
- `train_data_columns` (one column) -> `data.text_key`; `tokenizer_path` a local Hugging Face
  tokenizer folder -> `data.tokenizer`; `add_eos` true is jaxtrain's EOS after every document,
  `add_bos` true has no counterpart (documents get no BOS); `packing` true (MaxText's packed
  sequences with per-document segment ids and positions) -> `data.reset_attention_mask` and
  `data.reset_position_ids`; `grain_worker_count` -> `data.worker_count`;
  `enable_data_shuffling` -> `data.shuffle`.
"""

from __future__ import annotations

import glob
import os
from typing import Any

from jaxtrain.compat.common import known
from jaxtrain.compat.common.report import KeyReport, is_off

HF_BUILDERS = ("json", "parquet", "arrow", "text", "csv")


def _expand(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]


def _paths(r: KeyReport, key: str) -> str | None:
    """`data.paths` syntax for a MaxText file pattern value; None (reported) if it cannot be."""
    value = str(r.get(key) or "").strip()
    parts = [p.strip() for p in value.split(";") if p.strip()]
    weighted = [p.rpartition(",") for p in parts]
    if len(parts) > 1 or (parts and weighted[0][1] and _is_number(weighted[0][2])):
        entries = []
        for pattern, _, weight in weighted:
            files = _expand(pattern)
            if not _is_number(weight) or len(files) != 1:
                r.unsupported(
                    key,
                    f"mixture entry {pattern!r}: give each weighted entry as one file or folder "
                    "(data.paths '0.7:a,0.3:b')",
                    target="data.paths",
                )
                return None
            entries.append(f"{weight}:{files[0]}")
        return ",".join(entries)
    files = [f for p in parts for f in _expand(p)]
    if parts and not files:
        r.unsupported(key, f"{value!r} matches no local file", target="data.paths")
        return None
    return ",".join(files)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _grain(r: KeyReport, s: dict[str, Any]) -> bool:
    kind = str(r.get("grain_file_type", "arrayrecord")).lower()
    if kind not in ("arrayrecord", "parquet"):
        r.unsupported("grain_file_type", f"{kind!r} files are not read; arrayrecord or parquet")
        return False
    if r.has("grain_file_type"):
        r.mapped("grain_file_type", "data.paths", "read by file name (.array_record, .parquet)")
    train = _paths(r, "grain_train_files")
    if train is None:
        return False
    if not train:
        r.unsupported("dataset_type", "grain without grain_train_files", target="data.paths")
        return False
    s["data.paths"] = train
    r.mapped("grain_train_files", "data.paths", "patterns expanded to the files they match")
    if r.get("grain_eval_files"):
        val = _paths(r, "grain_eval_files")
        if val:
            s["data.val_paths"] = val
            r.mapped("grain_eval_files", "data.val_paths")
    if r.has("grain_worker_count"):
        s["data.worker_count"] = max(0, int(r.get("grain_worker_count")))
        r.mapped("grain_worker_count", "data.worker_count")
    return True


def _hf(r: KeyReport, s: dict[str, Any]) -> bool:
    path = str(r.get("hf_path") or "")
    files_key = next((k for k in ("hf_train_files", "hf_data_files") if r.get(k)), "")
    if os.path.isdir(path) and not files_key:
        s["data.paths"] = path
        r.mapped("hf_path", "data.paths", "a local folder of JSONL/Parquet files")
        return True
    if path not in HF_BUILDERS or not files_key:
        r.unsupported(
            "hf_path",
            f"{path!r}: datasets are not downloaded from the Hugging Face Hub; download the "
            "files and give them as hf_train_files (with hf_path: json or parquet) or "
            "--config.data.paths",
            target="data.paths",
        )
        return False
    train = _paths(r, files_key)
    if not train:
        return False
    s["data.paths"] = train
    r.mapped("hf_path", "data.kind", f"{path}: the files of {files_key}")
    r.mapped(files_key, "data.paths", "patterns expanded to the files they match")
    if r.get("hf_eval_files"):
        val = _paths(r, "hf_eval_files")
        if val:
            s["data.val_paths"] = val
            r.mapped("hf_eval_files", "data.val_paths")
    for key in ("hf_name", "hf_data_dir", "hf_access_token"):
        if r.has(key) and not r.handled(key):
            r.ignored(key, "local files: no Hub dataset configuration")
    return True


def _text_options(r: KeyReport, s: dict[str, Any]) -> None:
    columns = r.get("train_data_columns")
    columns = [columns] if isinstance(columns, str) else list(columns or ["text"])
    if len(columns) == 1:
        s["data.text_key"] = str(columns[0])
        if r.has("train_data_columns"):
            r.mapped("train_data_columns", "data.text_key")
    else:
        r.unsupported("train_data_columns", "one text column is read", target="data.text_key")
    folder = known.local_tokenizer_folder(r.get("tokenizer_path"))
    if folder:
        s["data.tokenizer"] = folder
        r.mapped("tokenizer_path", "data.tokenizer", "tokenizes the text while training")
    else:
        r.unsupported(
            "tokenizer_path",
            f"{r.get('tokenizer_path')!r} is not a local Hugging Face tokenizer folder, which "
            "raw text is tokenized with",
            target="data.tokenizer",
        )
    if is_off(r.get("add_eos", True)):
        r.unsupported("add_eos", "false: jaxtrain appends an EOS after every document")
    else:
        r.mapped("add_eos", "data.eos_token", "the tokenizer's EOS after every document")
    if is_off(r.get("add_bos", True)):
        r.mapped("add_bos", "(no BOS)", "false: documents start without a BOS, as in jaxtrain")
    else:
        r.unsupported(
            "add_bos",
            "true: jaxtrain puts no BOS token before documents; set add_bos: false",
        )
    if is_off(r.get("packing", True)):
        r.unsupported("packing", "false: jaxtrain packs documents into every window")
    else:
        s["data.reset_attention_mask"] = s["data.reset_position_ids"] = True
        r.mapped(
            "packing",
            "data.reset_attention_mask, data.reset_position_ids",
            "documents packed with per-document segment ids and positions; jaxtrain cuts a "
            "document at a window's end where MaxText moves it to the next sequence",
        )
    if r.has("enable_data_shuffling"):
        s["data.shuffle"] = bool(r.get("enable_data_shuffling"))
        r.mapped("enable_data_shuffling", "data.shuffle", "documents shuffled with run.seed")


def map_data(r: KeyReport, s: dict[str, Any]) -> None:
    """`dataset_type` and the keys of its pipeline; see the module doc."""
    kind = r.get("dataset_type")
    if kind == "synthetic":
        s["data.kind"] = "synthetic"
        r.mapped("dataset_type", "data.kind")
        return
    if kind in ("grain", "hf"):
        if (_grain if kind == "grain" else _hf)(r, s):
            s["data.kind"] = "text"
            r.mapped("dataset_type", "data.kind", f"{kind} over local files: raw text")
            _text_options(r, s)
        return
    why = (
        "TFDS pipelines are not read (they need TensorFlow); write the data as ArrayRecord "
        "or JSONL and use dataset_type: grain"
        if kind == "tfds"
        else "this input pipeline is not read; use dataset_type: grain over local files"
    )
    r.unsupported("dataset_type", f"{kind!r}: {why}", target="data.paths")
