"""Text generation with a key/value cache: greedy, temperature and top-k sampling.

The prompt is run once (prefill) and each new token is one cached decode step, so generating
N tokens costs N small forward passes rather than N full ones.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx


def load_tokenizer(folder: str | Path) -> Any:
    """A Hugging Face tokenizer from a local folder (transformers is imported only here)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@functools.partial(jax.jit, static_argnums=0)
def _forward(
    graphdef: nnx.GraphDef, params: Any, tokens_BL: jax.Array, cache: Any, index: jax.Array
) -> tuple[jax.Array, Any]:
    model = nnx.merge(graphdef, params)
    h_BLD, cache = model.hidden_states(tokens_BL, cache=cache, cache_index=index)
    return model.logits(h_BLD[:, -1:])[:, 0].astype(jnp.float32), cache


def _pick(logits_BV: jax.Array, key: jax.Array, temperature: float, top_k: int) -> jax.Array:
    if temperature <= 0:
        return jnp.argmax(logits_BV, axis=-1)
    logits_BV = logits_BV / temperature
    if top_k:
        kth = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
        logits_BV = jnp.where(logits_BV < kth, -jnp.inf, logits_BV)
    return jax.random.categorical(key, logits_BV, axis=-1)


def generate(
    model: nnx.Module,
    prompt_ids: list[int],
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int = 0,
    seed: int = 0,
    eos_id: int | None = None,
) -> list[int]:
    """The prompt's continuation (new token ids only), stopping early at `eos_id`."""
    if not prompt_ids:
        raise ValueError("generate() needs a non-empty prompt (at least one token id).")
    spec = model.spec
    total = len(prompt_ids) + max_new_tokens
    if total > spec.max_seq_len:
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens) + max_new_tokens "
            f"({max_new_tokens}) exceeds model.max_seq_len={spec.max_seq_len}."
        )
    graphdef, state = nnx.split(model)
    params = nnx.to_pure_dict(state)
    cache = model.init_cache(1, total)
    key = jax.random.key(seed)
    logits, cache = _forward(
        graphdef, params, jnp.asarray([prompt_ids], jnp.int32), cache, jnp.int32(0)
    )
    out: list[int] = []
    for i in range(max_new_tokens):
        key, sub = jax.random.split(key)
        token = int(_pick(logits, sub, temperature, top_k)[0])
        out.append(token)
        if eos_id is not None and token == eos_id:
            break
        logits, cache = _forward(
            graphdef,
            params,
            jnp.asarray([[token]], jnp.int32),
            cache,
            jnp.int32(len(prompt_ids) + i),
        )
    return out


def complete(model: nnx.Module, tokenizer: Any, prompt: str, **kwargs: Any) -> str:
    """Decodes the continuation of a text prompt with a Hugging Face tokenizer."""
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    new_ids = generate(model, ids, eos_id=tokenizer.eos_token_id, **kwargs)
    return tokenizer.decode(new_ids, skip_special_tokens=True)


def print_sample(model: nnx.Module, cfg: Any, step: int) -> str:
    """Continues a run config's `sample.prompt` with `model` (trained to `step`) and prints it;
    needs `data.tokenizer` to encode the prompt."""
    if not cfg.data.tokenizer:
        print("sample: skipped (data.tokenizer names no tokenizer to encode the prompt)")
        return ""
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    text = complete(
        model,
        tokenizer,
        cfg.sample.prompt,
        max_new_tokens=cfg.sample.max_new_tokens,
        temperature=cfg.sample.temperature,
        top_k=cfg.sample.top_k,
        seed=cfg.run.seed,
    )
    print(f"sample (step {step}): {cfg.sample.prompt}{text}", flush=True)
    return text
