"""SuffixDecoding (Oliaro et al., arXiv 2411.04975): frequency-counted suffix tries over the current
request (prompt + output) and over earlier outputs of the session; the longer the match, the more
tokens it dares to propose."""
from __future__ import annotations

import math

import torch

from ..types import Proposal
from .base import DraftContext, Drafter, pad_proposals, register


class SuffixTrie:
    """Every substring of length ≤ depth, counted; appending a token extends the open suffixes."""

    def __init__(self, depth: int):
        self.depth = depth
        self.root: dict = {"n": 0, "c": {}}
        self._open: list[dict] = []  # nodes of the suffixes that end at the last appended token

    def extend(self, tokens) -> None:
        for t in tokens:
            nxt = []
            for node in [self.root] + self._open:
                child = node["c"].get(t)
                if child is None:
                    child = node["c"][t] = {"n": 0, "c": {}}
                child["n"] += 1
                nxt.append(child)
            self._open = nxt[: self.depth - 1] if self.depth > 1 else []
        # nxt[0] is the length-1 suffix; keep lengths 1..depth−1 open so they can grow to depth

    def end_sequence(self) -> None:
        self._open = []

    def _walk(self, tokens) -> dict | None:
        node = self.root
        for t in tokens:
            node = node["c"].get(t)
            if node is None:
                return None
        return node

    def match(self, context: list[int]) -> tuple[int, dict | None]:
        """Longest suffix of context (≤ depth − 1) found in the trie with a continuation, and its node.

        Every substring of indexed text is in the trie, so if the suffix of length m is, so are the
        shorter ones: a binary search finds the longest present suffix in O(log depth) walks; from
        there down, the first one whose node has children wins (usually the first)."""
        lo, hi = 0, min(len(context), self.depth - 1)   # suffix of length lo present (0: the root)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._walk(context[-mid:]) is not None:
                lo = mid
            else:
                hi = mid - 1
        for m in range(lo, 0, -1):
            node = self._walk(context[-m:])
            if node["c"]:
                return m, node
        return 0, None


def continuation(node: dict, limit: int, min_prob: float) -> tuple[list[int], float]:
    """Greedy most-frequent path; stops when the path's estimated probability drops below min_prob."""
    out, prob, score = [], 1.0, 0.0
    while node["c"] and len(out) < limit:
        total = sum(ch["n"] for ch in node["c"].values())
        tok, child = max(node["c"].items(), key=lambda kv: kv[1]["n"])
        prob *= child["n"] / total
        if prob < min_prob:
            break
        out.append(tok)
        score += prob
        node = child
    return out, score


class SuffixDrafter(Drafter):
    name = "suffix"
    catches_up = True

    def __init__(self, depth: int = 24, max_spec_factor: float = 2.0, min_token_prob: float = 0.1):
        self.depth, self.max_spec_factor, self.min_token_prob = depth, max_spec_factor, min_token_prob
        self.global_trie = SuffixTrie(depth)  # outlives batches: shared by the requests of a session
        self._local: list[SuffixTrie] = []
        self._seen: list[int] = []

    def start(self, ctx: DraftContext) -> None:
        # the prompts are indexed by the first proposal, not here: at depth 24 a 1k-token prompt
        # takes ~0.2 s of Python, which adaptive D that never drafts should not pay (the engine
        # tells the scheduler so, which then does not take the first one as a token's price)
        self._local = [SuffixTrie(self.depth) for _ in ctx.sequences]
        self._seen = [0] * len(ctx.sequences)

    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        rows = []
        for i, (seq, cap) in enumerate(zip(ctx.sequences, max_tokens.tolist())):
            trie = self._local[i]
            # index everything but the last token, so a match always has a continuation to offer
            trie.extend(seq[self._seen[i]: len(seq) - 1])
            self._seen[i] = len(seq) - 1
            best, best_score = [], 0.0
            for t in (trie, self.global_trie):
                m, node = t.match(seq)
                if node is None or cap <= 0:
                    continue
                limit = min(cap, math.ceil(self.max_spec_factor * m))
                toks, score = continuation(node, limit, self.min_token_prob)
                if score > best_score:
                    best, best_score = toks, score
            rows.append(best)
        return pad_proposals(rows, max_tokens.device)

    def reset(self) -> None:
        self.global_trie = SuffixTrie(self.depth)

    def select_rows(self, rows: torch.Tensor) -> None:
        keep = rows.tolist()
        self._local = [self._local[i] for i in keep]
        self._seen = [self._seen[i] for i in keep]

    def finish(self, sequences: list[list[int]], prompt_lengths: list[int]) -> None:
        for seq, n in zip(sequences, prompt_lengths):
            self.global_trie.extend(seq[n:])
            self.global_trie.end_sequence()


@register("suffix")
def _factory(arg, target, **options):
    kw = dict(part.split("=") for part in arg.split(",")) if arg else {}
    return SuffixDrafter(depth=int(kw.get("depth", 24)), max_spec_factor=float(kw.get("max_spec_factor", 2.0)),
                         min_token_prob=float(kw.get("min_token_prob", 0.1)))
