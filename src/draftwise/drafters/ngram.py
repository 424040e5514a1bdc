"""Prompt lookup: find the latest earlier occurrence of the last n tokens, propose what followed."""
from __future__ import annotations

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from ..types import Proposal
from .base import DraftContext, Drafter, pad_proposals, register


def lookup(seq: np.ndarray, k: int, max_n: int, min_n: int) -> list[int]:
    """Continuation of the most recent match of the longest suffix (n from max_n down to min_n)."""
    L = len(seq)
    if k <= 0:
        return []
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        windows = sliding_window_view(seq[: L - 1], n)  # windows ending before the last token
        hits = np.flatnonzero((windows == seq[L - n:]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return seq[start: start + k].tolist()
    return []


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"ngram needs 1 ≤ min_n ≤ max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n = max_n, min_n

    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        caps = max_tokens.tolist()
        rows = [lookup(np.asarray(s, dtype=np.int64), k, self.max_n, self.min_n) if k > 0 else []
                for s, k in zip(ctx.sequences, caps)]   # no matching when nothing may be drafted
        return pad_proposals(rows, max_tokens.device)


@register("ngram")
def _factory(arg, target, **options):
    kw = dict(part.split("=") for part in arg.split(",")) if arg else {}
    return NgramDrafter(max_n=int(kw.get("max_n", options.get("max_n", 3))),
                        min_n=int(kw.get("min_n", options.get("min_n", 1))))
