"""Starting a run from another model's weights: `checkpoint.init_from` (Megatron's `finetune`).

Used only when the run has no checkpoint of its own. The source is a Hugging Face folder
(config.json + safetensors), a jaxtrain run directory, an Orbax checkpoint folder or one step
folder of it (`checkpoint.init_step` picks the step; -1 = latest). In a bucket, an Orbax checkpoint
folder or step folder (`s3://bucket/ckpt`, `s3://bucket/ckpt/200`) is read in place, a Hugging
Face folder is copied once to local disk (its safetensors are read from files). Only the
parameters are read (a partial restore: the source's optimizer state is never loaded); the
optimizer state is initialised, the step is 0 and the data order starts from the beginning.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrain.checkpoint.manager import Checkpointer, CheckpointError
from jaxtrain.checkpoint.saved_run import find_checkpoints
from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf import (
    INDEX_NAME,
    WEIGHTS_NAME,
    check_checkpoint_files,
    load_hf_params,
)
from jaxtrain.interop.hf_config import spec_from_hf_config
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.rundir.object_store import (
    StorageError,
    check_reachable,
    describe_failure,
    is_url,
    local_copy,
)
from jaxtrain.train import buffers
from jaxtrain.train.state import StateLayout, count_params

# Where Hugging Face folders named by a bucket URL are copied (once per version of their files).
HF_COPIES = Path(tempfile.gettempdir()) / "jaxtrain-init-from"
# Fields that change which arrays exist or their shapes: a difference is an error.
STRUCTURAL_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "tie_embeddings",
    "qkv_bias",
    "qk_norm",
    "num_experts",
    "moe_intermediate_size",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "moe_shared_experts",
    "num_dense_layers",
    "moe_score_bias",
    "attention_sinks",
    "o_bias",
    "mlp_bias",
    "moe_router_bias",
    "moe_expert_bias",
    "moe_layer_step",
)
# Fields that change the computation but not the weights (e.g. a longer RoPE base for context
# extension): the run's value is used and the difference reported.
NUMERICAL_FIELDS = (
    "family",
    "norm_eps",
    "rope_theta",
    "rope_scaling",
    "sliding_window",
    "num_experts_per_tok",
    "moe_score",
    "moe_norm_topk",
    "rope_interleave",
    "moe_topk_method",
    "moe_n_group",
    "moe_topk_group",
    "moe_routed_scaling",
    "attention_chunk",
    "global_layer_step",
    "leading_global_layers",
    "nope_global",
    "qk_l2_norm",
    "attn_temperature_tuning",
    "attn_floor_scale",
    "attn_scale",
    "moe_weight_inputs",
    "moe_activation",
    "moe_swiglu_alpha",
    "moe_swiglu_limit",
    "quantization",
)
ROPE_SCALING_FIELDS = (
    "rope_factor",
    "rope_low_freq_factor",
    "rope_high_freq_factor",
    "rope_original_max_len",
    "rope_beta_fast",
    "rope_beta_slow",
    "rope_mscale",
    "rope_mscale_all_dim",
    "rope_truncate",
)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where initial weights come from."""

    kind: str  # "hf" or "jaxtrain"
    path: Path | str  # the Hugging Face folder, or the Orbax checkpoint folder (maybe a URL)
    step: int | None = None  # the step a step folder names (jaxtrain only)


def is_hf_folder(path: Path) -> bool:
    """Whether a folder holds a Hugging Face checkpoint (config.json + safetensors)."""
    return (path / "config.json").is_file() and (
        (path / WEIGHTS_NAME).is_file() or (path / INDEX_NAME).is_file()
    )


def find_source(path: str | Path) -> Source:
    """Classifies `path`; CheckpointError when it is none of the accepted kinds."""
    if is_url(str(path)):
        return _bucket_source(str(path))
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint.init_from={str(path)!r} does not exist.")
    if is_hf_folder(path):
        return Source("hf", path)
    try:
        root, step = find_checkpoints(path)
    except CheckpointError:
        raise CheckpointError(
            f"checkpoint.init_from={str(path)!r} is neither a Hugging Face folder (config.json "
            f"and {WEIGHTS_NAME} or {INDEX_NAME}), a jaxtrain run directory, nor an Orbax "
            "checkpoint folder (numbered step folders)."
        ) from None
    return Source("jaxtrain", root, step)


def _bucket_source(url: str) -> Source:
    """A Hugging Face folder, an Orbax checkpoint folder, or one step folder of it, in a bucket.

    A Hugging Face folder is copied once into HF_COPIES (safetensors are read from local files);
    a step folder is told by its numeric name (the Checkpointer then checks that the step is
    committed) and read in place."""
    try:
        check_reachable(url, write=False)
        if _has_object(f"{url.rstrip('/')}/config.json"):
            return Source("hf", local_copy(url, HF_COPIES))
    except StorageError as e:
        raise CheckpointError(f"checkpoint.init_from: {e}") from None
    parent, _, name = url.rstrip("/").rpartition("/")
    if name.isdigit() and "://" in parent and parent.split("://", 1)[1]:
        return Source("jaxtrain", parent, int(name))
    return Source("jaxtrain", url.rstrip("/"))


def _has_object(url: str) -> bool:
    import fsspec  # only init_from URLs need it

    try:
        return bool(fsspec.filesystem(url.split("://", 1)[0]).isfile(url))
    except Exception as e:
        raise StorageError(describe_failure(url, e)) from e


