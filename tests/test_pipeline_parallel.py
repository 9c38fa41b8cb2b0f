"""Pipeline parallelism (`jaxtrain/models/assembly/pipeline.py`): a scanned stack split into stages over the `pipeline` mesh axis trains
exactly like one device, for dense and mixture-of-experts stacks, with gradient accumulation,
rematerialisation, the circular schedule and the other mesh axes; the checks before compiling
refuse what cannot split evenly, with the arithmetic."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
import pytest
import training_helpers
from training_helpers import mesh_config

from jaxtrain.config import mesh_check
from jaxtrain.models import ModelSpec
from jaxtrain.models.assembly import pipeline
from jaxtrain.models.assembly.pipeline import Schedule
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.parallel import sharding
from jaxtrain.parallel.sharding import MeshError

# Eight blocks: four stages of two. Grouped-query attention, dims <= 64.
DENSE = ModelSpec(
    vocab_size=128,
    hidden_size=32,
    num_layers=8,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
)
# Every block with experts; both router losses on, so their gradients take part.
MOE = dataclasses.replace(
    DENSE,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    moe_aux_loss_coef=0.01,
    moe_z_loss_coef=1e-3,
)
# DeepSeek's layout: two leading dense blocks (before the pipeline), then four expert blocks.
DENSE_THEN_MOE = dataclasses.replace(MOE, num_layers=6, num_dense_layers=2)
# Llama 4's layout: dense and expert blocks alternate; four groups of two.
INTERLEAVED = dataclasses.replace(MOE, moe_layer_step=2)
STEPS = 2


def losses(
    spec: ModelSpec, sizes: dict[str, int], schedule: Schedule = Schedule(), num_micro: int = 1
) -> list[float]:
    """Losses of STEPS steps on one fixed batch of 8 x 16 tokens on a mesh of `sizes`."""
    mesh = sharding.make_mesh(
        mesh_config(**sizes), devices=jax.devices()[: int(np.prod(list(sizes.values()) or [1]))]
    )
    with pipeline.use(schedule):
        return training_helpers.train(spec, mesh, STEPS, num_micro=num_micro)[0]


@functools.cache
def one_device(spec: ModelSpec, num_micro: int = 1) -> tuple[float, ...]:
    """The reference: the same steps on one device, no pipeline."""
    return tuple(losses(spec, {}, num_micro=num_micro))


def test_pipeline4_fsdp2_trains_like_one_device(monkeypatch):
    runs = []
    real = pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: runs.append(1) or real(*a, **k))
    got = losses(DENSE, dict(ici_pipeline=4, ici_fsdp=2))
    assert runs  # the stack really ran as a pipeline
    np.testing.assert_allclose(got, one_device(DENSE), rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec, sizes, schedule, num_micro",
    [
        (MOE, dict(ici_pipeline=4, ici_fsdp=2), Schedule(), 1),
        (DENSE, dict(ici_pipeline=4, ici_fsdp=2), Schedule(), 2),
        (MOE, dict(ici_pipeline=4, ici_fsdp=2), Schedule(), 2),
        (dataclasses.replace(DENSE, remat="full"), dict(ici_pipeline=4, ici_fsdp=2), Schedule(), 1),
        (dataclasses.replace(MOE, remat="dots"), dict(ici_pipeline=4, ici_fsdp=2), Schedule(), 1),
        (DENSE_THEN_MOE, dict(ici_pipeline=4, ici_fsdp=2), Schedule(), 1),
        (INTERLEAVED, dict(ici_pipeline=4, ici_fsdp=2), Schedule(), 1),
        (DENSE, dict(ici_pipeline=2, ici_fsdp=4), Schedule(microbatches=2, repeats=2), 1),
        (DENSE, dict(ici_pipeline=2, ici_tensor=2, ici_context=2), Schedule(), 1),
        (MOE, dict(ici_pipeline=2, ici_expert=2, ici_data=2), Schedule(), 1),
    ],
    ids=[
        "moe",
        "dense_accumulation",
        "moe_accumulation",
        "dense_remat",
        "moe_remat",
        "dense_then_moe",
        "interleaved",
        "circular",
        "tensor_context",
        "expert_data",
    ],
)
def test_pipeline_trains_like_one_device(spec, sizes, schedule, num_micro):
    got = losses(spec, sizes, schedule, num_micro)
    np.testing.assert_allclose(got, one_device(spec, num_micro), rtol=1e-4)


def _amax_histories(params: dict) -> dict[str, np.ndarray]:
    return {
        jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
        if "fp8_amax" in str(path)
    }


# Hybrid stacks: a unit is one repeat of the pattern's period. Mamba-2, attention and relu2 MLP
# sublayers, four repeats; and Mamba with expert sublayers (router losses on), two repeats.
HYBRID = model_spec("nemotron-h-debug", num_layers=16, block_pattern="M*M-" * 4, ssm_chunk_size=8)
HYBRID_MOE = model_spec(
    "nemotron-h-debug",
    num_layers=4,
    block_pattern="ME" * 2,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    moe_aux_loss_coef=0.01,
    moe_z_loss_coef=1e-3,
    ssm_chunk_size=8,
)
# Zebra-Llama's kinds (latent attention, Gated DeltaNet, KDA, Mamba-2, SwiGLU), rematerialised.
HYBRID_DELTA = model_spec(
    "zebra-llama-debug",
    num_layers=16,
    block_pattern="*-G-K-M-" * 2,
    linear_chunk=4,
    ssm_chunk_size=8,
    remat="full",
)


@pytest.mark.parametrize(
    "spec, sizes",
    [
        (HYBRID, dict(ici_pipeline=4, ici_fsdp=2)),
        (HYBRID_MOE, dict(ici_pipeline=2, ici_fsdp=2)),
        (HYBRID_DELTA, dict(ici_pipeline=2, ici_fsdp=2)),
    ],
)
def test_hybrid_stacks_train_as_a_pipeline_like_one_device(spec, sizes, monkeypatch):
    runs = []
    real = pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: runs.append(1) or real(*a, **k))
    got = losses(spec, sizes)
    assert runs
    np.testing.assert_allclose(got, one_device(spec), rtol=1e-4)


def test_a_hybrid_period_that_does_not_split_into_stages_is_refused():
    with pytest.raises(MeshError, match=r"4 repeats of model.block_pattern's 4-sublayer period"):
        mesh_check.check_stages(HYBRID, 3, Schedule())


def test_fp8_amax_histories_of_a_pipeline_are_one_devices():
    """Each unit runs in many pipeline iterations; its amax history must come back as the
    maximum over them (as over accumulated micro batches), not their sum."""
    spec = dataclasses.replace(DENSE, quantization="fp8")
    sizes = dict(ici_pipeline=4, ici_fsdp=2)
    mesh = sharding.make_mesh(mesh_config(**sizes), devices=jax.devices()[:8])
    with pipeline.use(Schedule()):
        got_losses, _, got_state, _, _ = training_helpers.train(spec, mesh, 1)
    want_losses, _, want_state, _, _ = training_helpers.train(
        spec, sharding.make_mesh(mesh_config(), devices=jax.devices()[:1]), 1
    )
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
    got, want = _amax_histories(got_state), _amax_histories(want_state)
    assert want and got.keys() == want.keys()
    for name in want:
        assert want[name][:, :, 0].min() > 0, name  # the step recorded every tensor's amax
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)


def test_stages_hold_contiguous_runs_of_the_stack_and_the_prefix_whole():
    """`layers` splits over `pipeline`; DeepSeek's leading dense stack stays whole."""
    from jaxtrain.train import optimizer, state

    mesh = sharding.make_mesh(mesh_config(ici_pipeline=4, ici_fsdp=2))
    rules = sharding.RULE_PRESETS["fsdp_tensor"]
    tx = optimizer.make_optimizer(training_helpers.optim(), 1)
    layout = state.state_layout(DENSE_THEN_MOE, tx, mesh, rules)
    specs = {
        jax.tree_util.keystr(p): s.spec
        for p, s in jax.tree_util.tree_leaves_with_path(layout.shardings["params"])
    }
    gate = next(v for k, v in specs.items() if "['layers']" in k and "gate_proj" in k)
    prefix = next(v for k, v in specs.items() if "['dense_layers']" in k and "gate" in k)
    assert gate[0] == "pipeline"
    assert prefix[0] is None


