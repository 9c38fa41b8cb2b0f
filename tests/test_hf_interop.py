"""Hugging Face config and checkpoint handling without torch: config round trips, both rope
layouts, sharded and bf16 checkpoints, and the errors bad input must give."""

from __future__ import annotations

import dataclasses
import json

import jax
import ml_dtypes
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from jaxtrain.cli import main
from jaxtrain.commands.options import parse_size
from jaxtrain.interop import hf_config
from jaxtrain.interop.hf import (
    INDEX_NAME,
    WEIGHTS_NAME,
    load_hf_params,
    save_hf_checkpoint,
)
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config
from jaxtrain.interop.hf_tensor_maps import tensor_maps
from jaxtrain.models import ConfigError, Decoder, ModelSpec

_TINY = dict(
    vocab_size=96,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=48,
    max_seq_len=128,
    norm_eps=1e-6,
)
SPECS = {
    "llama": ModelSpec(family="llama", **_TINY),
    "llama3": ModelSpec(
        family="llama",
        rope_theta=500000.0,
        rope_scaling="llama3",
        rope_factor=8.0,
        rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0,
        rope_original_max_len=64,
        **_TINY,
    ),
    "llama-linear-tied": ModelSpec(
        family="llama", rope_scaling="linear", rope_factor=4.0, tie_embeddings=True, **_TINY
    ),
    "qwen2": ModelSpec(family="qwen2", qkv_bias=True, rope_theta=1e6, **_TINY),
    "qwen2-window": ModelSpec(family="qwen2", qkv_bias=True, sliding_window=16, **_TINY),
    "qwen3": ModelSpec(
        family="qwen3", qk_norm=True, tie_embeddings=True, **{**_TINY, "head_dim": 16}
    ),
    "mistral": ModelSpec(family="mistral", sliding_window=32, **_TINY),
    "mistral-nowindow": ModelSpec(family="mistral", **_TINY),
}
_LLAMA_CFG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
}


def _params(spec: ModelSpec, seed: int = 0) -> dict:
    """Random numpy weights in the decoder's tree layout."""
    abstract = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(params=0)))
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda x: rng.normal(size=x.shape).astype(np.float32),
        nnx.to_pure_dict(nnx.state(abstract, nnx.Param)),
    )


def _assert_trees_equal(a: dict, b: dict) -> None:
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_spec_config_round_trip(name, tmp_path):
    spec = SPECS[name]
    cfg = hf_config_from_spec(spec)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert spec_from_hf_config(tmp_path) == spec
    assert spec_from_hf_config(cfg) == spec


@pytest.mark.parametrize("name", ["llama3", "llama-linear-tied", "qwen2-window", "mistral"])
def test_transformers4_layout_round_trip(name, monkeypatch):
    """With transformers 4 installed, rope goes to top-level rope_theta + rope_scaling."""
    monkeypatch.setattr(hf_config, "_transformers_major", lambda: 4)
    spec = SPECS[name]
    cfg = hf_config_from_spec(spec)
    assert "rope_parameters" not in cfg and cfg["rope_theta"] == spec.rope_theta
    assert (cfg["rope_scaling"] is None) == (spec.rope_scaling == "none")
    assert spec_from_hf_config(cfg) == spec


@pytest.mark.parametrize("name", ["llama3", "qwen2-window", "qwen3", "mistral"])
def test_config_reads_in_transformers(name, tmp_path):
    transformers = pytest.importorskip("transformers")
    spec = SPECS[name]
    (tmp_path / "config.json").write_text(json.dumps(hf_config_from_spec(spec)))
    cfg = transformers.AutoConfig.from_pretrained(tmp_path)
    assert (
        type(cfg).__name__
        == {
            "llama": "LlamaConfig",
            "qwen2": "Qwen2Config",
            "qwen3": "Qwen3Config",
            "mistral": "MistralConfig",
        }[spec.family]
    )
    assert cfg.head_dim == spec.head_dim and cfg.num_key_value_heads == spec.num_kv_heads
    assert getattr(cfg, "sliding_window", None) == (spec.sliding_window or None)
    if spec.family.startswith("qwen"):
        want = "sliding_attention" if spec.sliding_window else "full_attention"
        assert cfg.layer_types == [want] * spec.num_layers
    # Whatever layout transformers keeps in memory, reading its own dump gives the same spec.
    assert spec_from_hf_config(cfg.to_dict()) == spec


