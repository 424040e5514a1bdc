"""Logits → processed distribution (temperature, top-k, top-p), in Hugging Face's order.

Every distribution the verifier compares — the target's at each verified position and a stochastic
drafter's q — goes through this one function, so p and q are processed identically.
"""
from __future__ import annotations

import torch

from .types import SamplingParams


def check_sampling_params(temperature: float, top_k: int | None, top_p: float | None) -> SamplingParams:
    if temperature is None or temperature < 0:
        raise ValueError(f"temperature must be ≥ 0 (0 means greedy), got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be an integer ≥ 1 (or None to disable), got {top_k}")
    if top_p is not None and not (0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] (or None to disable), got {top_p}")
    return SamplingParams(float(temperature), None if top_k is None else int(top_k), top_p)


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities over the last dimension after temperature → top-k → top-p (float32).

    Greedy (temperature 0) returns the one-hot argmax distribution, so callers can treat greedy as
    sampling from a point mass.
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k is not None and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1.0:
        # HF TopPLogitsWarper: drop the low tail whose cumulative mass is ≤ 1 − top_p, keep ≥ 1 token.
        sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=False)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove_sorted = cum <= (1.0 - params.top_p)
        remove_sorted[..., -1] = False
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of a [..., V] probability tensor."""
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return out.reshape(probs.shape[:-1])
