"""Hardware choices come from one module, keyed on the target's features, overridable."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import pytest
from conftest import REPO

from jaxtrain.config import loader as config_lib
from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend
from jaxtrain.models.layers.basic import project
from jaxtrain.trainer import Trainer


def test_cpu_choices_follow_the_instruction_sets():
    avx2 = backend.for_cpu(frozenset({"avx2", "fma"}), "AMD EPYC 7B12")
    bf16 = backend.for_cpu(frozenset({"avx2", "avx512f", "avx512_bf16"}), "AMD EPYC 9B45")
    amx = backend.TARGETS["cpu-amx"]
    assert not avx2.bf16_products and bf16.bf16_products and amx.bf16_products
    assert avx2.vendor == "amd" and avx2.keep_attention_probabilities
    assert avx2.block_for(256) == 64 and avx2.block_for(4096) == 128
    gpu = backend.TARGETS["amd-mi300x"]
    assert gpu.bf16_products and not gpu.cudnn_attention and gpu.block_for(256) == 128
    assert backend.TARGETS["nvidia-h100"].cudnn_attention


def test_this_machine_is_detected_and_described():
    here = backend.detect()
    assert here.platform == jax.devices()[0].platform == "cpu"
    assert here.kind == backend.cpu_model()
    assert here.bf16_products == bool(backend.cpu_flags() & backend.BF16_DOT_FLAGS)
    assert here.describe().startswith(f"backend: cpu {here.vendor} {here.kind}")


def test_the_config_names_a_target_or_overrides_a_choice():
    planned = backend.from_config({"target": "nvidia-h200", "bf16_products": "auto"})
    # Planning an NVIDIA GPU's program on a CPU host: its choices, but no cuDNN kernel.
    assert planned.kind == "NVIDIA H200" and planned.bf16_products
    assert not planned.cudnn_attention
    widened = backend.from_config({"target": "", "bf16_products": "widened"})
    assert not widened.bf16_products and widened.kind == backend.detect().kind
    with pytest.raises(ConfigError, match=r"backend.target='h100' is not one of"):
        backend.from_config({"target": "h100"})
    with pytest.raises(ConfigError, match=r"backend.bf16_products='fast' is not one of"):
        backend.from_config({"bf16_products": "fast"})
    # CPUs round float32 to bfloat16 by bits, GPUs by their convert; the config can say which.
    assert backend.detect().rounds_by_bits and not backend.TARGETS["nvidia-h100"].rounds_by_bits
    assert not backend.from_config({"bf16_rounding": "convert"}).rounds_by_bits
    assert backend.from_config({"target": "amd-mi300x", "bf16_rounding": "bits"}).rounds_by_bits
    with pytest.raises(ConfigError, match=r"backend.bf16_rounding='fast' is not one of"):
        backend.from_config({"bf16_rounding": "fast"})


@pytest.mark.parametrize(
    "target,dots", [("cpu-avx2", {"f32"}), ("cpu-avx512-bf16", {"bf16"}), ("amd-mi300x", {"bf16"})]
)
def test_a_targets_program_is_what_is_compiled(target, dots):
    """The product precision follows the target, whatever machine compiles it."""
    x = jnp.ones((16, 64), jnp.bfloat16)
    w = jnp.ones((64, 32), jnp.bfloat16)
    with backend.use(backend.TARGETS[target]):
        hlo = jax.jit(lambda a, b: project(a, b, 1, jnp.float32)).lower(x, w).compile().as_text()
    types = set()
    for computation in hlo.split("\n\n"):
        if " dot(" in computation:
            types |= set(re.findall(r": (\w+)\[", computation.strip().splitlines()[0]))
    assert types == dots


def test_the_trainer_prints_and_records_its_backend(tmp_path, capsys):
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        {
            "run.dir": str(tmp_path / "run"),
            "train.steps": 1,
            "train.seq_len": 32,
            "train.progress": False,
            "train.eval_batches": 0,
            "backend.bf16_products": "widened",
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1])
    try:
        trainer.run()
    finally:
        trainer.close()
    assert "bfloat16 products widened to float32" in capsys.readouterr().out
    used = json.loads((tmp_path / "run" / "config.json").read_text())["backend"]["used"]
    assert used["bf16_products"] is False and used["platform"] == "cpu"
