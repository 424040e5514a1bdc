"""The batched decoding loop: draft → verify in one target forward → roll back → emit.

Plain decoding is the same loop with no drafter (D = 0), so baselines pay the same overheads.
Each row keeps its own number of accepted tokens; finished rows leave the batch.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .drafters.base import DraftContext, Drafter
from .target import ModelRunner, pad_rows
from .types import GenerationOutput, GenerationResult, GenerationStats, Proposal, SamplingParams, StepRecord
from .verify import verify

StreamCallback = Callable[[int, list[int]], None]
DraftScheduler = Callable[[Proposal], torch.Tensor]  # → how many drafts each row gets verified (or `.counts`: a list)


@dataclass
class _Request:
    prompt: list[int]
    out: list[int]
    accept_lengths: list[int]
    num_drafted: list[int]
    token_times: list[float]
    finish_reason: str | None = None


class StopChecker:
    """EOS ids, stop strings and the token budget; cuts a step's tokens where the request ends."""

    def __init__(self, eos_ids: set[int], stop: list[str], max_new_tokens: int, tokenizer):
        if stop and tokenizer is None:
            raise ValueError("stop strings need a tokenizer to decode the output; pass tokenizer=…")
        self.eos_ids, self.stop, self.max_new, self.tok = eos_ids, stop, max_new_tokens, tokenizer
        self._tail = max((len(s) for s in stop), default=0) + 16

    def cut(self, req: _Request, new: list[int]) -> list[int]:
        """Append as much of `new` as the request takes; set finish_reason when it ends."""
        taken = []
        for t in new:
            taken.append(t)
            req.out.append(t)
            if t in self.eos_ids:
                req.finish_reason = "eos"
            elif self.stop and self._hits_stop(req.out):
                req.finish_reason = "stop"
            elif len(req.out) >= self.max_new:
                req.finish_reason = "length"
            if req.finish_reason:
                break
        return taken

    def _hits_stop(self, out: list[int]) -> bool:
        tail = self.tok.decode(out[-self._tail:], skip_special_tokens=False)
        return any(s in tail for s in self.stop)


_ROW_IDS = itertools.count()


