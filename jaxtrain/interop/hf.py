"""Hugging Face safetensors checkpoints <-> jaxtrain parameter trees.

jaxtrain stacks every block parameter over a leading `layers` dimension and keeps head structure
in its kernels (q: [layers, D, N, H]); Hugging Face stores one `nn.Linear` weight [out, in] per
layer. Both use the same half-split RoPE layout, so converting is only reshapes and transposes.
Tensors are read and written one at a time, so peak host memory is one stacked parameter plus
one checkpoint shard. Shape letters: D embed, N heads, K kv heads, H head dim, F mlp, V vocab,
E experts. Mixture-of-experts weights are stacked over experts too ([layers, E, D, F]) where
checkpoints keep one tensor per layer and expert. DeepSeek's leading dense blocks form a stack
of their own (`dense_layers`), so a jaxtrain stack covers a range of checkpoint layers; its
latent attention (MLA) shape letters: C q latent, R kv latent, P rotary dims, Q query/key head
width, V' value head width. Its interleaved rotary pairs are rotated as stored, so no
projection is permuted.
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
from safetensors import safe_open
from safetensors.numpy import save_file

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config
from jaxtrain.interop.hf_layout import check_expert_layout, is_extra_layer
from jaxtrain.interop.hf_ssm import SSM_FAMILIES, ssm_tensor_rows
from jaxtrain.models.decoder import Decoder
from jaxtrain.models.layer_pattern import stack_layer_indices
from jaxtrain.models.moe import RouterBias
from jaxtrain.models.spec import ModelSpec

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
# Buffers some old checkpoints carry that are recomputed from the config, not learned.
_IGNORED = re.compile(r".*rotary_emb\.inv_freq$")
_TIE_HINT = " (tied embeddings need tie_word_embeddings=true in config.json)"
_SHARD_FILE = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """One parameter: its path in the jaxtrain tree and its Hugging Face tensor.

    `hf_name` holds `{i}` for per-layer tensors (stacked over layers in jaxtrain), and `{e}`
    for per-expert ones (`experts` of them, stacked after layers). `shape` is the jaxtrain
    shape of one layer's (and expert's) slice; kernels (`in_rank` set) are stored by HF as
    [prod(out), prod(in)] where jaxtrain has [*in, *out] with `in_rank` input dimensions.
    A stacked parameter's slot j holds checkpoint layer `layer_ids[j]` (empty: every layer, in
    order). `dtype` pins the stored dtype (the float32 expert bias). `part` = (index, parts,
    interleaved) makes the parameter one of `parts` pieces of the HF tensor's last axis
    (`hf_shape` is the whole tensor): columns index, index + parts, ... when interleaved
    (gpt-oss's gate/up), else the index-th contiguous block (Llama 4's gate/up).
    """

    path: tuple[str, ...]
    hf_name: str
    shape: tuple[int, ...]
    hf_shape: tuple[int, ...]
    in_rank: int | None = None
    experts: int = 0
    layer_ids: tuple[int, ...] = ()
    dtype: str | None = None
    part: tuple[int, int, bool] | None = None

    @property
    def layered(self) -> bool:
        """Whether the parameter is stacked over layers (one HF tensor per layer)."""
        return "{i}" in self.hf_name

    def count(self, num_layers: int) -> int:
        """How many layers the stacked parameter holds."""
        return len(self.layer_ids) or num_layers

    def slot_of(self, i: int, num_layers: int) -> int | None:
        """The stack slot holding checkpoint layer i (None when this stack lacks it)."""
        if not self.layer_ids:
            return i if i < num_layers else None
        return self.layer_ids.index(i) if i in self.layer_ids else None

    def names(self, num_layers: int) -> list[str]:
        """Every HF tensor name this parameter covers."""
        if not self.layered:
            return [self.hf_name]
        return [name for j in range(self.count(num_layers)) for _, name in self.layer_slots(j)]

    def layer_slots(self, j: int) -> list[tuple[tuple[int, ...], str]]:
        """(index into the stacked parameter, HF tensor name) of every tensor of stack slot j
        (checkpoint layer `layer_ids[j]`)."""
        i = self.layer_ids[j] if self.layer_ids else j
        if not self.experts:
            return [((j,), self.hf_name.format(i=i))]
        return [((j, e), self.hf_name.format(i=i, e=e)) for e in range(self.experts)]

    def stacked_shape(self, num_layers: int) -> tuple[int, ...]:
        """The jaxtrain shape of the whole parameter."""
        if not self.layered:
            return self.shape
        return (self.count(num_layers), *((self.experts,) if self.experts else ()), *self.shape)

    def _columns(self) -> slice:
        index, parts, interleaved = self.part
        if interleaved:
            return slice(index, None, parts)
        width = self.hf_shape[-1] // parts
        return slice(index * width, (index + 1) * width)

    def to_jaxtrain(self, x: np.ndarray) -> np.ndarray:
        """One HF tensor -> one jaxtrain (per-layer) slice."""
        if self.part is not None:
            x = x[..., self._columns()]
        return (x if self.in_rank is None else x.T).reshape(self.shape)

    def to_hf(self, x: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        """One jaxtrain (per-layer) slice -> one contiguous HF tensor; a `part` is written into
        `into` (the tensor its other parts fill, allocated when None)."""
        if self.part is not None:
            into = np.empty(self.hf_shape, x.dtype) if into is None else into
            into[..., self._columns()] = x.reshape(*self.hf_shape[:-1], -1)
            return into
        if self.in_rank is None:
            return np.ascontiguousarray(x.reshape(self.hf_shape))
        return np.ascontiguousarray(x.reshape(math.prod(self.shape[: self.in_rank]), -1).T)


def _kernel(
    path: tuple[str, ...], name: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...]
) -> TensorMap:
    return TensorMap(
        path,
        name,
        (*in_shape, *out_shape),
        (math.prod(out_shape), math.prod(in_shape)),
        len(in_shape),
    )


def _vector(path: tuple[str, ...], name: str, shape: tuple[int, ...]) -> TensorMap:
    return TensorMap(path, name, shape, (math.prod(shape),))


def tensor_maps(spec: ModelSpec) -> list[TensorMap]:
    """The parameter <-> tensor table for a spec, in Hugging Face checkpoint order."""
    if spec.family in SSM_FAMILIES:  # Mamba, Mamba-2, Nemotron-H: see hf_ssm
        return [
            TensorMap(path, name, shape, hf_shape, in_rank, layer_ids=ids, **extra)
            for path, name, shape, hf_shape, in_rank, ids, extra in ssm_tensor_rows(spec)
        ]
    d, v = spec.hidden_size, spec.vocab_size
    maps = [TensorMap(("embed", "embedding"), "model.embed_tokens.weight", (v, d), (v, d))]
    stacks = stack_layer_indices(spec)
    if "dense_layers" in stacks:
        maps += [
            dataclasses.replace(
                m, path=("dense_layers", *m.path[1:]), layer_ids=tuple(stacks["dense_layers"])
            )
            for m in _block_maps(spec, dense=True)
        ]
        maps += [
            dataclasses.replace(m, layer_ids=tuple(stacks["layers"]))
            for m in _block_maps(spec, dense=False)
        ]
    else:
        maps += _block_maps(spec, dense=not spec.num_experts)
    maps.append(_vector(("final_norm", "scale"), "model.norm.weight", (d,)))
    if not spec.tie_embeddings:
        maps.append(_kernel(("lm_head", "kernel"), "lm_head.weight", (d,), (v,)))
    return maps


def _block_maps(spec: ModelSpec, dense: bool) -> list[TensorMap]:
    """The tensors of one kind of block (paths under `layers`), in checkpoint order."""
    d, f = spec.hidden_size, spec.intermediate_size
    lay = "model.layers.{i}."
    maps = _mla_maps(spec, lay) if spec.mla else _attention_maps(spec, lay)
    if not dense:
        maps += (
            fused_expert_maps(spec, lay)
            if spec.family in FUSED_EXPERTS
            else (_expert_maps(spec, lay))
        )
    else:
        mlp = "feed_forward" if spec.family == "llama4" else "mlp"
        for proj, ins, outs in (("gate", d, f), ("up", d, f), ("down", f, d)):
            maps.append(
                _kernel(
                    ("layers", "mlp", f"{proj}_proj", "kernel"),
                    f"{lay}{mlp}.{proj}_proj.weight",
                    (ins,),
                    (outs,),
                )
            )
            if spec.mlp_bias:
                maps.append(
                    _vector(
                        ("layers", "mlp", f"{proj}_proj", "bias"),
                        f"{lay}{mlp}.{proj}_proj.bias",
                        (outs,),
                    )
                )
    maps.append(_vector(("layers", "input_norm", "scale"), f"{lay}input_layernorm.weight", (d,)))
    maps.append(
        _vector(
            ("layers", "post_attn_norm", "scale"), f"{lay}post_attention_layernorm.weight", (d,)
        )
    )
    return maps


def _attention_maps(spec: ModelSpec, lay: str) -> list[TensorMap]:
    """Grouped-query attention: q/k/v/o projections, optional biases and qk-norm weights."""
    d, n, k, h = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim
    maps = []
    for proj, heads in (("q", n), ("k", k), ("v", k)):
        path = ("layers", "attn", f"{proj}_proj")
        maps.append(
            _kernel((*path, "kernel"), f"{lay}self_attn.{proj}_proj.weight", (d,), (heads, h))
        )
        if spec.qkv_bias:
            maps.append(_vector((*path, "bias"), f"{lay}self_attn.{proj}_proj.bias", (heads, h)))
    maps.append(
        _kernel(
            ("layers", "attn", "o_proj", "kernel"), f"{lay}self_attn.o_proj.weight", (n, h), (d,)
        )
    )
    if spec.o_bias:
        maps.append(
            _vector(("layers", "attn", "o_proj", "bias"), f"{lay}self_attn.o_proj.bias", (d,))
        )
    if spec.attention_sinks:
        maps.append(_vector(("layers", "attn", "sinks"), f"{lay}self_attn.sinks", (n,)))
    if spec.qk_norm:
        for norm in ("q_norm", "k_norm"):
            maps.append(
                _vector(("layers", "attn", norm, "scale"), f"{lay}self_attn.{norm}.weight", (h,))
            )
    return maps


def _mla_maps(spec: ModelSpec, lay: str) -> list[TensorMap]:
    """Multi-head latent attention, named as DeepSeek's checkpoints name it."""
    d, n, c, r = spec.hidden_size, spec.num_heads, spec.q_lora_rank, spec.kv_lora_rank
    q = spec.qk_nope_head_dim + spec.qk_rope_head_dim
    attn, hf = ("layers", "attn"), f"{lay}self_attn."
    if c:
        maps = [
            _kernel((*attn, "q_a_proj", "kernel"), f"{hf}q_a_proj.weight", (d,), (c,)),
            _vector((*attn, "q_a_norm", "scale"), f"{hf}q_a_layernorm.weight", (c,)),
            _kernel((*attn, "q_b_proj", "kernel"), f"{hf}q_b_proj.weight", (c,), (n, q)),
        ]
    else:
        maps = [_kernel((*attn, "q_proj", "kernel"), f"{hf}q_proj.weight", (d,), (n, q))]
    return maps + [
        _kernel(
            (*attn, "kv_a_proj", "kernel"),
            f"{hf}kv_a_proj_with_mqa.weight",
            (d,),
            (r + spec.qk_rope_head_dim,),
        ),
        _vector((*attn, "kv_a_norm", "scale"), f"{hf}kv_a_layernorm.weight", (r,)),
        _kernel(
            (*attn, "kv_b_proj", "kernel"),
            f"{hf}kv_b_proj.weight",
            (r,),
            (n, spec.qk_nope_head_dim + spec.v_head_dim),
        ),
        _kernel((*attn, "o_proj", "kernel"), f"{hf}o_proj.weight", (n, spec.v_head_dim), (d,)),
    ]


