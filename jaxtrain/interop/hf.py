"""Hugging Face safetensors checkpoints <-> jaxtrain parameter trees.

Which tensor each parameter is, and how its layout differs, is `hf_tensor_maps`: jaxtrain stacks
every block parameter over layers (and experts), Hugging Face stores one `nn.Linear` weight
[out, in] per layer (and expert). Both use the same half-split RoPE layout, so converting is only
reshapes and transposes; DeepSeek's interleaved rotary pairs are rotated as stored, so no
projection is permuted. Tensors are read and written one at a time, so peak host memory is one
stacked parameter plus one checkpoint shard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import re
import shutil
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config
from jaxtrain.interop.hf_layout import check_expert_layout, is_extra_layer
from jaxtrain.interop.hf_tensor_maps import TensorMap, tensor_maps
from jaxtrain.models.assembly.decoder import Decoder
from jaxtrain.models.feedforward.moe import RouterBias
from jaxtrain.models.spec.hyperparameters import ModelSpec

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
# Buffers some old checkpoints carry that are recomputed from the config, not learned: rotary
# frequencies, GPT-2's causal masks.
_IGNORED = re.compile(r".*rotary_emb\.inv_freq$|.*\.attn\.(masked_)?bias$")
_TIE_HINT = " (tied embeddings need tie_word_embeddings=true in config.json)"
_SHARD_FILE = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")

Params = dict[str, Any]


def _open_shard(path: pathlib.Path) -> Any:
    """safetensors' reader of one weights file; ConfigError naming a truncated or damaged one
    (safetensors checks the header and the file's length when it opens it)."""
    try:
        return safe_open(path, framework="numpy")
    except (SafetensorError, OSError) as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"{path}: not a complete safetensors file ({detail}); it is truncated or damaged "
            "(an interrupted download or copy): download or copy it again."
        ) from None


