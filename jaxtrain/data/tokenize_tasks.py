"""The built-in tokenizer writer: one task per output file, tasks run in parallel processes.

A task streams its input files document by document through the tokenizer into one datatrove
shard or one Megatron dataset (`shard_writers`), appending an EOS after each document; memory
holds one batch of documents and one length per document, never the corpus. With several
workers, tasks run in spawned processes (a fork would copy the parent's threads, e.g. jax's)
and report their progress to the parent through a queue.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import multiprocessing
import queue as queue_lib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jaxtrain.data import text_inputs
from jaxtrain.data.errors import DataError
from jaxtrain.data.megatron import dtype_for_vocab
from jaxtrain.data.shard_writers import (
    DATATROVE_DTYPES,
    DatatroveWriter,
    DocumentWriter,
    MegatronDocumentWriter,
    ShuffledWriter,
)
from jaxtrain.data.text_inputs import iter_texts, tokenizer_json

FORMATS = ("datatrove", "megatron")
Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True)
class Task:
    """What one task tokenizes and where it writes it."""

    files: tuple[str, ...]
    tokenizer: str
    output: str
    rank: int
    text_key: str
    eos_token: str
    shuffle: bool
    seed: int
    fmt: str = "datatrove"


def load_encoder(tokenizer: str, eos_token: str
                 ) -> tuple[Callable[[list[str]], list[list[int]]], int, int, str]:
    """(encode texts -> ids, vocabulary size, EOS id, name to record) for a tokenizer."""
    json_file = tokenizer_json(tokenizer)
    if json_file is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(json_file))
        vocab, eos_id = tok.get_vocab_size(), tok.token_to_id(eos_token)
        encode = lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        name = str(json_file)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
        vocab, eos_id = len(tok), tok.convert_tokens_to_ids(eos_token)
        encode = lambda texts: tok(texts, add_special_tokens=False)["input_ids"]
        name = str(tokenizer)
    if eos_id is None:
        raise DataError(f"EOS token {eos_token!r} is not in the vocabulary of {tokenizer}.")
    return encode, vocab, eos_id, name


def megatron_prefix(output: str | Path, rank: int | None, text_key: str) -> Path:
    """Where a task writes: `<output>/<rank>_<key>_document`, Megatron's naming with a rank."""
    stem = f"{text_key}_document" if rank is None else f"{rank:05d}_{text_key}_document"
    return Path(output) / stem


def _writer(task: Task, vocab: int, name: str) -> tuple[DocumentWriter, Any]:
    output = Path(task.output)
    if task.fmt == "megatron":
        dtype = dtype_for_vocab(vocab)
        return MegatronDocumentWriter(megatron_prefix(output, task.rank, task.text_key),
                                      dtype), dtype
    if task.fmt != "datatrove":
        raise DataError(f"format {task.fmt!r} is not one of {FORMATS}.")
    token_size = 4 if vocab > 65536 else 2  # datatrove's rule
    stem = (f"{task.rank:05d}_00000_doc_shuffled.ds" if task.shuffle
            else f"{task.rank:05d}_unshuffled.ds")
    return DatatroveWriter(output / stem, token_size, name), DATATROVE_DTYPES[token_size]


def run_task(task: Task, progress: Progress | None = None) -> Path | None:
    """Tokenizes the task's files into its output; returns the file written (None if empty).

    `progress(documents, tokens)` is called with the counts of every batch encoded. With
    `shuffle`, documents end up in the order `default_rng(seed).permutation(n)` of input order.
    """
    encode, vocab, eos_id, name = load_encoder(task.tokenizer, task.eos_token)
    writer, dtype = _writer(task, vocab, name)
    if task.shuffle:  # datatrove's default: documents in a seeded random order inside the file
        spool = Path(task.output) / f".{task.rank:05d}.spool"
        writer = ShuffledWriter(writer, spool, dtype, task.seed)
    texts = (t for f in task.files for t in iter_texts(Path(f), task.text_key))
    try:
        while batch := list(itertools.islice(texts, text_inputs.ENCODE_BATCH)):
            encoded = [ids + [eos_id] for ids in encode(batch)]
            writer.add_many(encoded)
            if progress is not None:
                progress(len(encoded), sum(map(len, encoded)))
    finally:
        written = writer.close()
    return written


_QUEUE: Any = None  # the progress queue of a worker process


def _init_worker(progress_queue: Any) -> None:
    global _QUEUE
    _QUEUE = progress_queue


def _run_in_worker(task: Task) -> Path | None:
    return run_task(task, lambda docs, tokens: _QUEUE.put((docs, tokens)))


def _drain(progress_queue: Any, progress: Progress | None, timeout: float) -> None:
    try:
        while True:
            docs, tokens = progress_queue.get(timeout=timeout)
            if progress is not None:
                progress(docs, tokens)
    except queue_lib.Empty:
        return


def run_tasks(tasks: Sequence[Task], workers: int, progress: Progress | None = None
              ) -> list[Path | None]:
    """Runs the tasks, `workers` at a time in spawned processes (in this process when 1).

    A task's DataError is raised here; a worker that dies raises BrokenProcessPool, never hangs.
    """
    if workers <= 1 or len(tasks) <= 1:
        return [run_task(t, progress) for t in tasks]
    ctx = multiprocessing.get_context("spawn")
    progress_queue = ctx.Queue()
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(tasks)), mp_context=ctx,
                                                initializer=_init_worker,
                                                initargs=(progress_queue,)) as pool:
        futures = [pool.submit(_run_in_worker, t) for t in tasks]
        while not all(f.done() for f in futures):
            _drain(progress_queue, progress, timeout=0.2)
        results = [f.result() for f in futures]
    _drain(progress_queue, progress, timeout=0.05)
    return results