# Per-expert tensor names: (router, expert prefix, gate, up, down) of each MoE family.
_EXPERT_NAMES = {
    "mixtral": ("block_sparse_moe.gate.weight", "block_sparse_moe.experts.{e}.", "w1", "w3", "w2"),
    "qwen3_moe": ("mlp.gate.weight", "mlp.experts.{e}.", "gate_proj", "up_proj", "down_proj"),
    "deepseek_v2": ("mlp.gate.weight", "mlp.experts.{e}.", "gate_proj", "up_proj", "down_proj"),
    "deepseek_v3": ("mlp.gate.weight", "mlp.experts.{e}.", "gate_proj", "up_proj", "down_proj"),
}


def _expert_maps(spec: ModelSpec, lay: str) -> list[TensorMap]:
    """Router and expert tensors; the checkpoint layout (one tensor per expert) is the one
    transformers' `save_pretrained` writes and published Mixtral / Qwen3-MoE files use."""
    if spec.family not in _EXPERT_NAMES:
        raise ConfigError(
            f"model.family={spec.family!r} has no mixture-of-experts checkpoint "
            f"layout; use one of {sorted(_EXPERT_NAMES)} with model.num_experts."
        )
    d, e, f = spec.hidden_size, spec.num_experts, spec.moe_intermediate_size
    router, prefix, gate, up, down = _EXPERT_NAMES[spec.family]
    maps = [_kernel(("layers", "mlp", "router", "kernel"), f"{lay}{router}", (d,), (e,))]
    for path, name, ins, outs in (
        ("gate_proj", gate, d, f),
        ("up_proj", up, d, f),
        ("down_proj", down, f, d),
    ):
        maps.append(
            dataclasses.replace(
                _kernel(("layers", "mlp", path), f"{lay}{prefix}{name}.weight", (ins,), (outs,)),
                experts=e,
            )
        )
    if spec.moe_shared_experts:
        fs = spec.moe_shared_experts * f
        for proj, ins, outs in (("gate", d, fs), ("up", d, fs), ("down", fs, d)):
            maps.append(
                _kernel(
                    ("layers", "mlp", "shared", f"{proj}_proj", "kernel"),
                    f"{lay}mlp.shared_experts.{proj}_proj.weight",
                    (ins,),
                    (outs,),
                )
            )
    if spec.moe_score_bias:
        maps.append(
            dataclasses.replace(
                _vector(
                    ("layers", "mlp", "score_bias"), f"{lay}mlp.gate.e_score_correction_bias", (e,)
                ),
                dtype="float32",
            )
        )
    return maps


