"""The drafter protocol and the registry of drafter spec strings.

The engine talks to every drafting mechanism through four calls — `start`, `propose`, `accepted`,
`select_rows` — and never learns which one it has. A drafter sees the committed tokens of each
active row and, if it asks for them, the target's hidden states of the tokens the last target
forward kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..target import pad_rows
from ..types import Proposal, SamplingParams


@dataclass
class DraftContext:
    """What a drafter may read, one entry per active row.

    sequences:  prompt + generated tokens so far; the last one is the token the target has not
                processed yet (the drafter continues after it).
    hidden:     {layer: [B, W, d]} target hidden states (only the layers the drafter asked for) of
                the tokens the latest target forward kept, left-aligned: row r's first
                num_hidden[r] entries are the features of sequences[r][-1 - num_hidden[r] : -1].
    """

    sequences: list[list[int]]
    params: SamplingParams
    generator: torch.Generator | None
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)
    num_hidden: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return len(self.sequences)


class Drafter:
    """Base class. Subclasses override `propose`; the rest defaults to a stateless drafter."""

    name: str = "drafter"
    hidden_layers: tuple[int, ...] = ()  # target layers whose hidden states propose() needs
    parallel: bool = False               # drafts the whole block in one forward (cost ≈ flat in D)
    # rebuilds its state from ctx.sequences alone, so the engine may skip it on steps that draft
    # nothing (it catches up on the next proposal); drafters fed the target's per-step hidden
    # states cannot, they would miss those features
    catches_up: bool = False
    # under greedy decoding its proposal for a row is a function of that row's tokens alone (no
    # target features, nothing learned from earlier requests): one run then tells what it proposes
    # at every position, for every draft length (`planner.trace`)
    from_prefix: bool = False

    def start(self, ctx: DraftContext) -> None:
        """A new batch begins: after the prefill, or, for a drafter that `catches_up` under a
        run-time scheduler (which may decode the whole batch plain), just before its first
        proposal, with `ctx.sequences` holding every token committed so far."""

    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        """Up to max_tokens[r] drafted tokens for each row."""
        raise NotImplementedError

    def accepted(self, num_accepted: torch.Tensor) -> None:
        """How many of the last proposal's tokens each row kept (roll back own state)."""

    def select_rows(self, rows: torch.Tensor) -> None:
        """Only these rows stay in the batch."""

    def finish(self, sequences: list[list[int]], prompt_lengths: list[int]) -> None:
        """Requests ended (session-level learning, e.g. a global suffix tree)."""

    def reset(self) -> None:
        """Forget what was learned across requests (a new session; benchmarks call it per configuration)."""


def pad_proposals(rows: list[list[int]], device="cpu") -> Proposal:
    """A deterministic Proposal from per-row token lists."""
    tokens, num = pad_rows(rows, device)
    return Proposal(tokens=tokens, num_tokens=num)


# name → factory(argument after the colon or None, target ModelRunner, **options) → Drafter
REGISTRY: dict[str, Callable[..., Drafter]] = {}


def register(name: str):
    def deco(factory):
        REGISTRY[name] = factory
        return factory
    return deco


def build_drafter(spec, target, **options) -> Drafter | None:
    """Turn a spec into a drafter: None, "ngram", "suffix", "draft-model:PATH", "eagle3:PATH", …,
    a loaded PreTrainedModel (used as a draft model) or a Drafter object (returned as is)."""
    from transformers import PreTrainedModel

    if spec is None or isinstance(spec, Drafter):
        return spec
    if isinstance(spec, PreTrainedModel):
        return REGISTRY["draft-model"](spec, target, **options)
    if not isinstance(spec, str):
        raise TypeError(f"drafter must be None, a spec string, a PreTrainedModel or a Drafter, not {type(spec).__name__}")
    name, _, arg = spec.partition(":")
    if name not in REGISTRY:
        raise ValueError(f"unknown drafter {name!r}; choose one of {sorted(REGISTRY)} "
                         "(e.g. 'ngram', 'suffix', 'draft-model:PATH')")
    return REGISTRY[name](arg or None, target, **options)
