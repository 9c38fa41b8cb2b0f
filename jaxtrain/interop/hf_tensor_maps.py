"""Where each jaxtrain parameter lives in a Hugging Face checkpoint: one `TensorMap` per
tensor, with the reshapes and transposes between the two layouts.

jaxtrain stacks every block parameter over a leading `layers` dimension and keeps head structure
in its kernels (q: [layers, D, N, H]); Hugging Face stores one `nn.Linear` weight [out, in] per
layer. Shape letters: D embed, N heads, K kv heads, H head dim, F mlp, V vocab, E experts; for
latent attention (MLA): C q latent, R kv latent, P rotary dims, Q query/key head width, V' value
head width. `jaxtrain.interop.hf` reads and writes checkpoints through these maps.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_gpt2 import gpt2_tensor_rows
from jaxtrain.interop.hf_qwen3_next import QWEN3_NEXT_FAMILIES, qwen3_next_tensor_rows
from jaxtrain.interop.hf_ssm import SSM_FAMILIES, ssm_tensor_rows
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import stack_layer_indices


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
    (gpt-oss's gate/up), else the index-th contiguous block (Llama 4's gate/up). `rows` makes
    it those rows (first axis) of the HF tensor, in that order (Qwen3-Next's fused projections,
    which interleave q, k, v and the gate per key head).
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
    rows: tuple[int, ...] | None = None

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
        if self.rows is not None:
            x = x[np.asarray(self.rows)]
        return (x if self.in_rank is None else x.T).reshape(self.shape)

    def to_hf(self, x: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        """One jaxtrain (per-layer) slice -> one contiguous HF tensor; a `part` is written into
        `into` (the tensor its other parts fill, allocated when None)."""
        if self.part is not None:
            into = np.empty(self.hf_shape, x.dtype) if into is None else into
            into[..., self._columns()] = x.reshape(*self.hf_shape[:-1], -1)
            return into
        if self.rows is not None:
            into = np.empty(self.hf_shape, x.dtype) if into is None else into
            whole = dataclasses.replace(self, rows=None, hf_shape=(len(self.rows), *into.shape[1:]))
            into[np.asarray(self.rows)] = whole.to_hf(x)
            return into
        if self.in_rank is None:
            return np.ascontiguousarray(x.reshape(self.hf_shape))
        kernel = x.reshape(math.prod(self.shape[: self.in_rank]), -1).T
        return np.ascontiguousarray(kernel.reshape(self.hf_shape))  # a conv keeps its [C, 1, W]


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
    if spec.family in QWEN3_NEXT_FAMILIES:  # Qwen3-Next, Qwen3.5: see hf_qwen3_next
        return [
            TensorMap(path, name, shape, hf_shape, in_rank, layer_ids=ids, **extra)
            for path, name, shape, hf_shape, in_rank, ids, extra in qwen3_next_tensor_rows(spec)
        ]
    if spec.family == "gpt3":  # GPT-2's layout: see hf_gpt2
        return [
            TensorMap(path, name, shape, hf_shape, in_rank, **extra)
            for path, name, shape, hf_shape, in_rank, extra in gpt2_tensor_rows(spec)
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
    # Gemma 2 / 3 name the norm of the attention output post_attention_layernorm, and the
    # one before the MLP (jaxtrain's post_attn_norm) pre_feedforward_layernorm; OLMo has the
    # output norms alone.
    if not spec.pre_norms:
        norms = (
            ("attn_out_norm", "post_attention_layernorm"),
            ("mlp_out_norm", "post_feedforward_layernorm"),
        )
    elif spec.post_norms:
        norms = (
            ("input_norm", "input_layernorm"),
            ("attn_out_norm", "post_attention_layernorm"),
            ("post_attn_norm", "pre_feedforward_layernorm"),
            ("mlp_out_norm", "post_feedforward_layernorm"),
        )
    else:
        norms = (("input_norm", "input_layernorm"), ("post_attn_norm", "post_attention_layernorm"))
    for ours, theirs in norms:
        maps.append(_vector(("layers", ours, "scale"), f"{lay}{theirs}.weight", (d,)))
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
    if spec.qk_norm:  # per head, or across heads (OLMo: one weight per head and dim)
        for norm, heads in (("q_norm", n), ("k_norm", k)):
            shape = (heads, h) if spec.qk_norm_across_heads else (h,)
            maps.append(
                _vector(("layers", "attn", norm, "scale"), f"{lay}self_attn.{norm}.weight", shape)
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
