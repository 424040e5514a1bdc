"""EAGLE-3 (Li et al., arXiv 2503.01840): a one-layer drafter on fused low/mid/high target features.

Position t of the drafter reads the pair (feature of position t, embedding of token t+1) and its
output predicts token t+2; the output feature replaces the target's feature at the next position when
the drafter runs ahead of the target (a chain of D steps). Committed positions always use the
target's own features: after each verification the drafted entries of the drafter's small KV cache
are dropped and the newly committed positions are fed from the target's hidden states.

`ChainModel` / `ChainDrafter` hold what EAGLE-3 and MTP (drafters/mtp.py) share: the pairing, the
cache, the chain, and the protocol; the two differ only in how a feature and a token embedding enter
the block (`fuse` and `step`).
"""
from __future__ import annotations

import torch
from torch import nn

from ..types import Proposal
from .base import DraftContext, register
from .learned import (Attention, FeatureDrafter, MLP, RaggedKV, RMSNorm, _Frozen, attention_shape,
                      default_layer_ids, final_norm, frozen_embedding_and_head, load_checkpoint, load_weights,
                      register_config_keys, target_fingerprint)


def _text_cfg(target):
    cfg = target.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


class ChainModel(nn.Module):
    """A feature-level autoregressive drafter with the target's frozen embedding and LM head.

    Subclasses define `fuse(hidden) → g` (target features → the block's feature input) and
    `step(g, e, positions, …) → (out, kv)` (one block application over feature g and embedding e)."""

    drafter_type = "chain"

    def __init__(self, target):
        super().__init__()
        embed, head = frozen_embedding_and_head(target)
        self.frozen = _Frozen(embed=embed, head=head)
        self.vocab_size = target.vocab_size

    @property
    def layer_ids(self) -> tuple[int, ...]:
        return tuple(self.config["target_layer_ids"])

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.frozen.embed(ids).detach()

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        h = self.norm(out)
        w = self.frozen.head.weight
        b = self.frozen.head.bias
        return nn.functional.linear(h.to(w.dtype) if not torch.is_autocast_enabled() else h, w, b)

    def fuse(self, hidden: dict[int, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def step(self, g, e, positions, mask=None, cache=None, n=None, extra_kv=None, return_kv=False):
        raise NotImplementedError

    @property
    def dtype(self):
        return next(self.parameters()).dtype


def _init_norm_from_target(norm: RMSNorm, target) -> None:
    src = final_norm(target)
    w = getattr(src, "weight", None)
    if isinstance(w, torch.Tensor) and w.shape == norm.weight.shape:
        with torch.no_grad():
            norm.weight.copy_(w.float())


class Eagle3Model(ChainModel):
    """FC(k·d → d) over the target's layer features; one Llama-style decoder layer whose attention reads
    [RMSNorm(embedding) ; RMSNorm(feature)] (2d → d projections), residual on the feature; a trainable
    RMSNorm before the target's frozen LM head."""

    drafter_type = "eagle3"

    def __init__(self, target, target_layer_ids=None, num_heads: int | None = None, intermediate_size: int | None = None,
                 rms_norm_eps: float = 1e-6, rope_theta: float = 10000.0, **unused):
        super().__init__(target)
        fp = target_fingerprint(target)
        d = fp["hidden_size"]
        layers = tuple(int(x) for x in (target_layer_ids or default_layer_ids(fp["num_hidden_layers"])))
        heads, kvh, dh = attention_shape(d, num_heads)
        ffn = int(intermediate_size or getattr(_text_cfg(target), "intermediate_size", None) or 4 * d)
        self.config = {"drafter_type": "eagle3", "target": fp, "target_layer_ids": list(layers), "hidden_size": d,
                       "num_heads": heads, "num_kv_heads": kvh, "head_dim": dh, "intermediate_size": ffn,
                       "rms_norm_eps": rms_norm_eps, "rope_theta": rope_theta}
        self.fc = nn.Linear(len(layers) * d, d, bias=False)
        self.embed_norm = RMSNorm(d, rms_norm_eps)
        self.feat_norm = RMSNorm(d, rms_norm_eps)
        self.attn = Attention(d, heads, kvh, dh, rope_theta, in_dim=2 * d)
        self.mlp_norm = RMSNorm(d, rms_norm_eps)
        self.mlp = MLP(d, ffn)
        self.norm = RMSNorm(d, rms_norm_eps)
        _init_norm_from_target(self.norm, target)

    def fuse(self, hidden):
        x = torch.cat([hidden[l] for l in self.layer_ids], -1)
        return self.fc(x.to(self.fc.weight.dtype))

    def step(self, g, e, positions, mask=None, cache=None, n=None, extra_kv=None, return_kv=False):
        x = torch.cat([self.embed_norm(e.to(g.dtype)), self.feat_norm(g)], -1)
        a = self.attn(x, positions, mask=mask, cache=cache, n=n, extra_kv=extra_kv, return_kv=return_kv)
        a, kv = a if return_kv else (a, None)
        h = g + a
        h = h + self.mlp(self.mlp_norm(h))
        return h, kv


register_config_keys("eagle3", {"hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
                                "rms_norm_eps", "rope_theta", "ttt_steps", "ttt_decay"})


class ChainDrafter(FeatureDrafter):
    """The protocol side of a ChainModel: feeds committed (feature, next token) pairs into the model's
    cache, then drafts a chain, each step feeding its own output feature and drafted token back."""

    def __init__(self, model: ChainModel, target, name: str | None = None):
        super().__init__(target, model.layer_ids)
        self.model = model.to(device=target.device).eval()
        self.name = name or model.drafter_type

    def _reset(self, batch_size: int) -> None:
        super()._reset(batch_size)
        m = getattr(self, "model", None)
        if m is not None:
            a = m.attn if hasattr(m, "attn") else m.block.attn
            self.cache = RaggedKV(batch_size, a.kvh, a.dh, self.device, m.dtype)
            self.committed = torch.zeros(batch_size, dtype=torch.long, device=self.device)

    def select_rows(self, rows: torch.Tensor) -> None:
        super().select_rows(rows)
        self.cache.select_rows(rows)
        self.committed = self.committed.index_select(0, rows)

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        m = self.model
        B = ctx.batch_size
        feats, n, positions, _, nxt = self.take_pending(ctx)
        W = positions.shape[1]
        k = int(max_tokens.max()) if B else 0
        has_ctx = self.consumed > 0
        rows = torch.arange(B, device=self.device)
        last = torch.zeros(B, m.config["hidden_size"], device=self.device, dtype=m.dtype)
        if W > 0:  # always absorb the committed positions, even when nothing is drafted this step
            g = m.fuse(feats)
            out, _ = m.step(g, m.embed(nxt).to(m.dtype), positions, cache=self.cache, n=n)
            fed = n > 0
            last[fed] = out[rows, (n - 1).clamp_min(0)][fed]
        # every step commits ≥ 1 token, so only a row whose prompt was a single token can lack
        # context (first step): it drafts nothing
        self.committed = self.cache.lens.clone()
        if k == 0 or not bool(has_ctx.any()):
            return Proposal.empty(B, self.device)
        tokens, probs = [], []
        g = last[:, None]
        for j in range(k):
            tok, q = self.draft(m.logits(g[:, 0]), ctx)
            tokens.append(tok)
            probs.append(q)
            if j + 1 < k:
                pos = self.cache.lens[:, None]
                g, _ = m.step(g, m.embed(tok[:, None]).to(m.dtype), pos, cache=self.cache,
                              n=torch.ones(B, dtype=torch.long, device=self.device))
        prop = self.make_proposal(tokens, probs, max_tokens)
        prop.num_tokens = torch.where(has_ctx, prop.num_tokens, torch.zeros_like(prop.num_tokens))
        return prop

    def accepted(self, num_accepted: torch.Tensor) -> None:
        # drafted positions were computed from the drafter's own features: drop them; the target's
        # features of the accepted ones arrive with the next step's hidden states
        self.cache.truncate(self.committed)


def load_chain_model(cls, kind: str, path, target) -> ChainModel:
    config, state = load_checkpoint(path, kind, target)
    opts = {k: v for k, v in config.items() if k not in ("drafter_type", "target", "format_version", "training")}
    model = cls(target, **opts)
    load_weights(model, state, where=repr(str(path)))
    return model.to(device=target.device, dtype=target.dtype).eval()


@register("eagle3")
def _factory(arg, target, **options):
    if isinstance(arg, Eagle3Model):
        return ChainDrafter(arg, target)
    if arg is None:
        raise ValueError("eagle3 needs a trained checkpoint: drafter=\"eagle3:PATH\" "
                         "(train one with `draftwise train eagle3 --target … --out PATH`)")
    return ChainDrafter(load_chain_model(Eagle3Model, "eagle3", arg, target), target)
