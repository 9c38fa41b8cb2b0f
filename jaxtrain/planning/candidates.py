"""The layouts the planner considers, and a cheap first guess of their memory and traffic.

A candidate is a mesh (`ici_*` inside a host, `dcn_*` across hosts) with a micro batch, a
remat policy and a loss chunking. Meshes: `tensor` and `expert` stay inside a host (their
collectives sit between a layer's matmuls and need the fast links); `context` only for
sequences of at least `LONG_SEQUENCE` tokens; what is left inside a host goes to `fsdp` or to
`data`, and the hosts split between `pipeline`, `fsdp` and `data`. Every candidate passes
the trainer's own checks (`mesh_check.check_sizes_fit`, `run.validate`) before it is kept.

The first guess (`estimate`) needs no compile: the state's bytes from the state layout's
partition specs (`memory.plan_state`), the activations from the model's widths, and the
collectives' bytes from the parameter count. It only orders and prunes; the figures the
planner reports come from compiled programs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from ml_collections import ConfigDict

from jaxtrain import run
from jaxtrain.config import loader as config_lib
from jaxtrain.config import mesh_check
from jaxtrain.errors import JaxtrainError
from jaxtrain.models.spec.checks import REMAT_POLICIES
from jaxtrain.parallel import sharding
from jaxtrain.planning import memory

LONG_SEQUENCE = 32768
MAX_TENSOR = 8
SEQUENCES_PER_DEVICE = (1, 2, 4, 8, 16)
LOSS_CHUNKS = (0, 8)
BLOCK_GUESS = 512  # queries per block of blockwise attention, when the config leaves it open


@dataclasses.dataclass
class Candidate:
    """One layout: mesh sizes, micro batch, remat policy and loss chunks."""

    ici: dict[str, int]
    dcn: dict[str, int]
    micro_batch: int
    remat: str
    loss_chunks: int
    estimate_bytes: float = 0.0  # first guess of memory per device
    grad_bytes: float = 0.0  # float32 gradients per device (twice the shard when accumulating)
    update_bytes: float = 0.0  # what the optimizer update and gradient accumulation move
    estimate_collectives: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    bubble: float = 0.0
    # Pipeline ticks per pass, in whole-stage units: every tick runs a stage's layers (one
    # repeat's share of them) on one micro batch and gathers their fsdp-sharded weights anew.
    ticks: float = 1.0

    @property
    def sizes(self) -> dict[str, int]:
        """{axis: ici x dcn}."""
        return {a: self.ici[a] * self.dcn[a] for a in sharding.MESH_AXES}

    def overrides(self) -> list[str]:
        """The command-line overrides that give a config this layout."""
        out = [f"--config.mesh.ici_{a}={self.ici[a]}" for a in sharding.MESH_AXES]
        out += [f"--config.mesh.dcn_{a}={self.dcn[a]}" for a in sharding.MESH_AXES]
        return out + [
            f"--config.train.micro_batch_size={self.micro_batch}",
            f"--config.model.remat={self.remat}",
            f"--config.train.loss_chunks={self.loss_chunks}",
        ]

    def describe_mesh(self) -> str:
        """'fsdp=8(dcn 8) x tensor=8': the axes larger than one, hosts in brackets."""
        parts = []
        for a in sharding.MESH_AXES:
            if self.sizes[a] > 1:
                across = f"(dcn {self.dcn[a]})" if self.dcn[a] > 1 else ""
                parts.append(f"{a}={self.sizes[a]}{across}")
        return " x ".join(parts) or "1 device"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def meshes(cfg: ConfigDict, devices: int, hosts: int) -> list[tuple[dict, dict]]:
    """(ici, dcn) pairs for `devices` over `hosts`, by the rules in the module docstring."""
    per_host = devices // hosts
    spec = run.validate(cfg, check_data=False)
    shards_tensor = cfg.mesh.rules == "fsdp_tensor"
    out = []
    for t in _divisors(per_host) if shards_tensor else [1]:
        if t > MAX_TENSOR:
            continue
        for e in _divisors(per_host // t) if spec.num_experts else [1]:
            long_seq = cfg.train.seq_len >= LONG_SEQUENCE
            for c in _divisors(per_host // (t * e)) if long_seq else [1]:
                rest = per_host // (t * e * c)
                for inner in {("fsdp", rest), ("data", rest)}:
                    for p in _divisors(hosts):
                        for f in _divisors(hosts // p):
                            ici = dict.fromkeys(sharding.MESH_AXES, 1)
                            ici.update(tensor=t, expert=e, context=c)
                            ici[inner[0]] *= inner[1]
                            dcn = dict.fromkeys(sharding.MESH_AXES, 1)
                            dcn.update(pipeline=p, fsdp=f, data=hosts // (p * f))
                            out.append((ici, dcn))
    unique = {(tuple(i.values()), tuple(d.values())): (i, d) for i, d in out}
    return list(unique.values())


def _valid_settings(cfg: ConfigDict) -> list[tuple[str, int]]:
    """The (remat, loss_chunks) pairs `run.validate` accepts for this config."""
    kept = []
    for remat, chunks in itertools.product(REMAT_POLICIES, LOSS_CHUNKS):
        variant = config_lib.apply_overrides(
            ConfigDict(cfg.to_dict()), {"model.remat": remat, "train.loss_chunks": chunks}
        )
        try:
            run.validate(variant, check_data=False)
        except JaxtrainError:
            continue
        kept.append((remat, chunks))
    return kept


def enumerate_candidates(cfg: ConfigDict, devices: int, hosts: int) -> list[Candidate]:
    """Every layout that passes the trainer's checks, with its first-guess figures."""
    spec = run.validate(cfg, check_data=False)
    rules = run.rules_of(cfg)
    schedule = mesh_check.pipeline_schedule(cfg)
    settings = _valid_settings(cfg)
    one = run.for_reading(cfg)
    layout, batch = one.layout.abstract, one.abstract_batch()
    batch_size = int(cfg.train.global_batch_size)
    own_micro = int(config_lib.micro_batch_size(cfg))
    found = []
    for ici, dcn in meshes(cfg, devices, hosts):
        sizes = {a: ici[a] * dcn[a] for a in sharding.MESH_AXES}
        state = memory.plan_state(layout, batch, sizes)
        shards = math.prod(sizes[a] for a in ("data", "fsdp", "expert", "pipeline"))
        # The config's own micro batch competes too (a published layout's 3 per device).
        micros = sorted({d * shards for d in SEQUENCES_PER_DEVICE} | {own_micro})
        for micro in micros:
            if micro > batch_size or batch_size % micro or micro % shards:
                continue
            try:
                _check_fit(cfg, spec, sizes, rules, micro, schedule)
            except JaxtrainError:
                continue
            bubble, ticks = _pipeline(spec, sizes, rules, micro, schedule)
            for remat, chunks in settings:
                cand = Candidate(ici, dcn, micro, remat, chunks, bubble=bubble, ticks=ticks)
                estimate(cand, cfg, spec, state)
                found.append(cand)
    return found


