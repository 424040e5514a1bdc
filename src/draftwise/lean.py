"""A lean forward pass for Llama-family decoders (Llama, Mistral, Qwen2, Qwen3), gpt-fast style.

Why: a small draft model runs D single-token forwards per step, and for a 1–2-layer model most of
such a forward is framework glue (mask construction, output dataclasses, kwargs plumbing), not
matmuls; for a 6-layer target the glue is still ~15 % of a step on a CPU. This keeps the model's own
modules and weights and only replaces the glue: one explicit boolean mask built from the runner's
`valid` columns, the model's rotary embedding, SDPA with grouped heads, the same kernels in the same
order. A draft model may use it freely (its rounding changes proposals, never the output). The
target uses it only after a probe at load (`target._lean_reproduces_hf`) has shown, on this machine
and dtype, that it reproduces Hugging Face's logits bit for bit — greedy exactness is measured
against that forward.
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

    def _attend(self, q, k, v, mask, causal):
        """SDPA with grouped heads dispatched as Hugging Face's sdpa integration does it (its
        `enable_gqa` / `pack_gqa` / `repeat_kv` choice), so the rounding is the same."""
        B, H, W, hd = q.shape
        groups = H // k.shape[1]
        if groups == 1 or mask is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling, is_causal=causal,
                                                  enable_gqa=groups > 1)
        if W == 1:  # one query: the group's heads become the query axis of one KV head
            o = F.scaled_dot_product_attention(q.reshape(B, H // groups, groups, hd), k, v, attn_mask=mask,
                                               scale=self.scaling)
            return o.reshape(B, H, 1, hd)
        # one call per head of each group, where Hugging Face copies each KV head once per query
        # head (`repeat_kv`): each query meets the same keys in a call of the same shape, so the
        # rounding is the same (the load probe checks it), and the cache is never copied — at 1k
        # tokens that copy was 0.7 ms of a 5.6 ms two-token step here
        o = torch.stack([F.scaled_dot_product_attention(q[:, i::groups], k, v, attn_mask=mask, scale=self.scaling)
                         for i in range(groups)], 2)
        return o.reshape(B, H, W, hd)

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, cache,
                 last_only: bool = False, hidden_layers: tuple[int, ...] = (), dense: bool | None = None):
        """tokens/positions [B, W]; valid [B, S] the cache columns after appending these W (True =
        a real entry); returns logits [B, W, V] (or [B, 1, V] with last_only) and the hidden states
        {layer: [B, W, d]} asked for, numbered as Hugging Face's `output_hidden_states` (0 =
        embeddings, i = after decoder layer i, the last one after the final norm). `dense`: whether
        `valid` is known to have no hole (None: look)."""
        B, W = tokens.shape
        S = valid.shape[1]
        # a query sees the real entries up to its own column, and always itself (a padding query
        # attending to nothing would produce NaN, which would then sit in a hole of the cache)
        # No mask where Hugging Face builds none either (no holes, and one query or a fresh cache):
        # the same SDPA call then takes the same kernel and rounds the same way.
        causal = W > 1 and S == W
        if (W == 1 or causal) and (dense if dense is not None else bool(valid.all())):
            mask = None
        else:
            causal = False
            idx = torch.arange(S, device=tokens.device)
            q_idx = idx[S - W:, None]
            mask = (valid[:, None, :] & (idx[None, :] <= q_idx)[None]) | (idx[None, :] == q_idx)[None]
            mask = mask[:, None]
        h = self.embed(tokens)
        cos, sin = self.rotary(h, positions)
        cos, sin = cos[:, None], sin[:, None]
        hd = self.head_dim
        want = set(hidden_layers)
        hidden = {0: h} if 0 in want else {}
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
            o = self._attend(q, k, v, mask, causal)
            h = h + a.o_proj(o.transpose(1, 2).reshape(B, W, -1))
            h = h + layer.mlp(self._norm(layer.post_attention_layernorm, h))
            if i + 1 in want and i + 1 < len(self.layers):
                hidden[i + 1] = h
        if last_only and not want:
            h = h[:, -1:]      # a prefill that only fills the cache: norm and head on one column
        h = self._norm(self.norm, h)
        if len(self.layers) in want:
            hidden[len(self.layers)] = h
        return self.head(h[:, -1:] if last_only else h), hidden