# Families whose checkpoints fuse every layer's experts into [E, ...] tensors, with gate and up
# side by side: (module prefix, gate/up interleaved column by column).
FUSED_EXPERTS = {"gpt_oss": ("mlp", True), "llama4": ("feed_forward", False)}


def fused_expert_maps(spec: ModelSpec, lay: str) -> list[TensorMap]:
    """Router and expert tensors of gpt-oss and Llama 4: `experts.gate_up_proj` [E, D, 2F]
    (gate and up as `part`s), `experts.down_proj` [E, F, D] (stored [in, out], unlike
    nn.Linear), gpt-oss's biases and Llama 4's shared expert."""
    d, e, f = spec.hidden_size, spec.num_experts, spec.moe_intermediate_size
    mlp, interleaved = FUSED_EXPERTS[spec.family]
    hf, path = f"{lay}{mlp}.", ("layers", "mlp")
    maps = [_kernel((*path, "router", "kernel"), f"{hf}router.weight", (d,), (e,))]
    if spec.moe_router_bias:
        maps.append(_vector((*path, "router", "bias"), f"{hf}router.bias", (e,)))
    for index, name in enumerate(("gate", "up")):
        maps.append(
            TensorMap(
                (*path, f"{name}_proj"),
                f"{hf}experts.gate_up_proj",
                (e, d, f),
                (e, d, 2 * f),
                part=(index, 2, interleaved),
            )
        )
        if spec.moe_expert_bias:
            maps.append(
                TensorMap(
                    (*path, f"{name}_bias"),
                    f"{hf}experts.gate_up_proj_bias",
                    (e, f),
                    (e, 2 * f),
                    part=(index, 2, interleaved),
                )
            )
    maps.append(TensorMap((*path, "down_proj"), f"{hf}experts.down_proj", (e, f, d), (e, f, d)))
    if spec.moe_expert_bias:
        maps.append(TensorMap((*path, "down_bias"), f"{hf}experts.down_proj_bias", (e, d), (e, d)))
    if spec.moe_shared_experts:
        fs = spec.moe_shared_experts * f
        for proj, ins, outs in (("gate", d, fs), ("up", d, fs), ("down", fs, d)):
            maps.append(
                _kernel(
                    (*path, "shared", f"{proj}_proj", "kernel"),
                    f"{hf}shared_expert.{proj}_proj.weight",
                    (ins,),
                    (outs,),
                )
            )
    return maps


