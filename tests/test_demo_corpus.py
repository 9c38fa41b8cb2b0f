"""The offline demo corpus: built from Python's own text, tokenized, readable, built once."""

from __future__ import annotations

import itertools
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.demo_corpus import build_demo_data, is_validation, stdlib_documents
from jaxtrain.data.windows import TokenPool, WindowSource


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A demo build cut to its first 120 documents (the reference topics and a few modules)."""
    return build_demo_data(tmp_path_factory.mktemp("demo") / "data", vocab_size=512,
                           max_documents=120)


def test_small_build(small_demo: dict[str, Any]) -> None:
    from transformers import AutoTokenizer

    m = small_demo
    assert m["train_docs"] + m["val_docs"] == 120 and m["val_docs"] > 0
    assert m["vocab_size"] == 512 and m["train_chars"] > 300_000
    tok = AutoTokenizer.from_pretrained(m["tokenizer"])
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == m["eos_id"]
    for split in ("train", "val"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every shard has EOS tokens
            shards = find_shards([m[split]], eos_id=m["eos_id"])
        assert sum(s.num_tokens for s in shards) == m[f"{split}_tokens"] > 1000
        assert sum(s.num_docs for s in shards) == m[f"{split}_docs"]
        source = WindowSource(TokenPool(shards), 64)
        assert source.validate_vocab(512) < 512
    text = tok.decode(source[0]["inputs"].tolist())
    assert sum(c.isalpha() or c.isspace() for c in text) > 0.7 * len(text)


def test_split_is_disjoint_and_by_name(small_demo: dict[str, Any]) -> None:
    root = Path(small_demo["root"]) / "text"
    ids = {split: [json.loads(line)["id"] for line in open(root / f"{split}.jsonl")]
           for split in ("train", "val")}
    assert not set(ids["train"]) & set(ids["val"])
    assert not any(is_validation(name) for name in ids["train"])
    assert ids["train"][0].startswith("topic:")


def test_build_is_idempotent(small_demo: dict[str, Any], tmp_path: Path) -> None:
    shard = next(Path(small_demo["train"]).glob("*.ds"))
    before = shard.stat().st_mtime_ns
    again = build_demo_data(small_demo["root"], vocab_size=512, max_documents=120)
    assert again == small_demo and shard.stat().st_mtime_ns == before
    # A build that stopped before writing its manifest is redone, to the same result.
    copy = tmp_path / "copy"
    shutil.copytree(small_demo["root"], copy)
    (copy / "manifest.json").unlink()
    (copy / "val" / shard.name).write_bytes(b"")
    redone = build_demo_data(copy, vocab_size=512, max_documents=120)
    assert redone["train_tokens"] == small_demo["train_tokens"]
    assert redone["val_tokens"] == small_demo["val_tokens"]
    assert (copy / "train" / shard.name).read_bytes() == shard.read_bytes()


def test_stdlib_is_parsed_not_imported() -> None:
    sys.modules.pop("antigravity", None)  # importing it would open a web browser
    names = [name for name, _ in itertools.islice(stdlib_documents(), 80)]
    assert "module:antigravity" in names or any(n > "module:antigravity" for n in names)
    assert "antigravity" not in sys.modules
    assert all(n.startswith(("module:", "comments:")) for n in names)


@pytest.mark.slow  # the whole corpus: ~25 s on two cores
def test_full_build(tmp_path: Path) -> None:
    m = build_demo_data(tmp_path / "full")
    assert m["train_chars"] > 3_000_000 and m["vocab_size"] == 4096
    assert m["train_tokens"] > 800_000 and m["val_tokens"] > 20_000
    assert m["seconds"] < 60