@torch.inference_mode()   # the whole loop: each small op then skips autograd's dispatch
def decode(
    target: ModelRunner,
    drafter: Drafter | None,
    prompts: list[list[int]],
    params: SamplingParams,
    num_draft_tokens: int,
    stopper: StopChecker,
    generator: torch.Generator | None = None,
    stream: StreamCallback | None = None,
    scheduler: DraftScheduler | None = None,
) -> GenerationResult:
    dev = target.device
    t_begin = time.perf_counter()
    now = lambda: time.perf_counter() - t_begin  # noqa: E731
    B = len(prompts)
    reqs = [_Request(list(p), [], [], [], []) for p in prompts]
    row_ids = [next(_ROW_IDS) for _ in prompts]    # for the scheduler: a row's own history, never reused
    stats = GenerationStats()
    hidden_layers = drafter.hidden_layers if drafter is not None else ()
    # a scheduler that learns from verified steps (AdaptiveDraftLength) also sets the draft length
    learner = scheduler if hasattr(scheduler, "draft_cap") and hasattr(scheduler, "observe") else None
    counts = getattr(scheduler, "counts", None)
    skippable = drafter is not None and drafter.catches_up
    fresh = skippable     # its first proposal also feeds it the prompts: a one-off, not a price
    if learner is not None:
        learner.skips_idle = skippable   # a step that drafts nothing then costs the drafter nothing
    # one that can read each row's emitted tokens (`AdaptiveDraftLength._shadow`) gets them
    sees = learner is not None and hasattr(learner, "sees_emitted")
    if sees:
        learner.sees_emitted = True

    # Prefill all but the last prompt token; the loop then starts with that token pending, so the
    # first step already speculates and every generated token comes out of a verification step.
    target.reset(B)
    tokens, lengths = pad_rows([p[:-1] for p in prompts], dev)
    hidden = {}
    if tokens.shape[1] > 0:
        _, hidden = target.forward(tokens, lengths, hidden_layers, need_logits=False)
    stats.t_prefill = now()
    active = list(range(B))
    ctx = DraftContext(sequences=[list(p) for p in prompts], params=params, generator=generator,
                       hidden=hidden, num_hidden=lengths)
    # a drafter that catches up (prompt lookup, suffix, a draft model) starts at its first proposal
    # where a scheduler may decode the whole batch plain: prompt lookup indexing 4 prompts of 1k
    # tokens took 1.5 ms a batch, 0.3 % of it where adaptive D never drafted (BENCHMARKS, session 39)
    started = drafter is not None and not (learner is not None and skippable)
    if started:
        drafter.start(ctx)

    # plain steps the learner decided ahead (`plain_ahead`), at `ahead_rows` rows: taken without
    # asking it each step, their times handed back (`coasted`) before it next decides
    ahead, ahead_rows, coast_times = 0, 0, []
    while active:
        t0 = time.perf_counter()
        n = len(active)
        # plain Python until a drafter runs: a step that drafts nothing (plain decoding, or adaptive
        # D choosing none) then costs no more than plain decoding's own bookkeeping
        drafting = drafter is not None and num_draft_tokens > 0
        coasting = drafting and ahead > 0 and n == ahead_rows
        if coasting:
            ahead -= 1
            drafting = False
        cap = num_draft_tokens
        if drafting:
            remaining = [stopper.max_new - len(reqs[i].out) - 1 for i in active]
        if drafting and learner is not None:   # how many to draft at all, from past steps only
            if coast_times:
                learner.coasted(coast_times)
                coast_times = []
            ahead = 0
            cap = min(cap, learner.draft_cap(n, num_draft_tokens, remaining=remaining,
                                             catch_up=stats.t_prefill if fresh else 0.0,
                                             rows=[row_ids[i] for i in active]))
            if cap <= 0 and skippable and hasattr(learner, "plain_ahead"):
                ahead, ahead_rows = learner.plain_ahead(n), n
        if drafting and skippable and (cap <= 0 or max(remaining) <= 0):
            drafting = False                   # nothing to draft: leave the drafter to catch up later
        t_started = 0.0
        if drafting and not started:    # its time: the drafter's in the stats, outside the scheduler's price of drafting
            t_started = time.perf_counter()
            drafter.start(ctx)
            started, t_started = True, time.perf_counter() - t_started
        if drafting:
            caps_l = [min(max(r, 0), cap) for r in remaining]
            prop = drafter.propose(ctx, torch.tensor(caps_l, device=dev))
            # the counts to verify on lists, one tensor built (a scheduler with `counts` gives a list)
            k_l = [min(a, c) for a, c in zip(prop.num_tokens.tolist(), caps_l)]
            if scheduler is not None:
                picked = counts(prop) if counts is not None else scheduler(prop).tolist()
                k_l = [min(a, b) for a, b in zip(k_l, picked)]
            prop.num_tokens = torch.tensor(k_l, dtype=torch.long, device=dev)
        else:
            prop = Proposal.empty(n, dev)
            k_l = [0] * n
        t1 = time.perf_counter()

        k = prop.num_tokens
        width = max(k_l, default=0)
        drafts = prop.tokens[:, :width]
        drafts_l = drafts.tolist()
        # the block to verify, each row's pending token then its drafts, built from lists in one
        # tensor op (on caches the last forward left cold each small op costs ~5–10 µs)
        block = torch.tensor([[seq[-1]] + d for seq, d in zip(ctx.sequences, drafts_l)], dtype=torch.long, device=dev)
        target.mark()
        logits, hidden = target.forward(block, [x + 1 for x in k_l], hidden_layers)
        t2 = time.perf_counter()
        probs = prop.probs[:, :width] if prop.probs is not None else None
        num_acc, nxt = verify(logits, drafts, k, probs, params, generator)
        t3 = time.perf_counter()
        acc_l, nxt_l = num_acc.tolist(), nxt.tolist()
        target.rollback([a + 1 for a in acc_l])
        t4 = time.perf_counter()
        if drafting:
            drafter.accepted(num_acc)
        t5 = time.perf_counter()

        stamp = now()
        emitted, news = [], []
        for j, i in enumerate(active):
            new = drafts_l[j][: acc_l[j]] + [nxt_l[j]]
            news.append(new)
            taken = stopper.cut(reqs[i], new)
            reqs[i].accept_lengths.append(acc_l[j] + 1)
            reqs[i].num_drafted.append(k_l[j])
            reqs[i].token_times.extend([stamp] * len(taken))
            ctx.sequences[j].extend(new)  # the drafter continues after the full step
            emitted.append(acc_l[j] + 1)
            if stream:
                stream(i, taken)
        ctx.hidden, ctx.num_hidden = hidden, (num_acc + 1 if hidden else None)   # (features kept per row)
        t_drafter = (t1 - t0) + (t5 - t4)
        stats.steps.append(StepRecord(
            emitted=emitted, drafted=k_l, rows=list(active),
            t_target=(t2 - t1) + (t4 - t3), t_drafter=t_drafter, t_other=0.0, t_end=stamp))
        if coasting:
            coast_times.append(time.perf_counter() - t0 - t_drafter)
        elif learner is not None and drafter is not None and num_draft_tokens > 0:
            # the step's price is everything but drafting: the target forward, the acceptance test
            # and this loop's bookkeeping, which every width pays (forward alone made a 9-token
            # verification look 2.0 plain steps at batch 1 where the whole step cost 1.7)
            learner.observe(k_l, acc_l, t_drafter - t_started if drafting else 0.0, int(prop.tokens.shape[1]),
                            offered=caps_l if drafting else None, target_seconds=time.perf_counter() - t0 - t_drafter,
                            catch_up=fresh and drafting, **({"emitted": news} if sees else {}))
        fresh = fresh and not drafting
        active, ctx = _drop_finished(reqs, active, ctx, target, drafter if started else None)
        stats.steps[-1].t_other = (time.perf_counter() - t0) - stats.steps[-1].t_target - stats.steps[-1].t_drafter

    stats.t_total = now()
    if coast_times:
        learner.coasted(coast_times)
    if drafter is not None:
        drafter.finish([r.prompt + r.out for r in reqs], [len(r.prompt) for r in reqs])
    result = GenerationResult(
        GenerationOutput(prompt_token_ids=r.prompt, token_ids=r.out, text="", accept_lengths=r.accept_lengths,
                         num_drafted=r.num_drafted, token_times=r.token_times, finish_reason=r.finish_reason or "length")
        for r in reqs)
    result.stats = stats
    return result


def _drop_finished(reqs, active, ctx, target, drafter):
    keep = [j for j, i in enumerate(active) if reqs[i].finish_reason is None]
    if len(keep) == len(active):
        return active, ctx
    rows = torch.tensor(keep, dtype=torch.long, device=target.device)
    target.select_rows(rows)
    if drafter is not None:
        drafter.select_rows(rows)
    ctx.sequences = [ctx.sequences[j] for j in keep]
    ctx.hidden = {layer: h.index_select(0, rows) for layer, h in ctx.hidden.items()}
    ctx.num_hidden = ctx.num_hidden.index_select(0, rows) if ctx.num_hidden is not None else None
    return [active[j] for j in keep], ctx
