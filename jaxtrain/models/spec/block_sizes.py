"""Parameter counts of one block's parts: attention, routed and shared experts, feed-forward.

`ModelSpec.num_params` and `flops_per_token` add them up for transformer stacks, and
`block_pattern` for each sublayer kind of a hybrid stack. `spec` is any object with ModelSpec's
fields; this module imports none of the model modules, so `spec` and `block_pattern` can import it.
"""

from __future__ import annotations

from typing import Any


def attention_matmul_params(spec: Any) -> int:
    """One block's attention projection weights (what matmuls multiply by)."""
    d, h = spec.hidden_size, spec.num_heads
    if spec.mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        qr, kvr = spec.q_lora_rank, spec.kv_lora_rank
        q = d * qr + qr * h * qk if qr else d * h * qk
        kv = d * (kvr + spec.qk_rope_head_dim) + kvr * h * (spec.qk_nope_head_dim + spec.v_head_dim)
        return q + kv + h * spec.v_head_dim * d
    kv, hd = spec.num_kv_heads, spec.head_dim
    gate = d * h * hd if spec.attn_output_gate else 0  # Qwen3-Next's output gate
    return d * h * hd + 2 * d * kv * hd + h * hd * d + gate


def attention_params(spec: Any) -> int:
    """One block's attention parameters: projections plus biases, norm weights and sinks."""
    extra = 0
    if spec.mla:
        extra = spec.q_lora_rank + spec.kv_lora_rank  # the two latent RMSNorms
    if spec.qkv_bias:
        extra += (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim
    if spec.qk_norm:  # per head, or one weight per head and dim across heads (OLMo)
        across = spec.qk_norm_across_heads
        extra += (spec.num_heads + spec.num_kv_heads if across else 2) * spec.head_dim
    if spec.o_bias:
        extra += spec.hidden_size
    if spec.attention_sinks:
        extra += spec.num_heads
    return attention_matmul_params(spec) + extra


def norm_params(spec: Any) -> int:
    """One norm over the hidden size: a scale, and a bias for LayerNorms."""
    return spec.hidden_size * (2 if spec.norm_type == "layer" else 1)


def block_norm_params(spec: Any) -> int:
    """One transformer block's norms: before attention and MLP (`pre_norms`), after them
    (`post_norms`), or both."""
    return (2 * spec.pre_norms + 2 * spec.post_norms) * norm_params(spec)


def dense_mlp_params(spec: Any, with_biases: bool) -> int:
    """One dense MLP: gate, up and down (the ungated GELU: up and down), and their biases
    when counted."""
    d, f = spec.hidden_size, spec.intermediate_size
    weights = 2 if spec.mlp_activation == "gelu" else 3
    biases = (weights - 1) * f + d if with_biases and spec.mlp_bias else 0
    return weights * d * f + biases


def expert_weights(spec: Any) -> int:
    """Weight matrices per expert: two for ungated relu2 experts, three for gated ones."""
    return 2 if spec.moe_activation == "relu2" else 3


def expert_params(spec: Any, with_biases: bool) -> int:
    """One routed expert's weights (and its biases when counted)."""
    d, f = spec.hidden_size, spec.moe_intermediate_size
    biases = 2 * f + d if with_biases and spec.moe_expert_bias else 0
    return expert_weights(spec) * d * f + biases


def shared_expert_size(spec: Any) -> int:
    """The hidden size of the shared experts' one MLP (0 without shared experts)."""
    if not spec.moe_shared_experts:
        return 0
    return spec.moe_shared_intermediate_size or (
        spec.moe_shared_experts * spec.moe_intermediate_size
    )


def shared_params(spec: Any) -> int:
    """The shared experts' weights (gated or relu2 like the routed ones), and their output
    gate's one row when they have one."""
    gate = spec.hidden_size if spec.moe_shared_gate else 0
    return expert_weights(spec) * spec.hidden_size * shared_expert_size(spec) + gate


def expert_block_params(spec: Any, experts: int, with_biases: bool = True) -> int:
    """One expert block's parameters with `experts` of its routed experts counted: those
    experts, the shared experts (and Grok-2's dense MLP beside them) and the router."""
    d = spec.hidden_size
    routed = experts * expert_params(spec, with_biases)
    shared = shared_params(spec)
    if spec.moe_residual_mlp:
        shared += 3 * d * spec.intermediate_size
    router = d * spec.num_experts
    if with_biases and spec.moe_router_bias:
        router += spec.num_experts
    return routed + shared + router


def ffn_params(spec: Any, experts: int, with_biases: bool = True) -> int:
    """Feed-forward parameters of all blocks, with `experts` routed experts counted in each
    expert block (its router and shared experts included); biases only when asked (FLOPs
    count matmul weights)."""
    dense = (spec.num_layers - spec.num_moe_layers) * dense_mlp_params(spec, with_biases)
    if not spec.num_experts:
        return dense
    return dense + spec.num_moe_layers * expert_block_params(spec, experts, with_biases)
