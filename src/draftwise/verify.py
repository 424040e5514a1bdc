"""Chain verification: how many drafted tokens each row keeps, and the token the target adds.

Greedy keeps the longest prefix equal to the target's argmax. Sampling is the rejection rule of
Leviathan et al. / Chen et al.: accept x_k with probability min(1, p_k(x_k)/q_k(x_k)); at the first
rejection draw from norm(max(0, p_k − q_k)); if every draft survives draw the bonus from p_{k+1}.
A deterministic drafter has q = one-hot, which turns the residual into "p with x removed".
The result is distributed exactly as the target's processed distribution, whatever q is.
"""
from __future__ import annotations

import torch

from .sampling import process_logits
from .types import SamplingParams


def accept_probability(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x)/q(x)); a drafted token always has q(x) > 0."""
    return (p_x / q_x.clamp_min(1e-30)).clamp(max=1.0)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)): where to sample after a rejection. Float round-off can empty it when
    p ≈ q; p is then the exact limit."""
    r = (p - q).clamp_min(0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 1e-12, r / mass.clamp_min(1e-30), p)


# Greedy verification of up to this many (row, position) pairs compares in Python: one argmax
# and a few list conversions instead of a dozen small tensor ops, each ~5–10 µs on caches the
# target's forward left cold (~0.1 ms of a 4 ms step at batch 1)
GREEDY_LISTS = 256


def _greedy_small(target_logits, draft_tokens, num_drafts):
    """The greedy rule on lists: the longest prefix of drafts equal to the target's argmax."""
    best = target_logits.argmax(-1).tolist()
    drafts, counts = draft_tokens.tolist(), num_drafts.tolist()
    num_acc, nxt = [], []
    for b, d, n in zip(best, drafts, counts):
        a, n = 0, min(n, len(d))
        while a < n and d[a] == b[a]:
            a += 1
        num_acc.append(a)
        nxt.append(b[a])
    dev = target_logits.device
    return torch.tensor(num_acc, dtype=torch.long, device=dev), torch.tensor(nxt, dtype=torch.long, device=dev)


def verify(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    num_drafts: torch.Tensor,
    draft_probs: torch.Tensor | None,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (num_accepted [B], next_token [B]).

    target_logits: [B, W, V] with W ≥ 1 + max(num_drafts); position j scores the token after
    input j, so positions 0..k−1 score the k drafts and position k gives the bonus.
    """
    B, W, V = target_logits.shape
    D = draft_tokens.shape[1]
    if params.greedy and B * W <= GREEDY_LISTS:
        return _greedy_small(target_logits, draft_tokens, num_drafts)
    pos = torch.arange(D, device=target_logits.device)
    valid = pos[None, :] < num_drafts[:, None]
    if params.greedy:
        best = target_logits.argmax(-1)  # [B, W]
        match = (draft_tokens == best[:, :D]) & valid
        num_acc = match.long().cumprod(-1).sum(-1)
        return num_acc, best.gather(1, num_acc[:, None]).squeeze(1)

    p = process_logits(target_logits, params)  # [B, W, V]
    safe_tokens = draft_tokens.clamp(0, V - 1)
    p_x = p[:, :D].gather(-1, safe_tokens[..., None]).squeeze(-1)
    q_x = (draft_probs[:, :D].gather(-1, safe_tokens[..., None]).squeeze(-1)
           if draft_probs is not None else torch.ones_like(p_x))
    u = torch.rand(B, D, generator=generator, device=p.device)
    accept = (u < accept_probability(p_x, q_x)) & valid
    num_acc = accept.long().cumprod(-1).sum(-1)

    rows = torch.arange(B, device=p.device)
    p_sel = p[rows, num_acc]  # [B, V]: target distribution where the row stops
    rejected = num_acc < num_drafts
    idx = num_acc.clamp(max=max(D - 1, 0))
    if D == 0:
        q_sel = torch.zeros_like(p_sel)
    elif draft_probs is not None:
        q_sel = draft_probs[rows, idx].float()
    else:
        q_sel = torch.nn.functional.one_hot(safe_tokens[rows, idx], V).float()
    q_sel = q_sel * rejected[:, None]  # the bonus (all accepted) samples from p itself
    next_token = torch.multinomial(residual(p_sel, q_sel), 1, generator=generator).squeeze(-1)
    return num_acc, next_token