def given(cfg: ConfigDict, devices: int, hosts: int) -> Candidate:
    """The config's own layout (its mesh, micro batch, remat and loss chunks, overrides
    applied) on `devices` over `hosts`, with its first-guess figures; the trainer's error
    when it does not fit them."""
    spec = run.validate(cfg, check_data=False)
    rules = run.rules_of(cfg)
    schedule = mesh_check.pipeline_schedule(cfg)
    ici, dcn = sharding.resolved_sizes(cfg.mesh, devices, hosts)
    sizes = {a: ici[a] * dcn[a] for a in sharding.MESH_AXES}
    micro = int(config_lib.micro_batch_size(cfg))
    _check_fit(cfg, spec, sizes, rules, micro, schedule)
    one = run.for_reading(cfg)
    state = memory.plan_state(one.layout.abstract, one.abstract_batch(), sizes)
    bubble, ticks = _pipeline(spec, sizes, rules, micro, schedule)
    cand = Candidate(
        ici,
        dcn,
        micro,
        str(cfg.model.remat),
        int(cfg.train.loss_chunks),
        bubble=bubble,
        ticks=ticks,
    )
    estimate(cand, cfg, spec, state)
    return cand


def _check_fit(
    cfg: ConfigDict, spec: Any, sizes: dict, rules: Any, micro: int, schedule: Any
) -> None:
    mesh_check.check_sizes_fit(
        spec,
        sizes,
        rules,
        seq_len=int(cfg.train.seq_len),
        micro_batch=micro,
        rules_name=str(cfg.mesh.rules),
        schedule=schedule,
    )


def _pipeline(spec: Any, sizes: dict, rules: Any, micro: int, schedule: Any) -> tuple[float, float]:
    """(bubble fraction, ticks per pass in whole-stage units) of a pipelined layout."""
    if sizes["pipeline"] <= 1:
        return 0.0, 1.0
    summary = mesh_check.pipeline_summary(
        spec, sizes, dict(rules), micro_batch=micro, schedule=schedule
    )
    if not isinstance(summary, dict):
        return 0.0, 1.0
    repeats = max(int(summary["repeats"]), 1)
    ticks = (repeats * summary["micro_batches"] + summary["stages"] - 1) / repeats
    return float(summary["bubble_fraction"]), float(ticks)


def rows_per_device(cand: Candidate, seq_len: int) -> float:
    """Tokens per device in one micro batch (its rows in each matmul)."""
    s = cand.sizes
    shards = s["data"] * s["fsdp"] * s["expert"] * s["pipeline"] * s["context"]
    return cand.micro_batch * seq_len / shards


