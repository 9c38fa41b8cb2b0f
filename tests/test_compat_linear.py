"""Primus' Zebra-Llama experiments: their linear_* settings map to jaxtrain's delta-rule mixers
(with FLA's defaults for what they leave out, Megatron's for unset sizes), and every file
resolves to a `zebra_llama` hybrid with Primus' block layout and the size its comments state."""

import dataclasses

import jax
import pytest
from flax import nnx

from jaxtrain import compat
from jaxtrain.compat.megatron.linear_attention import (
    mixer_kind,
    mixer_settings,
    primus_allocate_layers,
)
from jaxtrain.compat.primus import experiment as primus_yaml
from jaxtrain.errors import ConfigError
from jaxtrain.models import build_model
from jaxtrain.models.mixers import gated_delta, kda
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.models.spec import delta_sizes
from jaxtrain.models.spec.hyperparameters import ModelSpec

MI300X = "Primus/examples/megatron/configs/MI300X/{}-pretrain.yaml"
LLAMA3_VOCAB = 128256  # meta-llama/Llama-3.2-1B's tokenizer, which every Zebra-Llama file names


def _report(samples, name):
    exp = primus_yaml.load_experiment(samples / MI300X.format(name), env={})
    return primus_yaml.experiment_report(exp, "megatron", env={})


