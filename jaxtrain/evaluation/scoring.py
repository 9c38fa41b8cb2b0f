"""Log-likelihoods and greedy continuations of token sequences on jaxtrain parameters.

This is the JAX side of evaluation, free of any harness: it scores `(tokens, continuation
length)` rows and continues prompts. Rows are right-padded to a few fixed shapes (a fixed
number of rows, lengths rounded up to a power of two), so each shape compiles once however many
requests come. With a `RunSetup` the parameters stay in the run's shardings and the rows are
split over the run's mesh like a training batch; every process passes the same rows and gets
every result back (the scores come out replicated), so a multi-process run evaluates in step.

Shape letters: B rows, L positions, V vocabulary.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.run import RunSetup

# The shortest length bucket: shorter rows share it, so tiny requests do not each compile.
MIN_BUCKET = 32


def length_buckets(max_len: int, multiple: int = 1) -> list[int]:
    """Powers of two from MIN_BUCKET up to `max_len` (itself the last), each a multiple of
    `multiple` (the mesh's `context` size, which splits positions)."""
    sizes, size = [], MIN_BUCKET
    while size < max_len:
        sizes.append(size)
        size *= 2
    sizes.append(max_len)
    return sorted({-(-s // multiple) * multiple for s in sizes})


def bucket_of(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket holding `length` tokens."""
    for size in buckets:
        if length <= size:
            return size
    raise ValueError(f"{length} tokens exceed the largest bucket {buckets[-1]}")


def _score_rows(
    graphdef: nnx.GraphDef,
    params: Any,
    tokens_BL: jax.Array,
    targets_BL: jax.Array,
    mask_BL: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """(summed log-probability of the masked targets [B], whether each is the argmax [B])."""
    model = nnx.merge(graphdef, params)
    logits_BLV = model(tokens_BL).astype(jnp.float32)
    logp_BLV = jax.nn.log_softmax(logits_BLV, axis=-1)
    picked_BL = jnp.take_along_axis(logp_BLV, targets_BL[..., None], axis=-1)[..., 0]
    sums_B = jnp.sum(jnp.where(mask_BL, picked_BL, 0.0), axis=-1)
    greedy_B = jnp.all((jnp.argmax(logits_BLV, axis=-1) == targets_BL) | ~mask_BL, axis=-1)
    return sums_B, greedy_B


def _prefill(
    graphdef: nnx.GraphDef, params: Any, tokens_BL: jax.Array, last: jax.Array, cache_len: int
) -> tuple[jax.Array, Any]:
    """The greedy next token [B] after position `last` of a right-padded prompt, and a new
    cache of `cache_len` slots holding it (the slots past `last` hold padding; decoding
    overwrites them before any query sees them)."""
    model = nnx.merge(graphdef, params)
    cache = model.init_cache(tokens_BL.shape[0], cache_len)
    h_BLD, cache = model.hidden_states(tokens_BL, cache=cache, cache_index=0)
    h_B1D = jax.lax.dynamic_slice_in_dim(h_BLD, last, 1, axis=1)
    return jnp.argmax(model.logits(h_B1D)[:, 0].astype(jnp.float32), axis=-1), cache


def _decode(
    graphdef: nnx.GraphDef, params: Any, token_B1: jax.Array, cache: Any, index: jax.Array
) -> tuple[jax.Array, Any]:
    """One cached step: the greedy token [B] after `token_B1`, written at slot `index`."""
    model = nnx.merge(graphdef, params)
    h_B1D, cache = model.hidden_states(token_B1, cache=cache, cache_index=index)
    return jnp.argmax(model.logits(h_B1D)[:, 0].astype(jnp.float32), axis=-1), cache


class Scorer:
    """Scores and continues token sequences with one model's parameters.

    `setup` (the run's `RunSetup`) keeps the parameters in the run's shardings and splits the
    rows over its mesh; without it (a Hugging Face folder read on this host) the arrays go
    where JAX puts them. `rows` is the number of sequences scored per call (rounded up to the
    batch axes of the mesh); the longest sequence is the model's `max_seq_len`.
    """

    def __init__(
        self,
        graphdef: nnx.GraphDef,
        params: Any,
        spec: ModelSpec,
        *,
        setup: RunSetup | None = None,
        rows: int = 8,
    ):
        self.graphdef, self.params, self.setup = graphdef, params, setup
        self.max_len = spec.max_seq_len
        # Recurrent layers (Mamba, DeltaNet) would carry the padding of a bucketed prompt.
        self.recurrent = bool(spec.block_pattern)
        divide, context = 1, 1
        if setup is not None:
            spec = setup.batch_sharding.spec
            sizes = setup.axis_sizes
            divide = math.prod(sizes[a] for a in _axes(spec[0]))
            context = math.prod(sizes[a] for a in _axes(spec[1] if len(spec) > 1 else None))
        self.rows = -(-rows // divide) * divide
        self.buckets = length_buckets(self.max_len, context)
        self._score = self._jit_score()
        # One row cannot be split over the batch axes: decoding follows the parameters'
        # shardings, with no activation constraints (as `models.generation` does), and its
        # inputs and outputs are whole on every device, so every process reads each token.
        prefill = functools.partial(_prefill, graphdef, cache_len=self.max_len)
        self._prefill = self._jit_replicated(prefill, 2)
        self._decode = self._jit_replicated(functools.partial(_decode, graphdef), 3)

    def _jit_score(self) -> Callable[..., Any]:
        """`_score_rows` jitted once: with a run, the parameters in their shardings, the rows
        split like a batch under the run's mesh, and the scores replicated to every process."""
        if self.setup is None:
            return jax.jit(functools.partial(_score_rows, self.graphdef))
        s = self.setup
        step = jax.jit(
            functools.partial(_score_rows, self.graphdef),
            in_shardings=(s.layout.shardings["params"], *([s.batch_sharding] * 3)),
            out_shardings=NamedSharding(s.mesh, PartitionSpec()),
        )

        def run(*args: Any) -> Any:
            with s.mesh_context():
                return step(*args)

        return run

    def _jit_replicated(self, fn: Callable[..., Any], others: int) -> Callable[..., Any]:
        """`fn(params, ...)` jitted with the parameters in their shardings and its `others`
        arguments and its outputs whole on every device of the run's mesh."""
        if self.setup is None:
            return jax.jit(fn)
        whole = NamedSharding(self.setup.mesh, PartitionSpec())
        return jax.jit(
            fn,
            in_shardings=(self.setup.layout.shardings["params"], *([whole] * others)),
            out_shardings=whole,
        )

    def _place(self, host: np.ndarray) -> jax.Array:
        """A host array every process holds whole, as a global array split like a batch."""
        if self.setup is None:
            return jnp.asarray(host)
        sharding = self.setup.batch_sharding
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    def loglikelihoods(
        self, requests: Sequence[tuple[Sequence[int], int]]
    ) -> list[tuple[float, bool]]:
        """For each (tokens, n): the log-probability of the last n tokens given the ones before,
        and whether each of them is the model's greedy choice. A sequence longer than
        `max_len` + 1 keeps its last `max_len` + 1 tokens (the context is cut on the left)."""
        results: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
        trimmed = [(list(t)[-(self.max_len + 1) :], n) for t, n in requests]
        # Longest first, so rows of one call share a bucket and padding stays small.
        order = sorted(range(len(trimmed)), key=lambda i: -len(trimmed[i][0]))
        for start in range(0, len(order), self.rows):
            chunk = order[start : start + self.rows]
            length = bucket_of(max(len(trimmed[i][0]) - 1 for i in chunk), self.buckets)
            tokens = np.zeros((self.rows, length), np.int32)
            targets = np.zeros((self.rows, length), np.int32)
            mask = np.zeros((self.rows, length), bool)
            for row, i in enumerate(chunk):
                seq, n = trimmed[i]
                tokens[row, : len(seq) - 1] = seq[:-1]
                targets[row, : len(seq) - 1] = seq[1:]
                mask[row, max(len(seq) - 1 - n, 0) : len(seq) - 1] = True
            sums, greedy = jax.device_get(
                self._score(self.params, *map(self._place, (tokens, targets, mask)))
            )
            for row, i in enumerate(chunk):
                results[i] = (float(sums[row]), bool(greedy[row]))
        return results

    def greedy_continuation(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        stop: Callable[[list[int]], bool],
    ) -> list[int]:
        """The greedy continuation of `prompt` (cut on the left to leave room for
        `max_new_tokens`), ending when `stop(new tokens)` says so or after `max_new_tokens`.

        One row: the prompt is right-padded to its length bucket (attention layers ignore
        slots past the query), so the prefill compiles once per bucket and each decode step
        once; recurrent layers take the prompt at its own length.
        """
        prompt = list(prompt)[-max(self.max_len - max_new_tokens, 1) :]
        length = len(prompt) if self.recurrent else bucket_of(len(prompt), self.buckets)
        tokens = np.zeros((1, length), np.int32)
        tokens[0, : len(prompt)] = prompt
        token, cache = self._prefill(self.params, tokens, np.int32(len(prompt) - 1))
        out: list[int] = []
        for i in range(max_new_tokens):
            out.append(int(jax.device_get(token)[0]))
            if stop(out) or len(prompt) + i + 1 >= self.max_len:
                break
            token, cache = self._decode(
                self.params, np.asarray([out[-1:]], np.int32), cache, np.int32(len(prompt) + i)
            )
        return out


def _axes(entry: Any) -> tuple[str, ...]:
    """The mesh axes one PartitionSpec entry names."""
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)