def test_legacy_config_forms():
    """transformers-4 files: rope_theta at top level, rope_scaling with `type`, no head_dim or
    num_key_value_heads."""
    cfg = dict(_LLAMA_CFG, rope_theta=20000.0, rope_scaling={"type": "linear", "factor": 2.0})
    spec = spec_from_hf_config(cfg)
    assert (spec.head_dim, spec.num_kv_heads, spec.rope_theta) == (8, 4, 20000.0)
    assert (spec.rope_scaling, spec.rope_factor) == ("linear", 2.0)
    llama31 = dict(
        _LLAMA_CFG,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    new = dict(_LLAMA_CFG, rope_parameters={**llama31["rope_scaling"], "rope_theta": 500000.0})
    assert spec_from_hf_config(llama31) == spec_from_hf_config(new)
    assert spec_from_hf_config(new).rope_original_max_len == 64


def test_qwen_and_mistral_windows():
    qwen = dict(_LLAMA_CFG, architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    # Qwen2.5 releases: a window size is present but switched off.
    off = dict(qwen, use_sliding_window=False, sliding_window=32768, max_window_layers=28)
    assert spec_from_hf_config(off).sliding_window == 0
    on = dict(qwen, use_sliding_window=True, sliding_window=16, max_window_layers=0)
    assert spec_from_hf_config(on).sliding_window == 16
    # Layers below max_window_layers attend fully, the rest in the window.
    some = spec_from_hf_config(dict(on, max_window_layers=1))
    assert (some.sliding_window, some.leading_global_layers) == (16, 1)
    mistral = dict(_LLAMA_CFG, architectures=["MistralForCausalLM"], sliding_window=None)
    assert spec_from_hf_config(mistral).sliding_window == 0


def test_unsupported_architecture_names_file_and_choices(tmp_path):
    cfg = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embd": 32}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for call in (lambda: spec_from_hf_config(tmp_path), lambda: load_hf_params(tmp_path)):
        with pytest.raises(ConfigError) as err:
            call()
        message = str(err.value)
        assert "BloomForCausalLM" in message and str(tmp_path / "config.json") in message
        assert "LlamaForCausalLM" in message and "Qwen3ForCausalLM" in message


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope type 'yarn'"),
        (dict(mlp_bias=True, architectures=["Qwen2ForCausalLM"]), "only LlamaForCausalLM has MLP"),
        (dict(num_attention_heads=None), "'num_attention_heads' is missing"),
        (dict(num_key_value_heads=3), "not divisible"),
    ],
)
def test_unsupported_config_values(change, match):
    with pytest.raises(ConfigError, match=match):
        spec_from_hf_config(dict(_LLAMA_CFG, **change))


def test_family_that_cannot_express_spec():
    with pytest.raises(ConfigError, match="mistral"):
        hf_config_from_spec(dataclasses.replace(SPECS["llama"], sliding_window=8))
    with pytest.raises(ConfigError, match="qwen2"):
        hf_config_from_spec(dataclasses.replace(SPECS["llama"], qkv_bias=True))
    with pytest.raises(ConfigError, match="model.mlp_bias=True has no place in Qwen2"):
        hf_config_from_spec(dataclasses.replace(SPECS["qwen2-window"], mlp_bias=True))


