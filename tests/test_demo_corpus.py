"""The offline demo corpus: built from Python's own text, tokenized, readable, built once."""

from __future__ import annotations

import functools
import itertools
import json
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from jaxtrain import run
from jaxtrain.config.loader import load_config
from jaxtrain.data import pipeline, prepare
from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.demo_corpus import OWNER_MARK, build_demo_data, is_validation, stdlib_documents
from jaxtrain.data.errors import DataError
from jaxtrain.data.prepare import prepare_data
from jaxtrain.data.windows import TokenPool, WindowSource


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A demo build cut to its first 120 documents (the reference topics and a few modules)."""
    return build_demo_data(
        tmp_path_factory.mktemp("demo") / "data", vocab_size=512, max_documents=120
    )


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
    assert sum(c.isalpha() or c.isspace() for c in text) > 0.8 * len(text)


def test_documents_are_prose(small_demo: dict[str, Any]) -> None:
    """Sentences, one paragraph a line: no doctests, indented examples or signatures."""
    root = Path(small_demo["root"]) / "text"
    texts = [
        json.loads(line)["text"]
        for split in ("train", "val")
        for line in open(root / f"{split}.jsonl")
    ]
    lines = [line for text in texts for line in text.split("\n\n")]
    assert len(lines) > 1000 and all(line and "\n" not in line for line in lines)
    assert not [line for line in lines if line.startswith((">>>", " ", "def ", "class "))]
    assert sum(line.endswith((".", ":")) for line in lines) > 0.95 * len(lines)


def test_split_is_disjoint_and_by_name(small_demo: dict[str, Any]) -> None:
    root = Path(small_demo["root"]) / "text"
    ids = {
        split: [json.loads(line)["id"] for line in open(root / f"{split}.jsonl")]
        for split in ("train", "val")
    }
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


def _user_folders(root: Path) -> dict[Path, bytes]:
    files = {
        root / "train" / "notes.txt": b"my notes",
        root / "val" / "notes.txt": b"more",
        root / "text" / "draft.md": b"# draft",
    }
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return files


def test_prepare_refuses_folders_it_did_not_write(tmp_path: Path) -> None:
    files = _user_folders(tmp_path)
    cfg = load_config(
        str(REPO / "configs" / "demo.py"),
        {
            "data.paths": str(tmp_path / "train"),
            "data.val_paths": str(tmp_path / "val"),
            "data.tokenizer": str(tmp_path / "tokenizer"),
            "train.steps": 1,
        },
    )
    named = ", ".join(str(tmp_path / sub) for sub in ("text", "train", "val"))
    with pytest.raises(
        DataError,
        match=rf"^{re.escape(named)}: not written by the demo data "
        "build .* nothing was changed",
    ):
        prepare_data(cfg)
    assert all(path.read_bytes() == content for path, content in files.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text", "train", "val"]
    # A manifest.json that is not the build's is not overwritten either.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="manifest.json: not written by the demo data build"):
        build_demo_data(tmp_path / "other", vocab_size=512, max_documents=4)
    assert (tmp_path / "other" / "manifest.json").read_text() == "{not json"


def test_prepare_writes_the_tokenizer_where_data_tokenizer_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo config with its shards moved elsewhere: the tokenizer still goes where
    data.tokenizer says, the shards record it, and the run reads them without a warning."""
    monkeypatch.setattr(
        prepare, "build_demo_data", functools.partial(build_demo_data, max_documents=120)
    )
    monkeypatch.chdir(tmp_path)
    cfg = load_config(
        str(REPO / "configs" / "demo.py"),
        {
            "data.paths": str(tmp_path / "mine" / "train"),
            "data.val_paths": str(tmp_path / "mine" / "val"),
            "model.vocab_size": 512,
        },
    )
    assert cfg.data.tokenizer == "data/demo/tokenizer"
    prepare_data(cfg)
    assert (tmp_path / "data" / "demo" / "tokenizer" / "tokenizer.json").is_file()
    assert not (tmp_path / "mine" / "tokenizer").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "cannot be compared", no missing EOS
        run.validate(cfg)
        pipeline.make_train_iterator(cfg, 512)
    manifest = json.loads((tmp_path / "mine" / "manifest.json").read_text())
    assert manifest["tokenizer"] == str(tmp_path / "data" / "demo" / "tokenizer")
    before = (tmp_path / "mine" / "train").stat().st_mtime_ns
    prepare_data(cfg)  # complete: nothing is built again
    assert (tmp_path / "mine" / "train").stat().st_mtime_ns == before
    # Another build into the same tokenizer folder changes it: this one is then rebuilt.
    (tmp_path / "data" / "demo" / "tokenizer" / "tokenizer.json").write_text("{}")
    assert (
        build_demo_data(
            tmp_path / "mine", 512, max_documents=120, tokenizer_dir="data/demo/tokenizer"
        )["tokenizer_sha256"]
        == (manifest["tokenizer_sha256"])
    )
    # A tokenizer folder the build did not write is never replaced.
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "tokenizer.json").write_text("{}")
    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path / 'theirs'))}: not written"):
        build_demo_data(
            tmp_path / "mine", 512, max_documents=120, tokenizer_dir=tmp_path / "theirs"
        )
    assert (tmp_path / "theirs" / "tokenizer.json").read_text() == "{}"


def test_rebuild_replaces_only_its_own_folders(small_demo: dict[str, Any], tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(small_demo["root"], copy)
    assert all((copy / sub / OWNER_MARK).is_file() for sub in ("tokenizer", "text", "train", "val"))
    (copy / "notes.txt").write_text("beside the demo folders")
    (copy / "val" / OWNER_MARK).unlink()  # as if a user's folder stood there
    (copy / "manifest.json").unlink()
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    with pytest.raises(DataError, match=rf"^{re.escape(str(copy / 'val'))}: not written"):
        build_demo_data(copy, vocab_size=512, max_documents=120)
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before
    (copy / "val" / OWNER_MARK).write_text("")
    rebuilt = build_demo_data(copy, vocab_size=512, max_documents=120)
    assert rebuilt["val_tokens"] == small_demo["val_tokens"]
    assert (copy / "notes.txt").read_text() == "beside the demo folders"


def test_stdlib_is_parsed_not_imported() -> None:
    sys.modules.pop("antigravity", None)  # importing it would open a web browser
    names = [name for name, _ in itertools.islice(stdlib_documents(), 80)]
    assert "module:antigravity" in names or any(n > "module:antigravity" for n in names)
    assert "antigravity" not in sys.modules
    assert all(n.startswith(("module:", "comments:")) for n in names)


@pytest.mark.slow  # the whole corpus: ~25 s on two cores
def test_full_build(tmp_path: Path) -> None:
    m = build_demo_data(tmp_path / "full")
    assert m["train_chars"] > 1_800_000 and m["vocab_size"] == 4096
    assert m["train_tokens"] > 450_000 and m["val_tokens"] > 20_000
    assert m["seconds"] < 60