def compare_specs(source: ModelSpec, run: ModelSpec, where: str) -> list[str]:
    """Notes on numerical differences; CheckpointError naming structural ones."""
    fields = STRUCTURAL_FIELDS + NUMERICAL_FIELDS
    if source.rope_scaling != "none" or run.rope_scaling != "none":
        fields += ROPE_SCALING_FIELDS
    differ = [
        (f, getattr(source, f, None), getattr(run, f, None))
        for f in fields
        if getattr(source, f, None) != getattr(run, f, None)
    ]
    structural = [d for d in differ if d[0] in STRUCTURAL_FIELDS]
    if structural:
        lines = [f"checkpoint.init_from: the model in {where} does not match this run's model:"]
        lines += [f"  model.{f}: source {a!r} vs run {b!r}" for f, a, b in structural]
        lines.append(
            "Set the run's model.* keys to the source's values (or use a preset "
            "config of the same architecture)."
        )
        raise CheckpointError("\n".join(lines))
    return [f"model.{f}: source {a!r}, run uses {b!r}" for f, a, b in differ]


def _place(params: Any, shardings: Any) -> Any:
    """Host arrays -> global arrays, each device taking only its own slice."""
    return jax.tree.map(
        lambda x, s: jax.make_array_from_callback(x.shape, s, lambda index: x[index]),
        params,
        shardings,
    )


def _weights_only(tree: Any, layout: StateLayout) -> Any:
    """A tree shaped like the params without the fp8 amax histories (which start afresh)."""
    return buffers.drop(tree, buffers.fp8_histories(layout.graphdef, layout.abstract["params"]))


def _with_fresh_histories(params: Any, layout: StateLayout) -> Any:
    """`params` plus all-zero fp8 amax histories where the run's model has them: a new run
    has no amax past, whatever the source trained with."""
    abstract = buffers.fp8_histories(layout.graphdef, layout.abstract["params"])
    if not abstract:
        return params
    zeros = jax.jit(
        lambda: jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), abstract),
        out_shardings=jax.tree.map(lambda a: a.sharding, abstract),
    )()
    return buffers.merge(params, zeros)


def check_source(path: str | Path, spec: ModelSpec) -> None:
    """CheckpointError, before anything is compiled, for a source that cannot be loaded: no
    such path or no checkpoint there; for a Hugging Face folder also another model, or a weights
    file that is missing, truncated or damaged (headers only: nothing is read into memory)."""
    source = find_source(path)
    if source.kind != "hf":
        return
    try:
        compare_specs(spec_from_hf_config(source.path), spec, str(source.path))
        check_checkpoint_files(source.path)
    except ConfigError as e:
        raise CheckpointError(f"checkpoint.init_from: {e}") from e


def _from_hf(folder: Path, spec: ModelSpec, layout: StateLayout) -> tuple[Any, list[str], str]:
    try:
        notes = compare_specs(spec_from_hf_config(folder), spec, str(folder))
        _, host_params = load_hf_params(folder, spec)
    except ConfigError as e:
        raise CheckpointError(f"checkpoint.init_from: {e}") from e
    placed = _place(host_params, _weights_only(layout.shardings["params"], layout))
    return placed, notes, "Hugging Face checkpoint"


def _from_jaxtrain(
    source: Source, init_step: int, spec: ModelSpec, layout: StateLayout
) -> tuple[Any, list[str], str]:
    checkpointer = Checkpointer(source.path, read_only=True, async_save=False)
    try:
        steps = checkpointer.all_steps()
        if not steps:
            raise CheckpointError(
                f"checkpoint.init_from: {source.path} holds no complete checkpoint."
            )
        step = source.step if source.step is not None else init_step
        step = steps[-1] if step < 0 else step
        if step not in steps:
            raise CheckpointError(
                f"checkpoint.init_from: {source.path} has no step {step}; saved steps: {steps}."
            )
        saved = checkpointer.restore_config(step)
        notes = compare_specs(
            ModelSpec.from_config(saved["model"]), spec, str(checkpointer.step_dir(step))
        )
        params = checkpointer.restore_params(step, _weights_only(layout.abstract["params"], layout))
    finally:
        checkpointer.close()
    return params, notes, f"jaxtrain checkpoint, step {step}"


def load_params(
    path: str | Path, init_step: int, spec: ModelSpec, layout: StateLayout
) -> tuple[Any, str]:
    """(parameters placed on the layout's shardings, a report of what was loaded)."""
    source = find_source(path)
    if source.kind == "hf":
        params, notes, what = _from_hf(source.path, spec, layout)
    else:
        params, notes, what = _from_jaxtrain(source, init_step, spec, layout)
    arrays = len(jax.tree.leaves(params))
    report = (
        f"init_from: loaded {arrays} arrays ({count_params(params):,} params) from "
        f"{source.path} ({what}); optimizer state initialised, step 0, data order from "
        "the start"
    )
    if notes:
        report += "\n  differences kept from this run's config: " + "; ".join(notes)
    return _with_fresh_histories(params, layout), report


def initial_state(
    params: Any, tx: optax.GradientTransformation, layout: StateLayout
) -> dict[str, Any]:
    """A train state at step 0 around `params`, with a fresh optimizer state (over the
    trainable parameters only: buffers such as the aux-free expert bias have none)."""

    def build(p: Any) -> dict[str, Any]:
        trainable, _ = buffers.split(layout.graphdef, p)
        return {"step": jnp.zeros((), jnp.int32), "params": p, "opt_state": tx.init(trainable)}

    return jax.jit(build, out_shardings=layout.shardings, donate_argnums=0)(params)
