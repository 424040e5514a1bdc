"""Plain data passed between the engine, the drafters, the verifier and the benchmark."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How the target's logits become a distribution; the same processing is applied at every
    verified position and to stochastic drafts, so rejection sampling compares like with like."""

    temperature: float = 0.0
    top_k: Optional[int] = None
    top_p: Optional[float] = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Proposal:
    """What a drafter proposes for the active rows of the batch.

    tokens:     [B, D] drafted ids, row r valid in its first num_tokens[r] entries (rest: any id).
    num_tokens: [B] how many drafts each row offers (0 … D).
    probs:      [B, D, V] the processed draft distributions q the tokens were sampled from, or None
                for a deterministic drafter (q is one-hot on the token).
    confidence: [B, D] the drafter's estimate of P(position k accepted | positions < k accepted),
                or None; the run-time D scheduler reads it.
    """

    tokens: torch.Tensor
    num_tokens: torch.Tensor
    probs: Optional[torch.Tensor] = None
    confidence: Optional[torch.Tensor] = None

    @staticmethod
    def empty(batch_size: int, device: torch.device | str = "cpu") -> "Proposal":
        return Proposal(
            tokens=torch.zeros(batch_size, 0, dtype=torch.long, device=device),
            num_tokens=torch.zeros(batch_size, dtype=torch.long, device=device),
        )


@dataclass
class StepRecord:
    """One verification step of the whole batch (all times in seconds)."""

    emitted: list[int]        # L per active row: accepted drafts + 1
    drafted: list[int]        # drafts verified per active row
    rows: list[int]           # which requests (indices into the prompt list) were active
    t_target: float
    t_drafter: float
    t_other: float
    t_end: float              # time since generate() started, when the step's tokens were emitted


@dataclass
class GenerationStats:
    """Batch-level record of one generate() call."""

    steps: list[StepRecord] = field(default_factory=list)
    t_prefill: float = 0.0
    t_total: float = 0.0

    @property
    def t_target(self) -> float:
        return sum(s.t_target for s in self.steps)

    @property
    def t_drafter(self) -> float:
        return sum(s.t_drafter for s in self.steps)

    @property
    def t_other(self) -> float:
        return sum(s.t_other for s in self.steps)

    @property
    def num_tokens(self) -> int:
        return sum(sum(s.emitted) for s in self.steps)

    @property
    def mean_accept_length(self) -> float:
        n = sum(len(s.emitted) for s in self.steps)
        return self.num_tokens / n if n else 0.0


@dataclass
class GenerationOutput:
    """One request's result.

    token_ids:      generated ids only (after stop handling, EOS included when it ended the request).
    accept_lengths: per verification step, tokens emitted (accepted drafts + 1). The first token,
                    sampled from the prefill logits, is not a verification step and is not counted.
    num_drafted:    per verification step, drafted tokens that were verified.
    token_times:    seconds since generate() started at which each generated token was emitted.
    """

    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    accept_lengths: list[int]
    num_drafted: list[int]
    token_times: list[float]
    finish_reason: str  # "eos" | "stop" | "length"

    @property
    def mean_accept_length(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0


class GenerationResult(list):
    """list[GenerationOutput] with the batch's timing record attached as `.stats`."""

    stats: GenerationStats