@pytest.mark.parametrize(
    "name, kind, expected",
    [
        (
            "zebra_llama_300M_gdn_pure",
            "gdn",
            dict(
                linear_num_key_heads=4,
                linear_num_value_heads=8,
                linear_key_head_dim=64,
                linear_value_head_dim=64,
                linear_conv_kernel=4,
                linear_short_conv=True,
                linear_output_gate=True,
            ),
        ),
        (
            "zebra_llama_300M_gdn_hybrid",
            "gdn",
            dict(
                linear_num_key_heads=4,
                linear_num_value_heads=8,
                linear_key_head_dim=64,
                linear_value_head_dim=64,
                linear_conv_kernel=4,
                linear_short_conv=True,
                linear_output_gate=True,
            ),
        ),
        (
            "zebra_llama_1B_gdn_pure",
            "gdn",
            dict(
                linear_num_key_heads=8,
                linear_num_value_heads=16,
                linear_key_head_dim=64,
                linear_value_head_dim=64,
                linear_conv_kernel=4,
                linear_short_conv=True,
                linear_output_gate=True,
            ),
        ),
        # KDA: keys 32 wide, values 64 (FLA expand_v=2); use_short_conv unset: FLA's default, on.
        (
            "zebra_llama_300M_kda_pure",
            "kda",
            dict(
                linear_num_key_heads=8,
                linear_num_value_heads=8,
                linear_key_head_dim=32,
                linear_value_head_dim=64,
                linear_conv_kernel=4,
                linear_short_conv=True,
                linear_gate_bias=True,
            ),
        ),
        (
            "zebra_llama_1B_kda_pure",
            "kda",
            dict(
                linear_num_key_heads=16,
                linear_num_value_heads=16,
                linear_key_head_dim=32,
                linear_value_head_dim=64,
                linear_conv_kernel=4,
                linear_short_conv=True,
                linear_gate_bias=True,
            ),
        ),
    ],
)
def test_linear_settings_map_to_the_mixer(compat_samples, name, kind, expected):
    r = _report(compat_samples, name)
    assert mixer_kind(r) == kind
    assert mixer_settings(r) == expected
    assert r.handled("linear_num_value_heads") and r.handled("linear_conv_kernel_dim")
    spec = ModelSpec(hidden_size=int(r.get("hidden_size")), **expected)
    spec.validate()
    module = gated_delta.GatedDeltaNet if kind == "gdn" else kda.KimiDeltaAttention
    abstract = nnx.eval_shape(lambda: module(spec, rngs=nnx.Rngs(params=0)))
    count = sum(v.size for v in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
    assert count == (delta_sizes.gdn_params if kind == "gdn" else delta_sizes.kda_params)(spec)


def test_pure_gdn_1b_has_the_size_its_file_states(compat_samples):
    # "~1.20B params (tied embeddings); 16 GDN blocks + 16 MLP blocks = 32 Megatron sublayers"
    r = _report(compat_samples, "zebra_llama_1B_gdn_pure")
    d, ffn = int(r.get("hidden_size")), int(r.get("ffn_hidden_size"))
    spec = dataclasses.replace(ModelSpec(hidden_size=d), **mixer_settings(r))
    blocks = int(r.get("num_layers")) // 2
    total = blocks * (delta_sizes.gdn_params(spec) + 3 * d * ffn + 2 * d) + LLAMA3_VOCAB * d + d
    assert abs(total / 1.20e9 - 1) < 0.01, total


def test_mamba_hybrids_have_no_delta_rule_settings(compat_samples):
    r = _report(compat_samples, "zebra_llama_300M_gdn_hybrid")
    r.values["spec"] = ["hybrid_mamba_mla_layer_specs", "mamba_hybrid_stack_spec_no_te"]
    assert mixer_kind(r) == "mamba" and mixer_settings(r) == {}


def test_kda_without_sizes_takes_megatron_defaults(compat_samples):
    # zebra_llama_1B_kda-pretrain pairs the KDA layer spec with the Mamba preset
    # zebra_llama_1B.yaml, which sets no linear_* size: Primus' KDA layer then reads Megatron's
    # TransformerConfig defaults.
    r = _report(compat_samples, "zebra_llama_1B_kda")
    assert mixer_settings(r) == dict(
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel=4,
        linear_short_conv=True,
        linear_gate_bias=True,
    )
    assert any("TransformerConfig defaults" in line for line in r.notes)


def test_primus_allocation():
    # Primus' HybridStack: (mixer, MLP) pairs, int(pairs x ratio) attention pairs leading evenly
    # spaced groups; the 300M files' explicit pattern is the same layout.
    assert primus_allocate_layers(24, 0.25) == "*-M-M-M-" * 3
    assert primus_allocate_layers(56, 0.25) == "*-M-M-M-" * 7
    assert primus_allocate_layers(32, 0.0) == "M-" * 16
    assert primus_allocate_layers(20, 0.2) == "*-M-M-M-M-" * 2
    assert primus_allocate_layers(12, 0.7) == "*-" * 2 + "*-M-" * 2


MLA_300M = (
    1024 * 672
    + 672
    + 672 * 16 * 64  # q down, latent norm, up
    + 1024 * (64 + 32)
    + 64
    + 64 * 16 * (32 + 64)  # kv down (+ rope key), latent norm, up
    + 16 * 64 * 1024  # output
)


def _gdn_300m() -> int:
    # FLA GatedDeltaNet(hidden 1024, num_heads 4, num_v_heads 8, head_dim 64, expand_v 1).
    k, v = 4 * 64, 8 * 64
    # q, k; v, output gate, output; a, b; convs; A_log, dt_bias; the gated norm.
    return 1024 * (2 * k + 3 * v + 2 * 8) + 4 * (2 * k + v) + 2 * 8 + 64


def _kda_300m() -> int:
    # FLA KimiDeltaAttention(hidden 1024, num_heads 8, head_dim 32, expand_v 2): R = V = 64.
    k, v = 8 * 32, 8 * 64
    gates = (1024 * 64 + 64 * k) + (1024 * 64 + 64 * v + v) + 1024 * 8
    return 1024 * (2 * k + v) + 4 * (2 * k + v) + gates + 8 + k + 64 + v * 1024


SWIGLU_300M = 3 * 1024 * 4096
EMBED_300M = LLAMA3_VOCAB * 1024


@pytest.mark.parametrize(
    "name, pattern, expected, stated, rel",
    [
        # "~1.20B params (tied embeddings)": 16 GDN + 16 SwiGLU sublayers.
        ("zebra_llama_1B_gdn_pure", "G-" * 16, None, 1.20e9, 0.01),
        # "~300M params": 12 (mixer, MLP) pairs of width 1024; 300M is the size's round name.
        (
            "zebra_llama_300M_gdn_pure",
            "G-" * 12,
            EMBED_300M + 12 * (_gdn_300m() + SWIGLU_300M + 2 * 1024) + 1024,
            300e6,
            0.03,
        ),
        (
            "zebra_llama_300M_kda_pure",
            "K-" * 12,
            EMBED_300M + 12 * (_kda_300m() + SWIGLU_300M + 2 * 1024) + 1024,
            300e6,
            0.02,
        ),
        # The file says "~338M (+38M vs pure 300M because of the 3 MLA blocks)"; three MLA
        # blocks in place of three GDN ones add 1.5M at these sizes (+38M is three SwiGLU
        # MLPs' worth), and Primus builds the 24 sublayers its pattern lists: 309M.
        (
            "zebra_llama_300M_gdn_hybrid",
            "*-G-G-G-" * 3,
            EMBED_300M
            + 3 * (MLA_300M + 1024)
            + 9 * (_gdn_300m() + 1024)
            + 12 * (SWIGLU_300M + 1024)
            + 1024,
            None,
            0,
        ),
        ("zebra_llama_300M_mamba_hybrid", "*-M-M-M-" * 3, None, None, 0),
        ("zebra_llama_1B_kda", "*-K-K-K-" * 4, None, None, 0),
        ("zebra_llama_1B", "*-M-M-M-" * 4, None, None, 0),
        ("zebra_llama_3B", "*-M-M-M-" * 7, None, None, 0),
        ("zebra_llama_8B", "*-M-M-M-" * 8, None, None, 0),
    ],
)
def test_zebra_llama_files_resolve_with_their_size(
    compat_samples, name, pattern, expected, stated, rel
):
    cfg, report = compat.load_foreign(compat_samples / MI300X.format(name), env={})
    spec = ModelSpec.from_config(cfg.model)
    assert (spec.family, spec.block_pattern) == ("zebra_llama", pattern)
    assert not report.by_status("unsupported")
    abstract = nnx.eval_shape(lambda: build_model(spec))
    assert spec.num_params() == sum(x.size for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
    if expected is not None:
        assert spec.num_params() == expected
    if stated is not None:
        assert spec.num_params() == pytest.approx(stated, rel=rel)


def test_zebra_llama_mamba_blocks_are_primus_expand_1(compat_samples):
    # Primus' hybrid_stack_spec builds MambaMixer(expand=1); the 300M Mamba hybrid sets 2.
    one = compat.load_foreign(compat_samples / MI300X.format("zebra_llama_1B"), env={})[0]
    assert (one.model.ssm_expand, one.model.use_rope, one.model.kv_lora_rank) == (1, True, 128)
    two = compat.load_foreign(
        compat_samples / MI300X.format("zebra_llama_300M_mamba_hybrid"), env={}
    )
    assert two[0].model.ssm_expand == 2


@pytest.mark.parametrize(
    "name, preset",
    [
        ("zebra_llama_1B_gdn_pure", "zebra-llama-1b-gdn"),
        ("zebra_llama_300M_kda_pure", "zebra-llama-300m-kda"),
        ("zebra_llama_300M_gdn_hybrid", "zebra-llama-300m-gdn-hybrid"),
    ],
)
def test_zebra_llama_presets_are_the_primus_files(compat_samples, name, preset):
    cfg, _ = compat.load_foreign(compat_samples / MI300X.format(name), env={})
    spec, expected = ModelSpec.from_config(cfg.model), model_spec(preset)
    assert spec.block_pattern == expected.block_pattern
    assert spec.num_params() == expected.num_params()
    assert spec.flops_per_token(2048) == pytest.approx(expected.flops_per_token(2048))


def test_delta_rule_spec_outside_primus_hybrids_is_refused_by_name(compat_samples):
    # Only Primus' HybridStack layout (mixer, MLP pairs) is known for GDN / KDA layer specs.
    from jaxtrain.compat.megatron.mamba import map_mamba

    r = _report(compat_samples, "zebra_llama_300M_gdn_pure")
    r.values["spec"] = ["my_project.layer_specs", "gdn_hybrid_stack_spec"]
    with pytest.raises(ConfigError, match="GDN blocks from a layer spec outside Primus'"):
        map_mamba(r, {"num_layers": 24})