def _checkpoint_index(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """Tensor name -> safetensors file, from the index json or the single weights file."""
    index = folder / INDEX_NAME
    if index.is_file():
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = {name: folder / file for name, file in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.is_file():
                raise ConfigError(f"{index} lists shard {path.name}, which does not exist.")
        return files
    single = folder / WEIGHTS_NAME
    if single.is_file():
        with safe_open(single, framework="numpy") as f:
            return {name: single for name in f.keys()}
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    raise ConfigError(
        f"{folder} has neither {WEIGHTS_NAME} nor {INDEX_NAME} (found: "
        f"{present or 'nothing'}); only safetensors checkpoints are read."
    )


def _shape(path: pathlib.Path, name: str) -> tuple[int, ...]:
    """A stored tensor's shape, read from its file header."""
    with safe_open(path, framework="numpy") as f:
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
            path: stack.enter_context(safe_open(path, framework="numpy"))
            for path in sorted(set(files.values()))
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
    for m, index, name in order:
        size = math.prod(m.shape) * np_dtype.itemsize
        # A tensor's later parts stay in the shard of its first.
        continues = m.part is not None and m.part[0] > 0
        if shards[-1] and shard_bytes + size > max_shard_bytes and not continues:
            shards.append([])
            shard_bytes = 0
        shards[-1].append((m, index, name))
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
