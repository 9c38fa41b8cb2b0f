"""An offline demo corpus: English prose that ships with Python, tokenized into datatrove shards.

The text is the reference manual's topics (`pydoc_data.topics`), the standard library's module,
class and function docstrings and its block comments, read from the source files with `ast` and
never imported (no import side effects). Only their prose is kept, one paragraph a line
(`demo_prose`: no doctests, code examples or signatures). Documents are split into train and
validation by a hash of their name, a byte-level BPE is trained on the training text, and both
splits are tokenized with an EOS after every document:

    out/tokenizer/   a transformers-loadable tokenizer folder (eos_token "<|endoftext|>"), or
                     wherever `tokenizer_dir` says (`data.tokenizer`, which the run then reads)
    out/text/        train.jsonl, val.jsonl (the documents)
    out/train/       out/val/   datatrove shards
    out/manifest.json  counts; its presence with the same settings (the tokenizer where it was
                       written, unchanged) means the build is complete

Each of the four folders holds a `.jaxtrain-demo` marker from the moment it is created. A rebuild
replaces only marked folders (and the build's own manifest); a folder that holds anything else is
refused by name, before anything is removed.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import re
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.demo_prose import prose, prose_paragraph
from jaxtrain.data.errors import DataError
from jaxtrain.data.text_inputs import eos_id_from_tokenizer
from jaxtrain.data.tokenize import tokenize_files

EOS_TOKEN = "<|endoftext|>"
VAL_PER_MILLE = 100  # about 10% of documents go to validation
# Standard-library folders left out: tests (slow to parse, little prose), vendored packages.
SKIP_DIRS = {"test", "tests", "site-packages", "dist-packages", "ensurepip", "__pycache__"}
# A run of full-line comments (not a shebang or coding line) with at least this much text.
_COMMENT_BLOCK = re.compile(r"(?:^[ \t]*#(?!!)[^\n]*\n)+", re.M)
MIN_COMMENT_CHARS = 60
MIN_DOCUMENT_CHARS = 200  # shorter documents are mostly one stray line of prose
MANIFEST_VERSION = 2  # 2: prose only
# The folders a build writes under its root, and the file that marks each as the build's own.
BUILD_FOLDERS = ("tokenizer", "text", "train", "val")
OWNER_MARK = ".jaxtrain-demo"


def _docstrings(body: list[ast.stmt]) -> Iterator[str]:
    """The docstrings of the classes and functions in `body`, descending into classes only."""
    for node in body:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if doc := ast.get_docstring(node):
            yield doc
        if isinstance(node, ast.ClassDef):
            yield from _docstrings(node.body)


def _comments(source: str) -> str:
    blocks = []
    for match in _COMMENT_BLOCK.finditer(source):
        lines = [line.strip().lstrip("#").strip() for line in match.group().splitlines()]
        text = " ".join(line for line in lines if line)
        if len(text) >= MIN_COMMENT_CHARS and (text := prose_paragraph(text)):
            blocks.append(text)
    return "\n\n".join(blocks)


def stdlib_documents() -> Iterator[tuple[str, str]]:
    """(name, text) documents from the standard library's source files, in sorted path order.

    One document of docstring prose per module and one of its block comments (documents under
    MIN_DOCUMENT_CHARS are left out); files that do not parse on this Python are skipped.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_DIRS.intersection(rel.parts[:-1]) or rel.parts[0].startswith("config-"):
            continue
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        docs = [doc] if (doc := ast.get_docstring(tree)) else []
        text = "\n\n".join(p for p in map(prose, docs + list(_docstrings(tree.body))) if p)
        if len(text) >= MIN_DOCUMENT_CHARS:
            yield f"module:{module}", text
        if len(comments := _comments(source)) >= MIN_DOCUMENT_CHARS:
            yield f"comments:{module}", comments


