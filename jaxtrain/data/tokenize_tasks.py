"""Tokenizing tasks: one task per output file, tasks run in parallel processes.

A task streams its input files document by document through the tokenizer into one datatrove
shard, written by datatrove's own `DocumentTokenizer`, or one Megatron dataset (`shard_writers`),
appending an EOS after each document; memory holds one batch of documents and one length per
document, never the corpus. With several workers, tasks run in spawned processes (a fork would
copy the parent's threads, e.g. jax's) and report their progress to the parent through a queue.

datatrove's own `LocalPipelineExecutor` is not used to run them: it reports progress only to its
log (a folder, and INFO lines on stderr), and Megatron datasets need this runner anyway. Each task
builds a fresh `DocumentTokenizer`, so a task's in-file shuffle is `default_rng(seed)` whatever the
number of workers (the executor shares one generator among the tasks of a single worker).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import multiprocessing
import queue as queue_lib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from jaxtrain.data import text_inputs
from jaxtrain.data.errors import DataError
from jaxtrain.data.megatron import dtype_for_vocab
from jaxtrain.data.shard_writers import MegatronDocumentWriter, ShuffledWriter
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


def load_encoder(
    tokenizer: str, eos_token: str
) -> tuple[Callable[[list[str]], list[list[int]]], int, int]:
    """(encode texts -> ids, vocabulary size, EOS id) for a tokenizer."""
    json_file = tokenizer_json(tokenizer)
    if json_file is not None:
        tok = Tokenizer.from_file(str(json_file))
        vocab, eos_id = tok.get_vocab_size(), tok.token_to_id(eos_token)
        encode = lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    else:
        from transformers import AutoTokenizer  # slow to import: only for tokenizers without JSON

        tok = AutoTokenizer.from_pretrained(tokenizer)
        vocab, eos_id = len(tok), tok.convert_tokens_to_ids(eos_token)
        encode = lambda texts: tok(texts, add_special_tokens=False)["input_ids"]
    if eos_id is None:
        raise _missing_eos(eos_token, tokenizer)
    return encode, vocab, eos_id


def _missing_eos(eos_token: str, tokenizer: str) -> DataError:
    return DataError(f"EOS token {eos_token!r} is not in the vocabulary of {tokenizer}.")


def megatron_prefix(output: str | Path, rank: int | None, text_key: str) -> Path:
    """Where a task writes: `<output>/<rank>_<key>_document`, Megatron's naming with a rank."""
    stem = f"{text_key}_document" if rank is None else f"{rank:05d}_{text_key}_document"
    return Path(output) / stem


def _texts(task: Task) -> Iterator[str]:
    return (t for f in task.files for t in iter_texts(Path(f), task.text_key))


class _Feed:
    """The task's documents for datatrove's step; reports the counts of each batch once datatrove
    has written it (it asks for the next document only then)."""

    def __init__(self, task: Task, step: Any, document: type, progress: Progress | None) -> None:
        self.task, self.step, self.document, self.progress = task, step, document, progress
        self.docs = self.reported_docs = self.reported_tokens = 0

    def __iter__(self) -> Iterator[Any]:
        for text in _texts(self.task):
            if self.docs and self.docs % text_inputs.ENCODE_BATCH == 0:
                self.report()
            self.docs += 1
            yield self.document(text=text, id=f"{self.task.rank}/{self.docs}")

    def report(self) -> None:
        """Passes the documents and tokens written since the last report to `progress`."""
        tokens = int(self.step.stats["tokens"].total)
        if self.progress is not None and self.docs > self.reported_docs:
            self.progress(self.docs - self.reported_docs, tokens - self.reported_tokens)
        self.reported_docs, self.reported_tokens = self.docs, tokens


def _remove_files_of(task: Task) -> None:
    for leftover in Path(task.output).glob(f"{task.rank:05d}_*.ds*"):
        leftover.unlink()


