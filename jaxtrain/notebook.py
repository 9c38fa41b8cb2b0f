"""Notebook helpers over the objects the command line uses: no second code path.

    import jaxtrain
    from jaxtrain import notebook as jt

    cfg = jaxtrain.load_config("configs/demo.py", train__steps=30)  # or a name: "llama-debug"
    jt.prepare_data(cfg)               # builds the demo corpus on first use (data.prepare)
    trainer = jaxtrain.Trainer(cfg)
    jt.param_table(trainer)            # path, shape, dtype, logical axes, mesh spec, count
    jt.peek_batch(trainer)["text"]     # the next training batch as text; the stream is untouched
    trainer.run(10)
    jt.sample(trainer, "The module", max_new_tokens=30)

Nothing heavy is imported until a function is called, so `import jaxtrain.notebook` is cheap.
"""

from __future__ import annotations

import dataclasses
import functools
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def prepare_data(cfg: Any) -> None:
    """Builds the shards a config asks to build (`data.prepare`, e.g. the demo corpus) when they
    are missing, printing each stage; does nothing otherwise. `python -m jaxtrain` does this
    before it trains; a Trainer never builds data itself."""
    from jaxtrain.data.prepare import prepare_data as prepare

    prepare(cfg, progress=print)


def _overrides(mapping: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys from a mapping and `section__key=value` keyword arguments, merged."""
    merged = dict(mapping or {})
    merged.update({key.replace("__", "."): value for key, value in kwargs.items()})
    return merged


def load_config(
    path_or_preset: str | Path, overrides: Mapping[str, Any] | None = None, /, **kwargs: Any
):
    """A locked config from a file, a shipped config's name or a preset name, with overrides.

    The name means what it means to `python -m jaxtrain --config NAME`: "llama2-7b",
    "llama2_7b" and "llama2_7b.py" all give the shipped configs/llama2_7b.py; a path gives that
    file (a jaxtrain `.py` config, optionally `file.py:arg`, or a config of another stack).
    Overrides are a {"train.steps": 30} mapping and/or keyword arguments with `__` for the dots
    (`train__steps=30`); keyword arguments win. Unknown keys raise ConfigError, as on the CLI.
    """
    from jaxtrain import compat

    return compat.load_config_file(str(path_or_preset), _overrides(overrides, kwargs))


@dataclasses.dataclass(frozen=True)
class ParamRow:
    """One parameter array: where it lives in the tree and how it is laid out."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    axes: tuple[str, ...] | None  # logical axes (model vocabulary), when known
    spec: str  # mesh PartitionSpec, "-" when the array is not sharded over a mesh
    count: int


@dataclasses.dataclass(frozen=True)
class ParamTable:
    """The parameter tree as rows; prints as a text table and renders as HTML in a notebook."""

    rows: list[ParamRow]

    @property
    def total(self) -> int:
        """Scalars in all parameters."""
        return sum(r.count for r in self.rows)

    def _cells(self) -> tuple[list[str], list[list[str]]]:
        header = ["path", "shape", "dtype", "logical axes", "mesh spec", "count"]
        body = [
            [
                r.path,
                "x".join(map(str, r.shape)) or "()",
                r.dtype,
                ", ".join(a or "-" for a in r.axes) if r.axes is not None else "",
                r.spec,
                f"{r.count:,}",
            ]
            for r in self.rows
        ]
        return header, body

    def __str__(self) -> str:
        header, body = self._cells()
        footer = ["total", "", "", "", "", f"{self.total:,}"]
        widths = [max(len(row[i]) for row in [header, *body, footer]) for i in range(len(header))]

        def line(cells: list[str]) -> str:
            # Numbers read best right-aligned; everything else left-aligned.
            return "  ".join(
                c.rjust(w) if i == len(cells) - 1 else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths))
            ).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([line(header), rule, *map(line, body), rule, line(footer)])

    def _repr_html_(self) -> str:
        header, body = self._cells()
        cell = lambda tag, text: f"<{tag}>{html.escape(text)}</{tag}>"
        rows = ["<tr>" + "".join(cell("th", h) for h in header) + "</tr>"]
        rows += ["<tr>" + "".join(cell("td", c) for c in r) + "</tr>" for r in body]
        rows.append(f"<tr><th>total</th><td colspan='4'></td><th>{self.total:,}</th></tr>")
        return "<table>" + "".join(rows) + "</table>"

    def __repr__(self) -> str:
        return str(self)


