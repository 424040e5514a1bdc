"""Ragged rollback of Hugging Face caches.

Rows of a batch accept different numbers of drafted tokens, but a `DynamicCache` is rectangular.
Attention layers therefore keep rejected entries as *holes* that the attention mask hides (and a
compaction step squeezes out once they pile up); recurrent layers (linear attention, SSM) cannot
hide a token they have absorbed, so their state is snapshotted before a forward and restored per
row with `torch.where` — the caller then replays the tokens each row keeps.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, LinearAttentionCacheLayerMixin


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values sit at the front of a buffer with room to spare.

    Why: `DynamicLayer` appends by `torch.cat`, copying the whole cache each step; at batch 1 and 1k
    tokens those copies were ~0.6 ms of a 5 ms step on this project's CPU, paid by plain and
    speculative decoding alike. Here a step writes only its own columns. Assigning `keys` /
    `values` (truncate, gather, select rows: `cache.py`, Hugging Face's own crop) keeps a prefix of
    the buffer in place and adopts any other tensor as the new buffer."""

    def __init__(self, **kwargs):
        self._k = self._v = None
        self._nk = self._nv = 0    # apart: truncate and gather assign keys, then values
        super().__init__(**kwargs)

    def _adopt(self, buf, t):
        """(buffer, length) after assigning t: a prefix view of buf only moves the length."""
        if t is None or t.dim() != 4:
            return t, 0
        if buf is not None and t.data_ptr() == buf.data_ptr() and t.stride() == buf.stride() \
                and t.shape[:2] == buf.shape[:2] and t.shape[-1] == buf.shape[-1]:
            return buf, t.shape[-2]
        return t, t.shape[-2]

    keys = property(lambda self: None if self._k is None else self._k[..., : self._nk, :])
    values = property(lambda self: None if self._v is None else self._v[..., : self._nv, :])

    @keys.setter
    def keys(self, t):
        self._k, self._nk = self._adopt(self._k, t)

    @values.setter
    def values(self, t):
        self._v, self._nv = self._adopt(self._v, t)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._k = self._v = None
        self._nk = self._nv = 0
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, W = self._nk, key_states.shape[-2]
        if self._nv != n:
            raise RuntimeError(f"cache layer holds {n} keys but {self._nv} values; assign both before a forward")
        if self._k is None or self._v is None or n + W > min(self._k.shape[-2], self._v.shape[-2]) \
                or self._k.shape[:2] != key_states.shape[:2]:
            room = n + W + max(256, (n + W) // 2)     # amortised: a copy every ~half the cache's length
            self._k = self._grow(self._k, key_states, n, room)
            self._v = self._grow(self._v, value_states, n, room)
        self._k[..., n:n + W, :] = key_states
        self._v[..., n:n + W, :] = value_states
        self._nk = self._nv = n + W
        return self.keys, self.values

    @staticmethod
    def _grow(buf, like, n, room):
        out = like.new_empty(*like.shape[:2], room, like.shape[-1])
        if buf is not None and n > 0:
            out[..., :n, :] = buf[..., :n, :]
        return out


def new_cache(config) -> DynamicCache:
    """Hugging Face's dynamic cache for this model, full-attention layers made `GrowingLayer`."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def attention_layers(cache: Cache) -> list:
    """Layers holding per-token keys/values ([B, H, T, d])."""
    out = []
    for layer in cache.layers:
        if type(layer) is GrowingLayer:
            # its buffer, not `keys`: each read of that property is a slice, a torch op (~5 µs on
            # caches the forward left cold), and this runs several times a step
            if layer._k is not None and layer.is_initialized and layer._k.dim() == 4:
                out.append(layer)
        elif getattr(layer, "keys", None) is not None and getattr(layer, "is_initialized", True) \
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
        layer.cumulative_length = layer._nk if type(layer) is GrowingLayer else layer.keys.shape[-2]


def cache_length(cache: Cache) -> int:
    layers = attention_layers(cache)
    if not layers:
        return 0
    return layers[0]._nk if type(layers[0]) is GrowingLayer else layers[0].keys.shape[-2]


def truncate(cache: Cache, length: int) -> None:
    """Drop attention entries at index ≥ length (for every row)."""
    for layer in attention_layers(cache):
        if type(layer) is GrowingLayer:
            # the entries stay in the buffer past the length, which the next step overwrites:
            # what `keys = keys[..., :length, :]` does, without two torch ops per layer
            layer._nk, layer._nv = min(layer._nk, length), min(layer._nv, length)
        else:
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