def _checkpoint_index(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """Tensor name -> safetensors file, from the index json or the single weights file."""
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError(type(weight_map).__name__)
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(
                f"{index} is not a safetensors index (JSON with a weight_map: {e}); it is "
                "truncated or damaged: download or copy it again."
            ) from None
        files = {name: folder / file for name, file in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.is_file():
                raise ConfigError(f"{index} lists shard {path.name}, which does not exist.")
        return files
    single = folder / WEIGHTS_NAME
    if single.is_file():
        with _open_shard(single) as f:
            return {name: single for name in f.keys()}
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    raise ConfigError(
        f"{folder} has neither {WEIGHTS_NAME} nor {INDEX_NAME} (found: "
        f"{present or 'nothing'}); only safetensors checkpoints are read."
    )


def check_checkpoint_files(folder: str | pathlib.Path) -> None:
    """ConfigError naming a weights file of `folder` that is missing, truncated or damaged.

    Reads the index and each file's header only (safetensors checks that the file is as long
    as its header says), so it is cheap to run before anything is built.
    """
    for path in sorted(set(_checkpoint_index(pathlib.Path(folder)).values())):
        with _open_shard(path):
            pass


def _shape(path: pathlib.Path, name: str) -> tuple[int, ...]:
    """A stored tensor's shape, read from its file header."""
    with _open_shard(path) as f:
        return tuple(f.get_slice(name).get_shape())


def _set(tree: Params, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def load_hf_params(
    folder: str | pathlib.Path, spec: ModelSpec | None = None, **overrides: Any
) -> tuple[ModelSpec, Params]:
    """Reads a Hugging Face safetensors checkpoint into a jaxtrain parameter tree.

    Returns (spec, params): `spec` from `folder/config.json` unless given, with `overrides`;
    and `params` the nested dict `nnx.to_pure_dict` gives for a `Decoder` of that spec, as host
    numpy arrays in `spec.param_dtype` (place them with `jax.device_put` or `nnx.merge`).
    Raises ConfigError naming the file and tensor for missing, extra or misshapen tensors.
    """
    folder = pathlib.Path(folder)
    if spec is None:
        spec = spec_from_hf_config(folder, **overrides)
    elif overrides:
        spec = dataclasses.replace(spec, **overrides)
    files = _checkpoint_index(folder)
    check_expert_layout(str(folder), files, spec, lambda name: _shape(files[name], name))
    maps = tensor_maps(spec)
    expected = {name for m in maps for name in m.names(spec.num_layers)}
    missing = sorted(expected - set(files))
    if missing:
        raise ConfigError(
            f"{folder}: checkpoint lacks {len(missing)} tensor(s) the "
            f"{spec.family} spec needs: {', '.join(missing[:8])}"
            f"{' ...' if len(missing) > 8 else ''}"
            f"{_TIE_HINT if missing == ['lm_head.weight'] else ''}."
        )
    tied_head = spec.tie_embeddings and "lm_head.weight" in files
    extra = sorted(
        n
        for n in set(files) - expected
        if not _IGNORED.match(n)
        and not (tied_head and n == "lm_head.weight")
        and not is_extra_layer(n, spec)
    )
    if extra:
        raise ConfigError(
            f"{folder}: checkpoint has {len(extra)} tensor(s) the {spec.family} "
            f"spec has no place for (another architecture, or a config that does "
            f"not match the weights?): {', '.join(extra[:8])}"
            f"{' ...' if len(extra) > 8 else ''}."
        )
    dtype = np.dtype(spec.jnp_param_dtype)
    params: Params = {}
    with contextlib.ExitStack() as stack:
        handles = {
            path: stack.enter_context(_open_shard(path)) for path in sorted(set(files.values()))
        }

        def read(name: str, shape: tuple[int, ...]) -> np.ndarray:
            handle = handles[files[name]]
            found = tuple(handle.get_slice(name).get_shape())
            if found != shape:
                raise ConfigError(
                    f"{files[name]}: tensor {name} has shape {list(found)}, "
                    f"expected {list(shape)} from the spec."
                )
            return handle.get_tensor(name)

        for m in maps:
            m_dtype = np.dtype(m.dtype) if m.dtype else dtype
            if m.layered:
                value = np.empty(m.stacked_shape(spec.num_layers), m_dtype)
                for j in range(m.count(spec.num_layers)):
                    for index, name in m.layer_slots(j):
                        value[index] = m.to_jaxtrain(read(name, m.hf_shape)).astype(m_dtype)
            else:
                value = m.to_jaxtrain(read(m.hf_name, m.hf_shape)).astype(m_dtype)
            _set(params, m.path, value)
        if tied_head:
            head = read("lm_head.weight", (spec.vocab_size, spec.hidden_size))
            if not np.array_equal(head.astype(dtype), params["embed"]["embedding"]):
                raise ConfigError(
                    f"{files['lm_head.weight']}: lm_head.weight differs from "
                    "model.embed_tokens.weight but the config ties them "
                    "(tie_word_embeddings=true)."
                )
    return spec, params


def model_from_params(spec: ModelSpec, params: Params) -> Decoder:
    """A `Decoder` holding `params` (as jax arrays), without initialising weights first."""
    abstract = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(params=0)))
    graphdef, _ = nnx.split(abstract)
    return nnx.merge(graphdef, jax.tree_util.tree_map(jnp.asarray, params))


def load_hf_model(
    folder: str | pathlib.Path, spec: ModelSpec | None = None, **overrides: Any
) -> Decoder:
    """A `Decoder` with the weights of a Hugging Face checkpoint folder."""
    spec, params = load_hf_params(folder, spec, **overrides)
    return model_from_params(spec, params)


def _flatten(tree: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if isinstance(tree, Mapping):
        out: dict[tuple[str, ...], Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, (*prefix, str(key))))
        return out
    return {} if tree is None else {prefix: tree}


def _leaves(spec: ModelSpec, params: Any, maps: list[TensorMap]) -> dict[tuple[str, ...], Any]:
    """Path -> array, checked against the spec: every leaf present, no extra, right shapes."""
    if isinstance(params, nnx.Module):
        params = nnx.state(params, (nnx.Param, RouterBias))
    if isinstance(params, nnx.State):
        params = nnx.to_pure_dict(params)
    leaves = _flatten(params)
    wanted = {m.path: m.stacked_shape(spec.num_layers) for m in maps}
    dotted = lambda paths: ", ".join(".".join(p) for p in sorted(paths))
    if extra := set(leaves) - set(wanted):
        raise ConfigError(f"params have entries the spec has no tensor for: {dotted(extra)}.")
    if missing := set(wanted) - set(leaves):
        raise ConfigError(f"params lack entries the spec needs: {dotted(missing)}.")
    for path, shape in wanted.items():
        if tuple(leaves[path].shape) != shape:
            raise ConfigError(
                f"params {'.'.join(path)} has shape {list(leaves[path].shape)}, "
                f"expected {list(shape)} from the spec."
            )
    return leaves


def _host(x: Any) -> np.ndarray:
    """One array on this host; sharded arrays must be fully addressable (single process)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        raise ConfigError(
            "save_hf_checkpoint needs fully addressable arrays; in a multi-host "
            "run gather the parameters to one process first."
        )
    return np.asarray(jax.device_get(x))


def _clear_old_weights(out: pathlib.Path) -> None:
    """Removes weight files a previous save left, so no stale shard outlives a new index."""
    for path in out.iterdir():
        if path.name in (WEIGHTS_NAME, INDEX_NAME) or _SHARD_FILE.match(path.name):
            path.unlink()


def _readable_like_other_files(path: pathlib.Path) -> None:
    """safetensors writes through a private temporary file (mode 0600); give the weights the
    mode any other new file gets (0644 under the usual umask), so others can load the export."""
    os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)  # elsewhere: set and restore (briefly visible to other threads)
    os.umask(umask)
    return umask


def save_hf_checkpoint(
    spec: ModelSpec,
    params: Any,
    out_dir: str | pathlib.Path,
    tokenizer_dir: str | pathlib.Path | None = None,
    max_shard_bytes: int = 5 * 10**9,
    dtype: str | None = None,
    config_extra: Mapping[str, Any] | None = None,
    generation_config: Mapping[str, Any] | None = None,
) -> pathlib.Path:
    """Writes a transformers-loadable folder: config.json, safetensors weights, tokenizer.

    `params` is the pure dict of `nnx.to_pure_dict` (jax or numpy arrays, possibly sharded),
    an `nnx.State` or a `Decoder`. Weights are stored in `dtype` (default `spec.param_dtype`),
    split into `model-0000k-of-0000n.safetensors` shards plus an index past `max_shard_bytes`.
    Tokenizer files (and generation_config.json) are copied from `tokenizer_dir` when given.
    """
    maps = tensor_maps(spec)
    leaves = _leaves(spec, params, maps)
    dtype = dtype or spec.param_dtype
    stored = dataclasses.replace(spec, param_dtype=dtype)
    stored.validate()  # names an unknown dtype
    np_dtype = np.dtype(stored.jnp_param_dtype)
    config = hf_config_from_spec(spec, dtype=dtype, extra=config_extra)

    # Plan shards from shapes alone (layer by layer, like transformers), then read tensors.
    layered = [m for m in maps if m.layered]
    order = [(m, None, m.hf_name) for m in maps if not m.layered and m.path[0] == "embed"]
    # Layer by layer in checkpoint order, whichever stack holds the layer.
    order += [
        (m, index, name)
        for i in range(spec.num_layers)
        for m in layered
        if (slot := m.slot_of(i, spec.num_layers)) is not None
        for index, name in m.layer_slots(slot)
    ]
    order += [(m, None, m.hf_name) for m in maps if not m.layered and m.path[0] != "embed"]
    shards: list[list[tuple[TensorMap, tuple[int, ...] | None, str]]] = [[]]
    shard_bytes = 0
    shard_names: set[str] = set()
    for m, index, name in order:
        size = math.prod(m.shape) * np_dtype.itemsize
        # A tensor's later parts (or rows) stay in the shard of its first.
        continues = (m.part is not None and m.part[0] > 0) or name in shard_names
        if shards[-1] and shard_bytes + size > max_shard_bytes and not continues:
            shards.append([])
            shard_bytes = 0
            shard_names = set()
        shards[-1].append((m, index, name))
        shard_names.add(name)
        shard_bytes += size

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _clear_old_weights(out)
    weight_map: dict[str, str] = {}
    total = 0
    for s, shard in enumerate(shards):
        file = (
            WEIGHTS_NAME
            if len(shards) == 1
            else f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        )
        tensors: dict[str, np.ndarray] = {}
        for m, index, name in shard:
            leaf = leaves[m.path]
            tensors[name] = m.to_hf(
                _host(leaf if index is None else leaf[index]).astype(
                    np.dtype(m.dtype) if m.dtype else np_dtype
                ),
                tensors.get(name),
            )
            weight_map[name] = file
        total += sum(t.nbytes for t in tensors.values())
        save_file(tensors, str(out / file), metadata={"format": "pt"})
        _readable_like_other_files(out / file)
    if len(shards) > 1:
        with open(out / INDEX_NAME, "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(out / "config.json", "w") as f:
        json.dump(config, f, indent=2)
    if tokenizer_dir is not None:
        _copy_tokenizer(pathlib.Path(tokenizer_dir), out)
    if generation_config is not None:
        with open(out / "generation_config.json", "w") as f:
            json.dump(dict(generation_config), f, indent=2)
    return out


def _copy_tokenizer(src: pathlib.Path, out: pathlib.Path) -> None:
    """Copies the tokenizer files `src` has; ConfigError when it has none."""
    found = [src / name for name in TOKENIZER_FILES if (src / name).is_file()]
    if not found:
        raise ConfigError(f"tokenizer_dir {src} has none of {', '.join(TOKENIZER_FILES)}.")
    for path in found:
        if path.resolve() != (out / path.name).resolve():
            shutil.copyfile(path, out / path.name)