def _path_name(path: tuple[Any, ...]) -> str:
    parts = []
    for key in path:
        parts.append(str(getattr(key, "key", getattr(key, "idx", getattr(key, "name", key)))))
    return "/".join(parts)


def _spec_text(leaf: Any) -> str:
    spec = getattr(getattr(leaf, "sharding", None), "spec", None)
    if spec is None:
        return "-"
    return "(" + ", ".join("-" if s is None else str(s) for s in spec) + ")"


def param_table(obj: Any) -> ParamTable:
    """The parameter tree of a Trainer, an nnx model or a parameter pytree, one row per array.

    For a Trainer nothing is read from the devices: shapes, dtypes and shardings come from its
    abstract state, and the logical axes from its sharding layout.
    """
    import jax
    from flax import nnx

    from jaxtrain.parallel import sharding

    axes_tree = None
    if hasattr(obj, "layout"):  # a Trainer
        params, axes_tree = obj.layout.abstract["params"], obj.layout.param_axes
    elif isinstance(obj, nnx.Module):
        state = nnx.state(obj, nnx.Param)
        params = nnx.to_pure_dict(state)
        axes_tree = nnx.to_pure_dict(sharding.param_logical_axes(state))
    else:
        params = obj
    axes_by_path: dict[str, tuple[str, ...]] = {}
    if axes_tree is not None:
        flat_axes = jax.tree_util.tree_flatten_with_path(
            axes_tree, is_leaf=lambda x: isinstance(x, tuple)
        )[0]
        axes_by_path = {_path_name(p): tuple(a) for p, a in flat_axes}
    rows = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = _path_name(path)
        shape = tuple(int(d) for d in leaf.shape)
        count = 1
        for d in shape:
            count *= d
        rows.append(
            ParamRow(name, shape, str(leaf.dtype), axes_by_path.get(name), _spec_text(leaf), count)
        )
    return ParamTable(rows)


@functools.lru_cache(maxsize=8)
def _tokenizer(folder: str) -> Any:
    from jaxtrain.models.generation import load_tokenizer

    return load_tokenizer(folder)


def _run_tokenizer(cfg: Any, tokenizer: Any = None) -> Any:
    if tokenizer is not None:
        return tokenizer
    if not cfg.data.tokenizer:
        raise ValueError("the config names no tokenizer (data.tokenizer); pass tokenizer=.")
    return _tokenizer(str(cfg.data.tokenizer))


def peek_batch(
    trainer: Any, decode: bool = True, rows: int | None = None, tokenizer: Any = None
) -> dict[str, Any]:
    """The batch the trainer's next step will read, without consuming the training stream.

    A second iterator is built from the same config and moved to the trainer's position, so
    `trainer.run` still sees every batch in order. Returns this process's rows as numpy arrays
    ("inputs", "targets", "loss_mask") and, with `decode`, "text": the first `rows` inputs
    decoded with the run's tokenizer (data.tokenizer). Synthetic data is not decoded.
    """
    import jax

    from jaxtrain.data import pipeline

    cfg = trainer.cfg
    it = pipeline.make_train_iterator(
        cfg,
        trainer.spec.vocab_size,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )
    it.set_state(trainer.train_iter.get_state())
    batch = dict(next(it))
    if decode and cfg.data.kind != "synthetic":
        tok = _run_tokenizer(cfg, tokenizer)
        inputs = batch["inputs"][:rows] if rows else batch["inputs"]
        batch["text"] = [tok.decode(list(map(int, r)), skip_special_tokens=False) for r in inputs]
    return batch


def sample(
    source: Any,
    prompt: str,
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int = 0,
    seed: int = 0,
    step: int | None = None,
    tokenizer: Any = None,
) -> str:
    """Continues `prompt` with a Trainer's current parameters or a run directory's checkpoint.

    `source` is a Trainer or a run directory (then `step` picks the checkpoint, latest by
    default). Returns the continuation only; the tokenizer is the run's data.tokenizer.
    """
    from jaxtrain.models.generation import complete

    if hasattr(source, "model") and hasattr(source, "cfg"):
        model, cfg = source.model(), source.cfg
    else:
        from jaxtrain.checkpoint.saved_run import load_model

        model, cfg, _ = load_model(source, step)
    return complete(
        model,
        _run_tokenizer(cfg, tokenizer),
        prompt,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
    )
