"""Every numeric setting has a range, checked before anything is built, naming the key."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import REPO

from jaxtrain.config.loader import load_config, load_py_config
from jaxtrain.config.ranges import RANGES, Range, numeric_settings
from jaxtrain.errors import ConfigError
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.ranges import MODEL_RANGES
from jaxtrain.run import validate

BASE = str(REPO / "configs" / "base.py")

BAD = [
    ("optim.lr", "inf"),
    ("optim.lr", "nan"),
    ("optim.lr", "-0.001"),
    ("optim.lr", "0"),
    ("optim.min_lr", "-1e-5"),
    ("optim.b1", "1.5"),
    ("optim.b1", "1.0"),
    ("optim.b2", "-0.1"),
    ("optim.eps", "-1"),
    ("optim.eps", "0"),
    ("optim.weight_decay", "-5"),
    ("optim.clip_grad_norm", "-1"),
    ("optim.warmup_steps", "-1"),
    ("optim.decay_steps", "-3"),
    ("optim.stable_steps", "-1"),
    ("optim.warmup_init", "-0.1"),
    ("optim.warmup_offset", "2"),
    ("checkpoint.every", "-1"),
    ("checkpoint.keep", "-2"),
    ("checkpoint.keep_every", "-1"),
    ("checkpoint.every_minutes", "inf"),
    ("checkpoint.every_minutes", "-1"),
    ("checkpoint.init_step", "-2"),
    ("checkpoint.resume_step", "-2"),
    ("mesh.ici_tensor", "0"),
    ("mesh.ici_tensor", "-2"),
    ("mesh.dcn_data", "0"),
    ("mesh.ici_fsdp", "-3"),
    ("train.steps", "0"),
    ("train.seq_len", "-1"),
    ("train.global_batch_size", "0"),
    ("train.micro_batch_size", "-1"),
    ("train.z_loss", "-1e-4"),
    ("train.z_loss", "nan"),
    ("train.loss_chunks", "-2"),
    ("train.log_every", "0"),
    ("train.eval_every", "-1"),
    ("train.eval_batches", "-1"),
    ("train.peak_flops", "-1"),
    ("train.peak_flops", "inf"),
    ("data.worker_count", "-1"),
    ("data.prefetch", "-1"),
    ("sample.max_new_tokens", "-1"),
    ("sample.temperature", "-0.5"),
    ("sample.top_k", "-1"),
    ("model.norm_eps", "0"),
    ("model.rope_theta", "-1"),
    ("model.init_std", "nan"),
    ("model.hidden_size", "0"),
    ("model.attn_scale", "inf"),
    ("model.moe_capacity_factor", "-1"),
]


@pytest.mark.parametrize(("key", "value"), BAD, ids=[f"{k}={v}" for k, v in BAD])
def test_bad_value_is_refused_under_its_own_key(key: str, value: str) -> None:
    cfg = load_config(BASE, [f"--config.{key}={value}"])
    with pytest.raises(ConfigError) as error:
        validate(cfg, check_data=False)
    message = str(error.value)
    assert message.startswith(f"{key}="), message
    assert "must be" in message


def test_messages_say_the_range_and_what_special_values_mean() -> None:
    def message(key: str, value: str) -> str:
        with pytest.raises(ConfigError) as error:
            validate(load_config(BASE, [f"--config.{key}={value}"]), check_data=False)
        return str(error.value)

    assert message("optim.lr", "-0.001") == "optim.lr=-0.001 is out of range: it must be > 0."
    assert message("optim.lr", "inf") == "optim.lr=inf is not a finite number; it must be > 0."
    assert message("optim.b1", "1.5") == "optim.b1=1.5 is out of range: it must be in [0, 1)."
    assert message("mesh.ici_tensor", "0") == (
        "mesh.ici_tensor=0 is out of range: it must be >= 1 or -1 (-1: the rest of the devices "
        "on that side)."
    )
    assert message("checkpoint.keep", "-2") == (
        "checkpoint.keep=-2 is out of range: it must be >= 0 (0: keep every checkpoint)."
    )


def test_every_numeric_setting_has_a_range() -> None:
    numbers = dict(numeric_settings(load_py_config(BASE)))
    assert len(numbers) > 80
    assert sorted(set(numbers) - set(RANGES)) == []
    for key, value in numbers.items():  # every default lies in its own range
        assert RANGES[key].admits(value), key


def test_boundaries_and_special_values_are_accepted() -> None:
    good = {
        "optim.b1": 0.0,
        "optim.eps": 1e-30,
        "optim.clip_grad_norm": 0.0,
        "optim.weight_decay": 0.0,
        "checkpoint.every": 0,
        "checkpoint.keep": 0,
        "checkpoint.init_step": -1,
        "mesh.ici_tensor": 1,
        "mesh.ici_data": -1,
        "mesh.ici_fsdp": 1,
        "train.eval_batches": 0,
        "sample.temperature": 0.0,
    }
    validate(load_config(BASE, good), check_data=False)
    assert Range(0, 1, low_open=True).describe() == "in (0, 1]"
    assert Range().describe() == "any finite number"


def test_a_spec_built_without_a_config_checks_the_same_model_ranges() -> None:
    """A ModelSpec from a Hugging Face config.json, a preset or a saved run never passes a
    config's checks; the model's ranges are the spec's own, with the words a config gets."""
    defaults = ModelSpec()
    numbers = {
        f.name
        for f in dataclasses.fields(ModelSpec)
        if isinstance(getattr(defaults, f.name), (int, float))
        and not isinstance(getattr(defaults, f.name), bool)
    }
    assert numbers == set(MODEL_RANGES)
    assert {f"model.{k}": r for k, r in MODEL_RANGES.items()}.items() <= RANGES.items()
    for key, value, expected in (
        ("hidden_size", 0, "model.hidden_size=0 is out of range: it must be >= 1."),
        ("norm_eps", float("nan"), "model.norm_eps=nan is not a finite number; it must be > 0."),
        (
            "sliding_window",
            -1,
            "model.sliding_window=-1 is out of range: it must be >= 0 (0: full causal attention).",
        ),
    ):
        with pytest.raises(ConfigError) as from_spec:
            dataclasses.replace(defaults, **{key: value}).validate()
        with pytest.raises(ConfigError) as from_config:
            validate(load_config(BASE, {f"model.{key}": value}), check_data=False)
        assert str(from_spec.value) == str(from_config.value) == expected