def _datatrove_task(task: Task, progress: Progress | None) -> Path | None:
    """Writes the task's datatrove shard with datatrove's `DocumentTokenizer`."""
    # Imported here: `datatrove.io` loads huggingface_hub's API (0.4 s), which every training
    # start would pay, since the demo corpus (imported by the trainer) imports this module.
    from datatrove.data import Document
    from datatrove.pipeline.tokens import DocumentTokenizer
    from loguru import logger  # datatrove's logger

    json_file = tokenizer_json(task.tokenizer)
    if json_file is None:
        raise DataError(
            f"{task.tokenizer}: writing datatrove shards needs a tokenizer.json (a "
            "fast tokenizer), which datatrove loads; save one with "
            "AutoTokenizer.from_pretrained(folder).save_pretrained(folder), or "
            "write --format megatron."
        )
    if Tokenizer.from_file(str(json_file)).token_to_id(task.eos_token) is None:
        raise _missing_eos(task.eos_token, task.tokenizer)
    # datatrove loads a local tokenizer from the tokenizer.json file, not the folder.
    step = DocumentTokenizer(
        task.output,
        tokenizer_name_or_path=str(json_file),
        eos_token=task.eos_token,
        shuffle_documents=task.shuffle,
        seed=task.seed,
        batch_size=text_inputs.ENCODE_BATCH,
    )
    feed = _Feed(task, step, Document, progress)
    logger.disable("datatrove")  # its INFO lines would interleave with the progress line
    try:
        step.run(iter(feed), rank=task.rank)
    except BaseException:
        _remove_files_of(task)  # a half-written shard must not be read as a whole one
        raise
    finally:
        logger.enable("datatrove")
    feed.report()
    if not feed.docs:  # datatrove leaves an empty X.ds with its index and metadata
        _remove_files_of(task)
        return None
    stem = "00000_doc_shuffled" if task.shuffle else "unshuffled"
    return Path(task.output) / f"{task.rank:05d}_{stem}.ds"


def _megatron_task(task: Task, progress: Progress | None) -> Path | None:
    """Writes the task's Megatron dataset with the built-in writer (`shard_writers`)."""
    encode, vocab, eos_id = load_encoder(task.tokenizer, task.eos_token)
    dtype = dtype_for_vocab(vocab)
    writer: Any = MegatronDocumentWriter(
        megatron_prefix(task.output, task.rank, task.text_key), dtype
    )
    if task.shuffle:  # datatrove's default: documents in a seeded random order inside the file
        spool = Path(task.output) / f".{task.rank:05d}.spool"
        writer = ShuffledWriter(writer, spool, dtype, task.seed)
    texts = _texts(task)
    try:
        while batch := list(itertools.islice(texts, text_inputs.ENCODE_BATCH)):
            encoded = [ids + [eos_id] for ids in encode(batch)]
            writer.add_many(encoded)
            if progress is not None:
                progress(len(encoded), sum(map(len, encoded)))
    finally:
        written = writer.close()
    return written


def run_task(task: Task, progress: Progress | None = None) -> Path | None:
    """Tokenizes the task's files into its output; returns the file written (None if empty).

    `progress(documents, tokens)` is called with the counts of every batch encoded. With
    `shuffle`, documents end up in the order `default_rng(seed).permutation(n)` of input order.
    """
    if task.fmt == "datatrove":
        return _datatrove_task(task, progress)
    if task.fmt == "megatron":
        return _megatron_task(task, progress)
    raise DataError(f"format {task.fmt!r} is not one of {FORMATS}.")


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


def run_tasks(
    tasks: Sequence[Task], workers: int, progress: Progress | None = None
) -> list[Path | None]:
    """Runs the tasks, `workers` at a time in spawned processes (in this process when 1).

    A task's DataError is raised here; a worker that dies raises BrokenProcessPool, never hangs.
    """
    if workers <= 1 or len(tasks) <= 1:
        return [run_task(t, progress) for t in tasks]
    ctx = multiprocessing.get_context("spawn")
    progress_queue = ctx.Queue()
    with concurrent.futures.ProcessPoolExecutor(
        min(workers, len(tasks)),
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(progress_queue,),
    ) as pool:
        futures = [pool.submit(_run_in_worker, t) for t in tasks]
        while not all(f.done() for f in futures):
            _drain(progress_queue, progress, timeout=0.2)
        results = [f.result() for f in futures]
    _drain(progress_queue, progress, timeout=0.05)
    return results
