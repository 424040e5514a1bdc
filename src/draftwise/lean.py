"""A lean forward pass for Llama-family decoders (Llama, Mistral, Qwen2, Qwen3), gpt-fast style.

Why: a small draft model runs D single-token forwards per step, and for a 1–2-layer model most of
such a forward is framework glue (mask construction, output dataclasses, kwargs plumbing), not
matmuls. This keeps the model's own modules and weights and only replaces the glue: one explicit
boolean mask built from the runner's `valid` columns, the model's rotary embedding, SDPA with
grouped heads. Used for draft models only: a different rounding there changes proposals, never
the output, because the target (always run through Hugging Face's own forward) verifies them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")


def supports(model) -> bool:
    """Plain decoder stacks whose layers this module reproduces exactly in structure."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in SUPPORTED or getattr(cfg, "hidden_act", "silu") != "silu":
        return False
    if getattr(cfg, "use_sliding_window", False) or (cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None)):
        return False
    inner = getattr(model, "model", None)
    return all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")) \
        and hasattr(model, "lm_head") and hasattr(inner.norm, "variance_epsilon")


class LeanForward:
    def __init__(self, model):
        m = model.model
        self.embed, self.layers, self.norm, self.rotary, self.head = \
            m.embed_tokens, m.layers, m.norm, m.rotary_emb, model.lm_head
        attn = m.layers[0].self_attn
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        self.qk_norm = hasattr(attn, "q_norm")

    @staticmethod
    def _norm(module, x):
        # F.rms_norm instead of the module: one kernel instead of five ops plus a module call
        return F.rms_norm(x, module.weight.shape, module.weight, module.variance_epsilon)

    @staticmethod
    def _rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, cache,
                 last_only: bool = False) -> torch.Tensor:
        """tokens/positions [B, W]; valid [B, S] the cache columns after appending these W (True =
        a real entry); returns logits [B, W, V] (or [B, 1, V] with last_only)."""
        B, W = tokens.shape
        S = valid.shape[1]
        idx = torch.arange(S, device=tokens.device)
        q_idx = idx[S - W:, None]
        # a query sees the real entries up to its own column, and always itself (a padding query
        # attending to nothing would produce NaN, which would then sit in a hole of the cache)
        if W == 1 and bool(valid.all()):
            mask = None   # one query and no holes: it sees every column, no mask to build
        else:
            mask = (valid[:, None, :] & (idx[None, :] <= q_idx)[None]) | (idx[None, :] == q_idx)[None]
            mask = mask[:, None]
        h = self.embed(tokens)
        cos, sin = self.rotary(h, positions)
        cos, sin = cos[:, None], sin[:, None]
        hd = self.head_dim
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            x = self._norm(layer.input_layernorm, h)
            q = a.q_proj(x).view(B, W, -1, hd)
            k = a.k_proj(x).view(B, W, -1, hd)
            v = a.v_proj(x).view(B, W, -1, hd).transpose(1, 2)
            if self.qk_norm:
                q, k = self._norm(a.q_norm, q), self._norm(a.k_norm, k)
            q = self._rotate(q.transpose(1, 2), cos, sin)
            k = self._rotate(k.transpose(1, 2), cos, sin)
            k, v = cache.update(k, v, i)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling,
                                               enable_gqa=k.shape[1] != q.shape[1])
            h = h + a.o_proj(o.transpose(1, 2).reshape(B, W, -1))
            h = h + layer.mlp(self._norm(layer.post_attention_layernorm, h))
        if last_only:
            h = h[:, -1:]
        return self.head(self._norm(self.norm, h))