def test_bubble_fraction_and_default_micro_batches():
    assert pipeline.bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert pipeline.bubble_fraction(4, 8, repeats=2) == pytest.approx(3 / 19)
    assert pipeline.bubble_fraction(1, 1) == 0.0
    # As many as fit (each part a multiple of the 2 batch shards), up to 4 per stage.
    assert pipeline.default_microbatches(4, rows=8, shards=2) == 4
    assert pipeline.default_microbatches(4, rows=64, shards=1) == 16
    assert pipeline.default_microbatches(2, rows=6, shards=1) == 6
    assert pipeline.default_microbatches(4, rows=2, shards=2) == 1


def _check(
    spec: ModelSpec, sizes: dict[str, int], micro_batch: int = 8, schedule: Schedule = Schedule()
) -> None:
    mesh = sharding.make_mesh(
        mesh_config(**sizes), devices=jax.devices()[: int(np.prod(list(sizes.values())))]
    )
    mesh_check.check_fits_mesh(
        spec,
        mesh,
        sharding.RULE_PRESETS["fsdp_tensor"],
        seq_len=16,
        micro_batch=micro_batch,
        mesh_cfg=mesh_config(**sizes),
        schedule=schedule,
    )


def test_stacks_that_do_not_split_into_stages_are_refused_with_the_arithmetic():
    with pytest.raises(
        MeshError,
        match=r"model.num_layers=6 blocks do not split into the 4 "
        r"pipeline stages \(mesh.ici_pipeline=4\): 6 / 4 = 1.5",
    ):
        _check(dataclasses.replace(DENSE, num_layers=6), dict(ici_pipeline=4, ici_fsdp=2))
    with pytest.raises(
        MeshError,
        match=r"4 expert blocks \(model.num_layers=6 less the 2 "
        r"leading dense blocks.*3 pipeline stages",
    ):
        _check(DENSE_THEN_MOE, dict(ici_pipeline=3))
    with pytest.raises(MeshError, match=r"x train.pipeline_repeats=2 = 8 parts: 4 / 8"):
        _check(INTERLEAVED, dict(ici_pipeline=4), schedule=Schedule(microbatches=4, repeats=2))


