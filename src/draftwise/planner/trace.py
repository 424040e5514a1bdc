"""Acceptance at every draft length D from one greedy run: where a step starts depends on D.

The α_k measured at one D describe the steps that D takes. Where acceptance has memory, another D
takes other steps: prompt lookup accepts long runs where the text repeats itself, so at D = 8 a
repeated passage is swallowed by a few long steps and the steps start mostly where the text is
new, while at D = 2 several steps start inside each repeated passage, and their first drafts are
accepted far more often. Priced with the α_k of D = 8, D = 1–3 at batch 1 came out 10–13 % slower
than measured in session 18; traced, they match to two decimals (BENCHMARKS §5.0, session 19).

Under greedy decoding the output is the same at every D (lossless), and a drafter whose proposal
is a function of the row's own tokens (`Drafter.from_prefix`: prompt lookup, a draft model
drafting greedily) proposes the same continuation at a given position whatever D brought the
engine there. So one run tells, at every output position t, what the drafter proposes there and
how many of those drafts the target accepts; walking the output as the engine would, at cap D,
gives the steps of D exactly (tests/test_planner_trace.py checks them against the engine's).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from ..drafters.base import DraftContext
from ..types import SamplingParams
from .acceptance import Acceptance

Trace = list[tuple[int, int]]     # per output position: (drafts proposed there, of them accepted)


def trace_request(drafter, prompt: Sequence[int], output: Sequence[int], max_draft: int) -> Trace:
    """At each position t of `output` (the greedy continuation of `prompt`): the drafts the
    drafter proposes after prompt + output[:t] (at most `max_draft`, and none past the output's
    end) and how many of them lead output[t:]. The drafter is driven through its engine protocol,
    one committed token a step, every draft rejected (its state then follows the output)."""
    if not getattr(drafter, "from_prefix", False):
        raise ValueError(f"{type(drafter).__name__}'s proposals depend on more than the row's own tokens "
                         f"(target features, or what earlier requests taught it): a trace of one run "
                         f"cannot stand for other draft lengths; measure each D instead")
    out = [int(x) for x in output]
    if not prompt:
        raise ValueError("trace_request needs a non-empty prompt")
    ctx = DraftContext(sequences=[[int(x) for x in prompt]], params=SamplingParams(), generator=None)
    drafter.start(ctx)
    trace: Trace = []
    for t in range(len(out)):
        cap = min(int(max_draft), len(out) - t - 1)
        if cap > 0:
            prop = drafter.propose(ctx, torch.tensor([cap]))
            n = int(prop.num_tokens[0])
            drafts = prop.tokens[0, :n].tolist()
            drafter.accepted(torch.zeros(1, dtype=torch.long))
        else:
            n, drafts = 0, []
        agree = 0
        while agree < n and drafts[agree] == out[t + agree]:
            agree += 1
        trace.append((n, agree))
        ctx.sequences[0].append(out[t])
    return trace


def walk(trace: Trace, D: int, max_new_tokens: int) -> tuple[list[int], list[int]]:
    """The engine's steps over a traced output at draft length D: (tokens each step emits, drafts
    it verifies). A row drafts min(D, tokens it may still generate − 1), as the engine caps it."""
    lengths, drafted = [], []
    t = 0
    while t < len(trace):
        proposed, agree = trace[t]
        k = max(0, min(proposed, int(D), max_new_tokens - t - 1))
        L = min(agree, k) + 1
        lengths.append(L)
        drafted.append(k)
        t += L
    return lengths, drafted


def acceptance_by_draft_length(traces: Sequence[Trace], max_draft: int, max_new_tokens: int,
                               name: str = "default", shrink: bool = True) -> Acceptance:
    """`Acceptance` at D = `max_draft` with `by_draft_length` for every D = 1 … max_draft, each from
    the steps that D takes over the traced outputs (one trace per request)."""
    if not traces:
        raise ValueError("acceptance_by_draft_length needs at least one traced request")
    per_d = {}
    for D in range(1, int(max_draft) + 1):
        records = [{"outputs": [dict(zip(("step_lengths", "drafted"), walk(t, D, max_new_tokens)))]} for t in traces]
        acc = Acceptance.from_records(records, D, max_new_tokens, name=name, shrink=shrink)
        acc.source = f"traced: {len(traces)} requests walked at D = {D}"
        per_d[D] = acc
    return dataclasses.replace(per_d[int(max_draft)], by_draft_length=per_d)
