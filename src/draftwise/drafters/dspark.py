"""DSpark: a DFlash-style parallel backbone + a light sequential Markov head + a confidence head.

Backbone (one forward, see dflash.py) gives per-position logits U_k and states h_k, k = 1 … Bk−1.
Markov head (rank r): p_k(v) ∝ exp(U_k(v) + (W1[x_{k−1}] W2)(v)), x_0 = the pending token, so each
drafted token sees the token drafted before it; it runs per position but costs one r×V product.
Confidence head: c_k = σ((wᵀ[h_k ; W1[x_{k−1}]] + b) / T_k) ≈ P(position k accepted | prefix
accepted), T_k from sequential temperature scaling (train/calibrate.py; 1 until calibrated).

Drafted distributions are exact softmaxes of the processed logits: in sampling mode x_k ~ q_k =
process_logits(U_k + bias(x_{k−1})) and q_k is returned, so rejection sampling stays lossless.
"""
from __future__ import annotations

import torch
from torch import nn

from ..sampling import process_logits, sample
from ..types import Proposal
from .base import DraftContext, register
from .dflash import CONFIG_KEYS, BlockDrafter, DFlashModel, load
from .learned import register_config_keys

register_config_keys("dspark", CONFIG_KEYS + ("markov_rank", "confidence_temperatures", "calibration",
                                             "train_w_ce", "train_w_tv", "train_w_conf"))


class DSparkModel(DFlashModel):
    drafter_type = "dspark"

    def __init__(self, config: dict, embed: nn.Module, head: nn.Module):
        super().__init__(config, embed, head)
        V, d = config["vocab_size"], config["hidden_size"]
        r = int(config.get("markov_rank", 32))
        self.config["markov_rank"] = r
        self.markov_in = nn.Embedding(V, r)          # W1
        nn.init.normal_(self.markov_in.weight, std=1.0)
        self.markov_out = nn.Linear(r, V, bias=False)  # W2, zero: starts as the pure backbone
        nn.init.zeros_(self.markov_out.weight)
        self.conf = nn.Linear(d + r, 1)
        nn.init.zeros_(self.conf.weight)
        nn.init.constant_(self.conf.bias, 0.0)
        temps = config.get("confidence_temperatures") or [1.0] * (self.block_size - 1)
        self.register_buffer("conf_temps", torch.tensor(temps, dtype=torch.float32), persistent=False)

    def set_temperatures(self, temps) -> None:
        temps = [float(t) for t in temps]
        if len(temps) != self.block_size - 1:
            raise ValueError(f"need {self.block_size - 1} temperatures, got {len(temps)}")
        self.config["confidence_temperatures"] = temps
        self.conf_temps = torch.tensor(temps, dtype=torch.float32, device=self.conf_temps.device)

    def head_step(self, U: torch.Tensor, h: torch.Tensor, prev: torch.Tensor):
        """U [..., V] backbone logits, h [..., d] states, prev [...] previous tokens →
        (logits [..., V] float32, confidence logit [...] float32, before temperature)."""
        e = self.markov_in(prev)
        logits = U + self.markov_out(e).float()
        c = self.conf(torch.cat([h.to(e.dtype), e], -1)).squeeze(-1).float()
        return logits, c

    def forward(self, input_ids, hidden, anchors) -> dict:
        """Teacher-forced training pass: x_{k−1} = the sequence's true token (the accepted prefix)."""
        out = super().forward(input_ids, hidden, anchors)
        T, Bk = input_ids.shape[1], self.block_size
        idx = (anchors[..., None] + torch.arange(Bk - 1, device=anchors.device)).clamp(max=T - 1)  # [B, N, Bk−1]
        prev = input_ids.gather(1, idx.flatten(1)).view_as(idx)
        logits, conf = self.head_step(out["logits"], out["hidden"], prev)
        out["backbone_logits"], out["logits"], out["conf_logits"] = out["logits"], logits, conf
        return out


class DSparkDrafter(BlockDrafter):
    name = "dspark"

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        m: DSparkModel = self.model
        num, D = self._widths(max_tokens)
        if D == 0:
            self._ingest(ctx)
            self.last_conf_logits = torch.zeros(ctx.batch_size, 0, device=self.device)
            return Proposal.empty(ctx.batch_size, self.device)
        h = self._block(ctx)[:, :D]
        U = m.logits(h)  # [B, D, V]
        B = U.shape[0]
        prev = torch.tensor([s[-1] for s in ctx.sequences], device=self.device)
        tokens = torch.zeros(B, D, dtype=torch.long, device=self.device)
        conf = torch.zeros(B, D, device=self.device)
        raw = torch.zeros(B, D, device=self.device)
        probs = None if ctx.params.greedy else torch.zeros(B, D, U.shape[-1], device=self.device)
        temps = m.conf_temps.to(self.device)
        for k in range(D):
            logits, c = m.head_step(U[:, k], h[:, k], prev)
            if ctx.params.greedy:
                x = logits.argmax(-1)
            else:
                q = process_logits(logits, ctx.params)
                x = sample(q, ctx.generator)
                probs[:, k] = q
            tokens[:, k] = x
            raw[:, k] = c
            conf[:, k] = torch.sigmoid(c / temps[k])
            prev = x
        self.last_conf_logits = raw  # before temperature: read by train/calibrate.py
        return Proposal(tokens=tokens, num_tokens=num, probs=probs, confidence=conf)


@register("dspark")
def _factory(arg, target, **options):
    if isinstance(arg, DSparkModel):
        return DSparkDrafter(arg)
    if not arg:
        raise ValueError("dspark needs a checkpoint folder: 'dspark:PATH' (train one with `draftwise train dspark`)")
    return DSparkDrafter(load(arg, "dspark", target, cls=DSparkModel))