def test_micro_batches_that_do_not_split_are_refused_with_the_arithmetic():
    with pytest.raises(
        MeshError,
        match=r"train.pipeline_microbatches=3 does not divide the "
        r"micro batch of 8 sequences",
    ):
        _check(DENSE, dict(ici_pipeline=4, ici_fsdp=2), schedule=Schedule(microbatches=3))
    with pytest.raises(
        MeshError,
        match=r"leaves 1 sequences per pipeline micro batch \(8 / 8\)"
        r", not divisible by the 2 batch shards",
    ):
        _check(DENSE, dict(ici_pipeline=4, ici_fsdp=2), schedule=Schedule(microbatches=8))
    with pytest.raises(
        MeshError,
        match=r"needs at least as many pipeline micro batches as "
        r"stages",
    ):
        _check(
            DENSE, dict(ici_pipeline=4, ici_fsdp=2), schedule=Schedule(microbatches=2, repeats=2)
        )


def _host_params(trainer) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(trainer.state["params"]))]


@pytest.mark.slow
def test_checkpoints_restore_across_pipeline_sizes(tmp_path):
    """Saved with 4 stages, restored without a pipeline, and back: identical values (the
    stack keeps its layout; only its sharding changes)."""
    from checkpoint_fixtures import small_config

    from jaxtrain.trainer import Trainer

    run_dir = tmp_path / "run"
    layouts = [
        ({"mesh.ici_pipeline": 4, "mesh.ici_fsdp": 2}, {"pipeline": 4, "fsdp": 2}),
        ({}, {"pipeline": 1, "fsdp": 8}),
        ({"mesh.ici_pipeline": 2, "mesh.ici_fsdp": 4}, {"pipeline": 2, "fsdp": 4}),
    ]
    saved = None
    for step, (overrides, shape) in enumerate(layouts):
        trainer = Trainer(
            small_config(run_dir, **{"model.num_layers": 8, **overrides}), console=False
        )
        try:
            assert trainer.step == 2 * step
            assert {k: sharding.mesh_shape(trainer.mesh)[k] for k in shape} == shape
            if saved is not None:
                for got, want in zip(_host_params(trainer), saved, strict=True):
                    np.testing.assert_array_equal(got, want)
            trainer.run(2)
            saved = _host_params(trainer)
        finally:
            trainer.close()


def test_config_reports_stages_bubble_and_per_stage_memory():
    from conftest import REPO

    from jaxtrain.commands import config as config_report
    from jaxtrain.config.loader import load_config

    def figures(**mesh):
        cfg = load_config(
            str(REPO / "configs" / "llama_debug.py"),
            {
                "model.num_layers": 8,
                "train.global_batch_size": 16,
                **{f"mesh.{k}": v for k, v in mesh.items()},
            },
        )
        return config_report.derived(cfg, 8)

    staged, flat = figures(ici_pipeline=4, ici_fsdp=2), figures(ici_fsdp=2, ici_data=4)
    assert staged["pipeline"] == {
        "stages": 4,
        "blocks_per_stage": "2 of the model.num_layers=8 blocks",
        "repeats": 1,
        "micro_batches": 8,
        "sequences_per_micro_batch": 2,
        "bubble_fraction": 0.2727,
    }
    assert "the same on every pipeline stage" in staged["memory_per_device"]
    # Each stage holds a quarter of the blocks; the embedding and output layer are whole.
    blocks = (
        flat["state_bytes_per_device"]["parameters"]
        - staged["state_bytes_per_device"]["parameters"]
    )
    assert blocks > 0 and "pipeline" not in flat
