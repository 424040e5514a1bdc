"""Prompt lookup: find the latest earlier occurrence of the last n tokens, propose what followed.

A match that ends p < k tokens before the end implies a period p (the text is repeating itself):
the continuation is then extended cyclically, so a loop yields k drafts rather than p.

Each proposal carries a confidence from the matched length: draft j (0-based) of a match of n tokens
extends a match of m = n + j tokens once the drafts before it are accepted, and m / (m + 2) is the
prior for it (a rule of succession: the longer the text has repeated, the likelier it goes on).
Measured on the reference target (greedy, 16 prompts of each set), the first draft of a 3-token
match is accepted 59–82 % of the time, of a 1-token match 20–39 %, and later drafts more often the
longer the match — which the rule follows. A fixed D verifies all matches alike; the run-time
scheduler calibrates acceptance per confidence and verifies what pays. The value depends on the
context alone, never on the target's verdict, so adaptive decoding stays lossless."""
from __future__ import annotations

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from ..types import Proposal
from .base import DraftContext, Drafter, pad_proposals, register


def prior(m):
    """A draft's confidence once it extends a match to m tokens (scalars or tensors alike)."""
    return m / (m + 2)


def lookup(seq: np.ndarray, k: int, max_n: int, min_n: int) -> list[int]:
    """Continuation of the most recent match of the longest suffix (n from max_n down to min_n).

    The stateless reference: it rescans the whole sequence, O(L·n) per call. The drafter uses
    `NgramIndex`, which gives the same answer in O(n) per new token."""
    L = len(seq)
    if k <= 0:
        return []
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        windows = sliding_window_view(seq[: L - 1], n)  # windows ending before the last token
        hits = np.flatnonzero((windows == seq[L - n:]).all(axis=1))
        if hits.size:
            return continuation(seq.tolist(), int(hits[-1]) + n, k)
    return []


def continuation(seq: list[int], e: int, k: int) -> list[int]:
    """k tokens after position e, continuing with period len(seq) − e past the end."""
    out = seq[e:e + k]
    p = len(seq) - e
    while len(out) < k:
        out.append(out[len(out) - p])
    return out


class NgramIndex:
    """One row's n-grams → end of their latest occurrence, grown as tokens are committed.

    The n-grams that end at the last token are indexed one call late: a match must end before the
    last token, or every suffix would match itself."""

    def __init__(self, max_n: int, min_n: int):
        self.sizes = range(min_n, max_n + 1)
        self.ends: dict[int, dict[tuple, int]] = {n: {} for n in self.sizes}
        self.upto = 0   # n-grams ending at positions ≤ upto are indexed

    def lookup(self, seq: list[int], k: int) -> list[int]:
        return self.match(seq, k)[0]

    def match(self, seq: list[int], k: int) -> tuple[list[int], int]:
        """(continuation, n of the matched suffix); ([], 0) without a match."""
        L = len(seq)
        if L - 1 < self.upto:
            raise ValueError("NgramIndex: the sequence got shorter; build a new index for a new sequence")
        for n in self.sizes:
            # the n-grams seq[e - n:e] for e = lo … L − 1, built by zip and stored by dict.update
            # (both in C, a later end overwriting an earlier one): a 1k-token prompt in ~0.6 ms,
            # where a Python loop over tuples took 3.7 ms
            lo = max(self.upto + 1, n)
            if lo < L:
                self.ends[n].update(zip(zip(*(seq[lo - n + i:L - n + i] for i in range(n))), range(lo, L)))
        self.upto = L - 1
        if k <= 0:
            return [], 0
        for n in reversed(self.sizes):
            if n <= L - 1:
                e = self.ends[n].get(tuple(seq[L - n:]))
                if e is not None:
                    return continuation(seq, e, k), n
        return [], 0


class NgramDrafter(Drafter):
    name = "ngram"
    catches_up = True
    from_prefix = True

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"ngram needs 1 ≤ min_n ≤ max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n = max_n, min_n
        self._rows: list[NgramIndex] = []

    def start(self, ctx: DraftContext) -> None:
        # index the prompts now (0.6 ms for 1k tokens), not in the first proposal: a proposal's
        # time is the drafter's price per token to the run-time scheduler, and a 1k-token prompt
        # indexed there (then 3.7 ms, a third of a target step) priced prompt lookup at 3.7 ms a
        # token — adaptive D never drafted again, so never saw the real price (~0.03 ms)
        self._rows = [NgramIndex(self.max_n, self.min_n) for _ in ctx.sequences]
        for idx, seq in zip(self._rows, ctx.sequences):
            idx.match(seq, 0)

    def select_rows(self, rows: torch.Tensor) -> None:
        self._rows = [self._rows[r] for r in rows.tolist()]

    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        if len(self._rows) != len(ctx.sequences):   # called outside the engine's start/select_rows
            self.start(ctx)
        caps = max_tokens.tolist()
        found = [idx.match(s, k) for idx, s, k in zip(self._rows, ctx.sequences, caps)]
        prop = pad_proposals([f[0] for f in found], max_tokens.device)
        # the confidences as lists, one tensor build: the torch ops they took (~20 µs) were a
        # percent of a plain step on a host whose step at batch 1 takes 2.5 ms (BENCHMARKS, session 25)
        W = prop.tokens.shape[1]
        conf = torch.tensor([[prior(float(n + j)) for j in range(W)] if n > 0 else [0.0] * W for _, n in found],
                            dtype=torch.float32, device=max_tokens.device)
        prop.confidence = conf if found and W else conf.reshape(len(found), W)   # ([] or [[]]: no shape to infer)
        return prop


@register("ngram")
def _factory(arg, target, **options):
    kw = dict(part.split("=") for part in arg.split(",")) if arg else {}
    return NgramDrafter(max_n=int(kw.get("max_n", options.get("max_n", 3))),
                        min_n=int(kw.get("min_n", options.get("min_n", 1))))
