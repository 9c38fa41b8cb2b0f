"""jaxtrain parameters as a model of EleutherAI's lm-evaluation-harness (`lm-eval`).

    lm = JaxtrainLM(Scorer(graphdef, params, spec, setup=setup), tokenizer)
    lm_eval.simple_evaluate(model=lm, tasks=[...])

It tokenizes as the harness's own Hugging Face backend (`HFLM`) does: the tokenizer's default
special tokens, the context's trailing spaces moved to the continuation, the BOS token (or EOS
when there is none) as the context of an empty one, the same rolling windows for perplexity,
and the EOS text added to every generation's stop sequences. So a model exported to Hugging
Face scores the same under both. Every process runs every request (the harness sees one
process); `Scorer` splits each batch over the run's mesh and hands every process all results.
"""

from __future__ import annotations

from typing import Any

from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import handle_stop_sequences, postprocess_generated_text

from jaxtrain.evaluation.scoring import Scorer

# The harness's default for `max_gen_toks` (HFLM's too), for tasks that do not set it.
MAX_GEN_TOKS = 256


class JaxtrainLM(TemplateLM):
    """`loglikelihood`, `loglikelihood_rolling` and `generate_until` (greedy) on a `Scorer`."""

    def __init__(self, scorer: Scorer, tokenizer: Any):
        super().__init__()
        self.scorer = scorer
        self.tokenizer = tokenizer

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        """The longest sequence the model takes (`model.max_seq_len`)."""
        return self.scorer.max_len

    def tok_encode(
        self, string: str, add_special_tokens: bool | None = None, **kwargs: Any
    ) -> list[int]:
        options = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        bos = self.tokenizer.bos_token
        if add_special_tokens is None and bos and string.startswith(bos):
            options["add_special_tokens"] = False  # the text already starts with BOS
        return self.tokenizer.encode(string, **options)

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
        # Without the harness's tokenizing bar, which would cut into the training log's lines.
        return super().loglikelihood(requests, disable_tqdm=True)

    def _loglikelihood_tokens(
        self, requests: list[tuple[Any, list[int], list[int]]], **kwargs: Any
    ) -> list[tuple[float, bool]]:
        rows = [
            (context + continuation, len(continuation)) for _, context, continuation in requests
        ]
        results = self.scorer.loglikelihoods(rows)
        for (key, _, _), result in zip(requests, results):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, result)
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """The log-likelihood of each whole text, in the windows of `max_length` tokens the
        harness's Hugging Face backend uses."""
        windows, owners = [], []
        for index, (text,) in enumerate(req.args for req in requests):
            for context, continuation in map(
                lm_utils.make_disjoint_window,
                lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, context, continuation))
                owners.append(index)
        totals = [0.0] * len(requests)
        for index, (logprob, _) in zip(owners, self._loglikelihood_tokens(windows)):
            totals[index] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, stopped at the first of the request's stop sequences (and
        the EOS text), which is cut off as the harness's backends do."""
        eos = self.tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        out = []
        for req in requests:
            context, gen_kwargs = req.args
            kwargs = dict(gen_kwargs)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_new = int(
                kwargs.get("max_gen_toks") or kwargs.get("max_new_tokens") or MAX_GEN_TOKS
            )
            if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0:
                raise ValueError(
                    "jaxtrain's harness model decodes greedily; the task asks for sampling "
                    f"({gen_kwargs}). Set do_sample: false in its generation_kwargs."
                )

            def stopped(tokens: list[int], until: list[str] = until) -> bool:
                text = self.tokenizer.decode(tokens, skip_special_tokens=False)
                return any(stop and stop in text for stop in until)

            tokens = self.scorer.greedy_continuation(self.tok_encode(context), max_new, stopped)
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            text = postprocess_generated_text(text, until, None)
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            out.append(text)
        return out
