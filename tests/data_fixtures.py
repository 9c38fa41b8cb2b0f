"""Test data for the data layer: a tiny trained tokenizer, shards written by datatrove itself, and
an independent byte-level writer/reader of the shard format (FORMATS.md) to check ours against."""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

EOS = "<|endoftext|>"
_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing "
    "matches under pale moonlight and every parser reads tokens from memory mapped files"
)


def corpus_texts(n: int, seed: int = 0) -> list[str]:
    """n deterministic pseudo-sentences of varying length."""
    rng = np.random.default_rng(seed)
    words = _WORDS.split()
    return [
        " ".join(rng.choice(words, size=int(rng.integers(4, 30)))) + f". Doc {i}." for i in range(n)
    ]


def train_tiny_tokenizer(folder: Path, vocab_size: int = 400) -> Path:
    """A byte-level BPE trained on corpus_texts, saved as a transformers tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus_texts(500), trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS).save_pretrained(folder)
    return folder


def write_wordlevel_tokenizer(folder: Path, vocab_size: int) -> Path:
    """A word-level tokenizer of `vocab_size` entries (w0, w1, ...), EOS last: big vocabs fast."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(vocab_size - 2)}
    vocab["[UNK]"], vocab[EOS] = vocab_size - 2, vocab_size - 1
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([EOS])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    return folder


def write_raw_shard(
    folder: Path,
    name: str,
    docs: Sequence[Sequence[int]],
    width: int = 2,
    tokenizer: str = "test-tokenizer",
    loss: Sequence[int] | None = None,
) -> Path:
    """Writes X.ds / .index / .metadata (and .loss) byte by byte as FORMATS.md describes."""
    folder.mkdir(parents=True, exist_ok=True)
    fmt = {2: "H", 4: "I"}[width]
    tokens = [t for d in docs for t in d]
    ends = np.cumsum([len(d) for d in docs]).tolist()
    ds = folder / name
    ds.write_bytes(struct.pack(f"<{len(tokens)}{fmt}", *tokens))
    (folder / f"{name}.index").write_bytes(struct.pack(f"<{len(ends)}Q", *ends))
    (folder / f"{name}.metadata").write_text(f"{tokenizer}|{width}\n{len(tokens)}\n{len(tokens)} T")
    if loss is not None:
        (folder / f"{name}.loss").write_bytes(bytes(loss))
    return ds


def raw_tokens(ds: Path) -> np.ndarray:
    """A shard's tokens read with np.fromfile, the width taken from its metadata."""
    width = int(ds.with_name(ds.name + ".metadata").read_text().split("\n")[0].rpartition("|")[2])
    return np.fromfile(ds, {2: "<u2", 4: "<u4"}[width]).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class DatatroveCorpus:
    """Shards written by datatrove's DocumentTokenizer from two JSONL files with three tasks."""

    folder: Path
    tokenizer: Path
    eos_id: int
    texts: list[str]


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer folder (vocab 400, EOS <|endoftext|>) trained for the tests."""
    return train_tiny_tokenizer(tmp_path_factory.mktemp("tiny_tokenizer"))


@pytest.fixture(scope="session")
def datatrove_corpus(
    tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer: Path
) -> DatatroveCorpus:
    """datatrove itself tokenizes 400 documents; task 2 of 3 gets no file: an empty shard."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    root = tmp_path_factory.mktemp("datatrove_corpus")
    texts = corpus_texts(400, seed=1)
    (root / "jsonl").mkdir()
    for part, chunk in enumerate((texts[:250], texts[250:])):
        with open(root / "jsonl" / f"part{part}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in chunk)
    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(root / "jsonl")),
            DocumentTokenizer(
                str(root / "shards"),
                tokenizer_name_or_path=str(tiny_tokenizer / "tokenizer.json"),
                eos_token=EOS,
                seed=3,
            ),
        ],
        tasks=3,
        workers=1,
        logging_dir=str(root / "logs"),
    ).run()
    from tokenizers import Tokenizer

    eos_id = Tokenizer.from_file(str(tiny_tokenizer / "tokenizer.json")).token_to_id(EOS)
    return DatatroveCorpus(root / "shards", tiny_tokenizer, eos_id, texts)


MEGATRON_FORMATS = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "d", 7: "f", 8: "H"}


def write_raw_megatron(
    prefix: Path,
    docs: Sequence[Sequence[int]],
    code: int = 8,
    doc_index: Sequence[int] | None = None,
) -> Path:
    """Writes prefix.bin / prefix.idx field by field as FORMATS.md describes (one sequence per
    document unless `doc_index` groups them); returns the prefix."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    fmt = MEGATRON_FORMATS[code]
    size = struct.calcsize(fmt)
    tokens = [t for d in docs for t in d]
    lengths = [len(d) for d in docs]
    pointers = [size * sum(lengths[:i]) for i in range(len(docs))]
    doc_index = list(range(len(docs) + 1)) if doc_index is None else list(doc_index)
    Path(f"{prefix}.bin").write_bytes(struct.pack(f"<{len(tokens)}{fmt}", *tokens))
    idx = (
        b"MMIDIDX\x00\x00"
        + struct.pack("<Q", 1)
        + struct.pack("<B", code)
        + struct.pack("<Q", len(docs))
        + struct.pack("<Q", len(doc_index))
        + struct.pack(f"<{len(docs)}i", *lengths)
        + struct.pack(f"<{len(docs)}q", *pointers)
        + struct.pack(f"<{len(doc_index)}q", *doc_index)
    )
    Path(f"{prefix}.idx").write_bytes(idx)
    return prefix