@pytest.mark.parametrize("name", ["llama3", "qwen2-window", "qwen3"])
def test_checkpoint_round_trip(name, tmp_path):
    spec = SPECS[name]
    params = _params(spec)
    save_hf_checkpoint(spec, params, tmp_path)
    assert (tmp_path / WEIGHTS_NAME).is_file() and not (tmp_path / INDEX_NAME).exists()
    loaded_spec, loaded = load_hf_params(tmp_path)
    assert loaded_spec == spec
    _assert_trees_equal(loaded, params)


def test_sharded_bf16_checkpoint(tmp_path):
    spec = SPECS["llama"]
    params = _params(spec)
    save_hf_checkpoint(spec, params, tmp_path, max_shard_bytes=20_000, dtype="bfloat16")
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and not (tmp_path / WEIGHTS_NAME).exists()
    assert json.loads((tmp_path / "config.json").read_text()).get("dtype", "bfloat16") == (
        "bfloat16"
    )
    assert load_file(tmp_path / shards[0])["model.embed_tokens.weight"].dtype == (
        ml_dtypes.bfloat16
    )
    _, loaded = load_hf_params(tmp_path, param_dtype="bfloat16")
    rounded = jax.tree_util.tree_map(lambda x: x.astype(ml_dtypes.bfloat16), params)
    _assert_trees_equal(loaded, rounded)
    # A smaller save into the same folder leaves no stale shard or index behind.
    save_hf_checkpoint(spec, params, tmp_path)
    assert not (tmp_path / INDEX_NAME).exists()
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == [WEIGHTS_NAME]


def test_save_sharded_jax_arrays_and_module(tmp_path):
    """Device arrays spread over the 8 test devices are gathered one tensor at a time."""
    spec = SPECS["llama"]
    params = _params(spec)
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))

    def place(x):
        axis = next((i for i, n in enumerate(x.shape) if n % len(jax.devices()) == 0), None)
        names = [None] * x.ndim
        if axis is not None:
            names[axis] = "x"
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*names))
        return jax.device_put(x, sharding)

    sharded = jax.tree_util.tree_map(place, params)
    assert len(sharded["embed"]["embedding"].sharding.device_set) == len(jax.devices())
    save_hf_checkpoint(spec, sharded, tmp_path / "a")
    _assert_trees_equal(load_hf_params(tmp_path / "a")[1], params)
    # A whole Decoder is accepted too.
    abstract = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(params=0)))
    graphdef, _ = nnx.split(abstract)
    save_hf_checkpoint(spec, nnx.merge(graphdef, sharded), tmp_path / "b")
    _assert_trees_equal(load_hf_params(tmp_path / "b")[1], params)


def _tamper(folder, edit) -> None:
    tensors = load_file(folder / WEIGHTS_NAME)
    edit(tensors)
    save_file(tensors, folder / WEIGHTS_NAME, metadata={"format": "pt"})


