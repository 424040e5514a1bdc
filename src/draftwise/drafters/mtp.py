"""MTP (DeepSeek-V3, arXiv 2412.19437), trained post hoc on a frozen target and used recursively.

h' = Block(Proj_{2d→d}[RMSNorm(h_t) ; RMSNorm(Emb(x_{t+1}))]) predicts x_{t+2} through a final norm and
the target's shared LM head; h_t is the target's last-layer state. Depth 1: beyond the first draft the
module runs recursively on its own output h' (as serving engines do past an MTP head's trained depth).
The chain / cache / protocol side is `ChainDrafter` (drafters/eagle3.py).
"""
from __future__ import annotations

import torch
from torch import nn

from .base import register
from .eagle3 import ChainDrafter, ChainModel, _init_norm_from_target, _text_cfg, load_chain_model
from .learned import DecoderLayer, RMSNorm, attention_shape, register_config_keys, target_fingerprint


class MTPModel(ChainModel):
    drafter_type = "mtp"

    def __init__(self, target, target_layer_ids=None, num_heads: int | None = None, intermediate_size: int | None = None,
                 rms_norm_eps: float = 1e-6, rope_theta: float = 10000.0, **unused):
        super().__init__(target)
        fp = target_fingerprint(target)
        d = fp["hidden_size"]
        layers = tuple(int(x) for x in (target_layer_ids or (fp["num_hidden_layers"],)))
        if len(layers) != 1:
            raise ValueError(f"MTP reads one target layer (the last), got {layers}")
        heads, kvh, dh = attention_shape(d, num_heads)
        ffn = int(intermediate_size or getattr(_text_cfg(target), "intermediate_size", None) or 4 * d)
        self.config = {"drafter_type": "mtp", "target": fp, "target_layer_ids": list(layers), "hidden_size": d,
                       "num_heads": heads, "num_kv_heads": kvh, "head_dim": dh, "intermediate_size": ffn,
                       "rms_norm_eps": rms_norm_eps, "rope_theta": rope_theta}
        self.hidden_norm = RMSNorm(d, rms_norm_eps)
        self.embed_norm = RMSNorm(d, rms_norm_eps)
        self.proj = nn.Linear(2 * d, d, bias=False)
        self.block = DecoderLayer(d, heads, kvh, ffn, dh, rope_theta, rms_norm_eps)
        self.norm = RMSNorm(d, rms_norm_eps)
        _init_norm_from_target(self.norm, target)

    def fuse(self, hidden):
        return hidden[self.layer_ids[0]].to(self.proj.weight.dtype)

    def step(self, g, e, positions, mask=None, cache=None, n=None, extra_kv=None, return_kv=False):
        x = self.proj(torch.cat([self.hidden_norm(g), self.embed_norm(e.to(g.dtype))], -1))
        out = self.block(x, positions, mask=mask, cache=cache, n=n, extra_kv=extra_kv, return_kv=return_kv)
        return out if return_kv else (out, None)


register_config_keys("mtp", {"hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
                             "rms_norm_eps", "rope_theta", "ttt_steps", "ttt_decay"})


@register("mtp")
def _factory(arg, target, **options):
    if isinstance(arg, MTPModel):
        return ChainDrafter(arg, target)
    if arg is None:
        raise ValueError("mtp needs a trained checkpoint: drafter=\"mtp:PATH\" "
                         "(train one with `draftwise train mtp --target … --out PATH`)")
    return ChainDrafter(load_chain_model(MTPModel, "mtp", arg, target), target)