def estimate(cand: Candidate, cfg: ConfigDict, spec: Any, state: memory.MemoryPlan) -> None:
    """Fills the candidate's first-guess memory and collective bytes (see the docstring)."""
    s = cand.sizes
    m = cfg.model
    # The figures ranked are XLA's CPU compiler's, which widens bfloat16 to float32: guess
    # what it will plan, not what a GPU would.
    act = 4
    param = 2 if m.param_dtype == "bfloat16" else 4
    # Inside a pipeline each stage runs every micro batch of its rows: `pipeline` does not
    # split the activations a stage keeps, only the layers it keeps them for.
    rows = rows_per_device(cand, int(cfg.train.seq_len)) * s["pipeline"]
    t = s["tensor"]
    width = spec.moe_intermediate_size * spec.num_experts_per_tok or m.intermediate_size
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    # Without remat a layer keeps its inputs, norms, q/k/v, attention output and MLP inputs.
    # Attention scores (heads x seq_len per row) are kept only by `attention_impl=dot`; the
    # blockwise kernel (the default off NVIDIA GPUs) and cuDNN's hold one block of queries'
    # scores at a time, while the layer runs.
    seq_len = int(cfg.train.seq_len) // s["context"]
    heads = max(m.num_heads // t, 1)
    if spec.attention_impl == "dot":
        scores, transient = rows * seq_len * heads * 4 * 2, 0.0
    else:
        block = min(spec.attention_block or BLOCK_GUESS, seq_len)
        scores, transient = 0.0, rows * block * heads * 4 * 2
    layer = rows * act * (4 * m.hidden_size + (2 * q + 2 * kv + 3 * width) / t) + scores
    saved = {
        "full": rows * act * m.hidden_size,  # the layer input only
        "none": layer,
        "dots": layer,  # every matmul output, attention's batched ones included
    }.get(cand.remat, layer - scores)  # the no-batch-dims policies recompute attention
    layers = spec.num_layers / s["pipeline"]
    logits = rows * m.vocab_size / t * 4 * 2 / max(cand.loss_chunks, 1)
    micro_steps = cfg.train.global_batch_size // cand.micro_batch
    cand.grad_bytes = state.params * (2 if micro_steps > 1 else 1)
    # The update reads the state and the gradients and writes the state back; accumulating
    # reads the running sum and a micro batch's gradients and writes the sum, per micro step.
    cand.update_bytes = 2 * state.state + state.params + 3 * state.params * (micro_steps - 1)
    cand.estimate_bytes = (
        state.state + state.batch + cand.grad_bytes + layers * saved + layer + transient + logits
    )
    cand.estimate_collectives = _traffic(cand, spec, rows, act, param, micro_steps)


def _traffic(
    cand: Candidate, spec: Any, rows: float, act: int, param: int, micro_steps: int
) -> dict[str, dict[str, float]]:
    """Bus bytes per step per device of the main collectives, from the parameter count."""
    s = cand.sizes
    weights = spec.num_params() / (s["tensor"] * s["pipeline"])
    out: dict[str, dict[str, float]] = {}

    def add(key: str, group: int, bus: float, runs: float) -> None:
        if group > 1:
            out[key] = {"bus_bytes": bus, "runs": runs}

    f, d, t, e = s["fsdp"], s["data"], s["tensor"], s["expert"]
    layers = spec.num_layers / s["pipeline"]
    gathers = 3 if cand.remat != "none" else 2  # forward, backward, and the recompute
    passes = micro_steps * cand.ticks  # a pipeline gathers a stage's weights every tick
    add("all-gather over fsdp", f, weights * act * (f - 1) / f * gathers * passes,
        layers * gathers * passes)  # fmt: skip
    add("reduce-scatter over fsdp", f, weights * param * (f - 1) / f * passes,
        layers * passes)  # fmt: skip
    add("all-reduce over data", d, 2 * weights / f * param * (d - 1) / d, layers)
    tensor_ars = 6 if cand.remat == "full" else 4
    add("all-reduce over tensor", t,
        2 * rows * spec.hidden_size * act * (t - 1) / t * tensor_ars * layers * micro_steps,
        tensor_ars * layers * micro_steps)  # fmt: skip
    # Expert layers gather the tokens of the devices along `expert` and reduce-scatter their
    # outputs back (models/feedforward/expert_dispatch.py); the backward pass does the reverse.
    expert_passes = 3 if cand.remat == "full" else 2  # forward, recompute, backward
    expert_layers = layers if spec.num_experts else 0
    for kind in ("all-gather", "reduce-scatter"):
        add(f"{kind} over expert", e,
            rows * spec.hidden_size * act * (e - 1) * expert_passes * expert_layers * micro_steps,
            expert_passes * expert_layers * micro_steps)  # fmt: skip
    # A stage hands its activations to the next one and receives their gradients back: once
    # each way per micro batch of its rows (`rows` is all of a stage's rows).
    add("collective-permute over pipeline", s["pipeline"],
        2 * rows * spec.hidden_size * act * micro_steps, 2 * s["pipeline"] * micro_steps)  # fmt: skip
    return out