def topic_documents() -> Iterator[tuple[str, str]]:
    """(name, text) documents from the language reference topics that pydoc shows."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        if len(text := prose(topics[name])) >= MIN_DOCUMENT_CHARS:
            yield f"topic:{name}", text


def is_validation(name: str, seed: int = 0) -> bool:
    """Deterministic train/validation split by a hash of the document name."""
    digest = hashlib.md5(f"{seed}:{name}".encode()).hexdigest()
    return int(digest[:8], 16) % 1000 < VAL_PER_MILLE


def train_tokenizer(texts: list[str], vocab_size: int, out_dir: Path) -> Path:
    """Trains a byte-level BPE (EOS `<|endoftext|>`) and saves a transformers tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS_TOKEN],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN).save_pretrained(out_dir)
    return out_dir


def _write_jsonl(path: Path, docs: list[tuple[str, str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for name, text in docs:
            f.write(json.dumps({"id": name, "text": text}) + "\n")


def _settings(vocab_size: int, seed: int, max_documents: int | None) -> dict[str, Any]:
    return {
        "version": MANIFEST_VERSION,
        "vocab_size": vocab_size,
        "seed": seed,
        "max_documents": max_documents,
        "python": ".".join(map(str, sys.version_info[:2])),
    }


def _own_manifest(out: Path) -> dict[str, Any] | None:
    """`out/manifest.json` when a build wrote it (JSON with this module's settings), else None."""
    try:
        data = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (
        isinstance(data, dict)
        and isinstance(data.get("settings"), dict)
        and "version" in data["settings"]
        and data.get("root") == str(out)
    ):
        return None
    return data


def _folders(out: Path, tokenizer: Path) -> list[Path]:
    """The folders a build under `out` writes, its tokenizer's first (BUILD_FOLDERS' order)."""
    return [tokenizer if sub == "tokenizer" else out / sub for sub in BUILD_FOLDERS]


def _tokenizer_digest(tokenizer: Path) -> str:
    """A hash of the tokenizer.json a build wrote: another build into the same tokenizer
    folder changes it, and the shards of this one then no longer match it."""
    return hashlib.sha256((tokenizer / "tokenizer.json").read_bytes()).hexdigest()


def _foreign(out: Path, tokenizer: Path) -> list[Path]:
    """What a build under `out` would replace but did not write: unmarked non-empty folders
    (folders of a complete earlier build, named by its manifest, count as the build's own) and
    a manifest.json that is not a build's."""
    earlier = _own_manifest(out)
    manifest = out / "manifest.json"
    found = [manifest] if manifest.exists() and earlier is None else []
    # An earlier build's folders: those under `out` and the tokenizer folder it names.
    named = {str(out / sub) for sub in BUILD_FOLDERS if sub != "tokenizer"} if earlier else set()
    if earlier:
        named.add(str(earlier.get("tokenizer", out / "tokenizer")))
    for folder in _folders(out, tokenizer):
        if (
            folder.exists()
            and not (folder / OWNER_MARK).is_file()
            and str(folder) not in named
            and (not folder.is_dir() or any(folder.iterdir()))
        ):
            found.append(folder)
    return found


def _claim(folder: Path) -> None:
    """Replaces the build's own `folder` (or creates it) as an empty folder holding the marker."""
    if folder.is_dir():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / OWNER_MARK).write_text(
        "Written by jaxtrain's demo data build (data.prepare=demo), "
        "which replaces this folder when it builds again.\n"
    )


def _complete(out: Path, settings: dict[str, Any], tokenizer: Path) -> dict[str, Any] | None:
    """The manifest when a previous build with the same settings finished and its tokenizer is
    in `tokenizer`, as it wrote it; else None."""
    data = _own_manifest(out)
    if data is None or data.get("settings") != settings or data.get("tokenizer") != str(tokenizer):
        return None
    try:
        find_shards([data["train"]]), find_shards([data["val"]])
    except ValueError:
        return None
    if not (tokenizer / "tokenizer.json").is_file():
        return None
    digest = data.get("tokenizer_sha256")  # absent from the manifests of older builds
    return data if digest is None or digest == _tokenizer_digest(tokenizer) else None


def build_demo_data(
    out_dir: str | Path,
    vocab_size: int = 4096,
    seed: int = 0,
    max_documents: int | None = None,
    progress: Callable[[str], None] | None = None,
    tokenizer_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Builds (or finds already built) the demo corpus, tokenizer and shards under `out_dir`.

    The tokenizer goes into `tokenizer_dir` (default `out_dir/tokenizer`), and the shards record
    it there. Only folders the build made (or missing or empty ones) are written; DataError
    names the first that holds other files, and then nothing has been changed.

    `max_documents` keeps only the first documents (the reference topics come first), for quick
    smoke tests. `progress` receives one line per stage of a build (a build takes 15-30 s).
    Returns the manifest: paths (root, tokenizer, train, val), vocab_size, eos_id and
    counts (train/val documents, characters and tokens, seconds taken).
    """
    out = Path(out_dir).resolve()
    tokenizer = Path(tokenizer_dir).expanduser().resolve() if tokenizer_dir else out / "tokenizer"
    settings = _settings(vocab_size, seed, max_documents)
    if (done := _complete(out, settings, tokenizer)) is not None:
        return done
    if foreign := _foreign(out, tokenizer):
        raise DataError(
            f"{', '.join(map(str, foreign))}: not written by the demo data build "
            '(data.prepare="demo"), which writes text/, train/, val/ and manifest.json into '
            f"{out} and its tokenizer into {tokenizer} (data.tokenizer); nothing was changed. "
            "Point data.paths at a new folder (the demo goes into its parent) and "
            'data.tokenizer at a new or empty one, or set data.prepare="" to train on your own '
            "shards."
        )
    start = time.perf_counter()
    say = progress or (lambda _message: None)
    say(f"building the demo corpus in {out}: reading the standard library's documentation...")
    (out / "manifest.json").unlink(missing_ok=True)
    for folder in _folders(out, tokenizer):
        _claim(folder)

    docs = itertools.islice(itertools.chain(topic_documents(), stdlib_documents()), max_documents)
    splits: dict[str, list[tuple[str, str]]] = {"train": [], "val": []}
    for name, text in docs:
        splits["val" if is_validation(name, seed) else "train"].append((name, text))
    if not splits["val"] and len(splits["train"]) > 1:  # tiny builds: keep validation non-empty
        splits["val"].append(splits["train"].pop())
    say(f"training a {vocab_size}-token BPE on {len(splits['train'])} documents...")
    train_tokenizer([t for _, t in splits["train"]], vocab_size, tokenizer)

    manifest: dict[str, Any] = {
        "settings": settings,
        "root": str(out),
        "tokenizer": str(tokenizer),
        "tokenizer_sha256": _tokenizer_digest(tokenizer),
        "eos_id": eos_id_from_tokenizer(tokenizer),
    }
    for split, split_docs in splits.items():
        say(f"tokenizing {split}: {len(split_docs)} documents...")
        _write_jsonl(out / "text" / f"{split}.jsonl", split_docs)
        tokenize_files(
            [str(out / "text" / f"{split}.jsonl")],
            tokenizer,
            out / split,
            seed=seed,
            overwrite=True,
            backend="builtin",
        )
        shards = find_shards([str(out / split)])
        manifest[split] = str(out / split)
        manifest[f"{split}_docs"] = len(split_docs)
        manifest[f"{split}_chars"] = sum(len(t) for _, t in split_docs)
        manifest[f"{split}_tokens"] = sum(s.num_tokens for s in shards)
    from tokenizers import Tokenizer

    manifest["vocab_size"] = Tokenizer.from_file(str(tokenizer / "tokenizer.json")).get_vocab_size()
    manifest["seconds"] = round(time.perf_counter() - start, 1)
    # Written last: its presence marks a complete build.
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    say(
        f"demo corpus ready: {manifest['train_tokens']:,} train and {manifest['val_tokens']:,} "
        f"val tokens in {manifest['seconds']}s"
    )
    return manifest
