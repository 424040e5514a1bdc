"""Ragged rollback of Hugging Face caches.

Rows of a batch accept different numbers of drafted tokens, but a `DynamicCache` is rectangular.
Attention layers therefore keep rejected entries as *holes* that the attention mask hides (and a
compaction step squeezes out once they pile up); recurrent layers (linear attention, SSM) cannot
hide a token they have absorbed, so their state is snapshotted before a forward and restored per
row with `torch.where` — the caller then replays the tokens each row keeps.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, LinearAttentionCacheLayerMixin


def attention_layers(cache: Cache) -> list:
    """Layers holding per-token keys/values ([B, H, T, d])."""
    out = []
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and getattr(layer, "is_initialized", True) \
                and isinstance(layer.keys, torch.Tensor) and layer.keys.dim() == 4:
            out.append(layer)
    return out


def has_recurrent_layers(cache: Cache) -> bool:
    return any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in cache.layers)


def recurrent_tensors(cache: Cache) -> list[tuple[dict, int]]:
    """(dict, key) slots of every conv / recurrent state tensor, each with the batch first."""
    slots = []
    for layer in cache.layers:
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            for states in (layer.conv_states, layer.recurrent_states):
                for k, t in states.items():
                    if isinstance(t, torch.Tensor):
                        slots.append((states, k))
    return slots


def snapshot_recurrent(cache: Cache) -> list[torch.Tensor]:
    return [states[k].clone() for states, k in recurrent_tensors(cache)]


def restore_recurrent(cache: Cache, snapshot: list[torch.Tensor], rows: torch.Tensor | None = None) -> None:
    """Put the snapshot back, for all rows or where the boolean `rows` [B] is True."""
    for (states, k), saved in zip(recurrent_tensors(cache), snapshot):
        cur = states[k]
        if rows is None:
            cur.copy_(saved)
        else:
            mask = rows.view(-1, *([1] * (cur.dim() - 1)))
            cur.copy_(torch.where(mask, saved, cur))


def sliding_window(cache: Cache) -> int | None:
    """The smallest attention window among sliding-window layers, if any.

    Such a layer evicts entries by cache index, which holes would shift; draftwise therefore keeps
    the whole cache below the window (see ModelRunner.forward)."""
    windows = [layer.sliding_window for layer in cache.layers if getattr(layer, "is_sliding", False)]
    return min(windows) if windows else None


def _sync_lengths(layer) -> None:
    if hasattr(layer, "cumulative_length"):  # sliding layers derive mask offsets from it
        layer.cumulative_length = layer.keys.shape[-2]


def cache_length(cache: Cache) -> int:
    layers = attention_layers(cache)
    return layers[0].keys.shape[-2] if layers else 0


def truncate(cache: Cache, length: int) -> None:
    """Drop attention entries at index ≥ length (for every row)."""
    for layer in attention_layers(cache):
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]
        _sync_lengths(layer)


def gather_positions(cache: Cache, index: torch.Tensor) -> None:
    """Rebuild every attention layer as keys[b, :, index[b, t], :] — compaction of holes."""
    for layer in attention_layers(cache):
        idx = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        layer.keys = layer.keys.gather(2, idx)
        idx_v = index[:, None, :, None].expand(-1, layer.values.shape[1], -1, layer.values.shape[-1])
        layer.values = layer.values.gather(2, idx_v)
        _sync_lengths(layer)


def select_rows(cache: Cache, rows: torch.Tensor) -> None:
    """Keep only the given batch rows (finished requests leave the batch)."""
    for layer in attention_layers(cache):
        layer.keys = layer.keys.index_select(0, rows)
        layer.values = layer.values.index_select(0, rows)
    for states, k in recurrent_tensors(cache):
        states[k] = states[k].index_select(0, rows)