def test_checkpoint_errors_name_the_tensor(tmp_path):
    spec = SPECS["qwen2"]
    save_hf_checkpoint(spec, _params(spec), tmp_path)
    name = "model.layers.1.self_attn.k_proj.weight"

    _tamper(tmp_path, lambda t: t.update({name: np.zeros((8, 32), np.float32)}))
    with pytest.raises(ConfigError, match=rf"{name} has shape \[8, 32\], expected \[16, 32\]"):
        load_hf_params(tmp_path)
    _tamper(tmp_path, lambda t: t.pop(name))
    with pytest.raises(ConfigError, match=f"lacks 1 tensor.*{name}"):
        load_hf_params(tmp_path)
    head = load_file(tmp_path / WEIGHTS_NAME)["lm_head.weight"]
    _tamper(
        tmp_path,
        lambda t: (t.update({name: np.zeros((16, 32), np.float32)}), t.pop("lm_head.weight")),
    )
    with pytest.raises(ConfigError, match="lm_head.weight.*tie_word_embeddings=true"):
        load_hf_params(tmp_path)
    extra = "model.layers.0.self_attn.o_proj.bias"
    _tamper(tmp_path, lambda t: t.update({"lm_head.weight": head, extra: np.zeros(32, np.float32)}))
    with pytest.raises(ConfigError, match=f"no place for.*{extra}"):
        load_hf_params(tmp_path)
    # Rotary buffers of old checkpoints are derived from the config and skipped.
    _tamper(
        tmp_path,
        lambda t: (
            t.pop(extra),
            t.update({"model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(4, np.float32)}),
        ),
    )
    load_hf_params(tmp_path)
    # A Llama config over Qwen2 weights: the q/k/v biases have no place.
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"no place for.*self_attn\.k_proj\.bias"):
        load_hf_params(tmp_path)
    (tmp_path / WEIGHTS_NAME).unlink()
    with pytest.raises(ConfigError, match="neither model.safetensors"):
        load_hf_params(tmp_path)


def test_tied_checkpoint_with_lm_head(tmp_path):
    spec = SPECS["llama-linear-tied"]
    params = _params(spec)
    save_hf_checkpoint(spec, params, tmp_path)
    embed = load_file(tmp_path / WEIGHTS_NAME)["model.embed_tokens.weight"]
    _tamper(tmp_path, lambda t: t.update({"lm_head.weight": embed}))
    _assert_trees_equal(load_hf_params(tmp_path)[1], params)
    _tamper(tmp_path, lambda t: t.update({"lm_head.weight": embed + 1}))
    with pytest.raises(ConfigError, match="lm_head.weight differs"):
        load_hf_params(tmp_path)


def test_save_rejects_params_that_do_not_fit_spec(tmp_path):
    spec = SPECS["llama"]
    params = _params(spec)
    params["layers"]["mlp"]["up_proj"]["kernel"] = np.zeros((2, 32, 40), np.float32)
    with pytest.raises(ConfigError, match=r"layers\.mlp\.up_proj\.kernel has shape"):
        save_hf_checkpoint(spec, params, tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"no tensor for: layers\.attn\.k_norm\.scale, "
        r"layers\.attn\.q_norm\.scale",
    ):
        save_hf_checkpoint(spec, _params(dataclasses.replace(spec, qk_norm=True)), tmp_path)


def test_tensor_maps_cover_every_parameter():
    for spec in SPECS.values():
        abstract = nnx.eval_shape(lambda spec=spec: Decoder(spec, rngs=nnx.Rngs(params=0)))
        paths = {
            tuple(k.key for k in path)
            for path, _ in jax.tree_util.tree_leaves_with_path(
                nnx.to_pure_dict(nnx.state(abstract, nnx.Param))
            )
        }
        assert paths == {m.path for m in tensor_maps(spec)}


def test_tokenizer_files_copied(tmp_path):
    spec = SPECS["llama"]
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "generation_config.json").write_text('{"eos_token_id": 2}')
    out = save_hf_checkpoint(spec, _params(spec), tmp_path / "out", tokenizer_dir=tok)
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    with pytest.raises(ConfigError, match="has none of"):
        save_hf_checkpoint(
            spec, _params(spec), tmp_path / "out", tokenizer_dir=tmp_path / "out" / "missing"
        )


def test_convert_cli_round_trip(tmp_path, capsys):
    spec = SPECS["qwen3"]
    src = save_hf_checkpoint(spec, _params(spec), tmp_path / "in", config_extra={"eos_token_id": 5})
    (src / "tokenizer.json").write_text("{}")
    out = tmp_path / "out"
    assert (
        main(["convert", "--from-hf", str(src), "--to-hf", str(out), "--max-shard-size", "30KB"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "Qwen3ForCausalLM" in printed and f"{spec.num_params():,} parameters" in printed
    assert "read back identically" in printed
    assert (out / INDEX_NAME).is_file() and (out / "tokenizer.json").is_file()
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == 5
    assert main(["convert", "--from-hf", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert parse_size("5GB") == 5 * 10**9 and parse_size("2MiB") == 2 * 2**20
