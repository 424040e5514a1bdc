"""`GrowingLayer` holds what Hugging Face's `DynamicLayer` holds, through appends, truncation,
compaction and row selection, while appending writes only the new columns."""
import torch
from hypothesis import given, settings, strategies as st
from transformers.cache_utils import DynamicLayer

from draftwise import cache as kv
from draftwise.target import ModelRunner
from tiny_models import build


class _Cache:   # the two functions of cache.py under test read only `.layers`
    def __init__(self, layer):
        self.layers = [layer]


ops = st.lists(st.tuples(st.sampled_from(["append", "truncate", "gather", "select"]), st.integers(1, 40)),
               min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(ops=ops, seed=st.integers(0, 1000))
def test_growing_layer_holds_what_dynamic_layer_holds(ops, seed):
    g = torch.Generator().manual_seed(seed)
    B = 3
    ref, new = _Cache(DynamicLayer()), _Cache(kv.GrowingLayer())
    for op, n in ops:
        T = kv.cache_length(ref) if ref.layers[0].is_initialized else 0
        if op == "append" or T == 0:
            k, v = torch.randn(B, 2, n, 4, generator=g), torch.randn(B, 2, n, 4, generator=g)
            outs = [c.layers[0].update(k, v) for c in (ref, new)]
            assert all(torch.equal(a, b) for a, b in zip(*outs))
        elif op == "truncate":
            for c in (ref, new):
                kv.truncate(c, max(0, T - n))
        elif op == "gather":
            idx = torch.randint(0, T, (B, max(1, T - n // 2)), generator=g)
            for c in (ref, new):
                kv.gather_positions(c, idx)
        else:
            rows = torch.randint(0, B, (B,), generator=g)
            for c in (ref, new):
                kv.select_rows(c, rows)
        assert torch.equal(new.layers[0].keys, ref.layers[0].keys)
        assert torch.equal(new.layers[0].values, ref.layers[0].values)
        assert new.layers[0].get_seq_length() == ref.layers[0].get_seq_length()


def test_appending_and_truncating_write_in_place():
    layer = kv.GrowingLayer()
    layer.update(torch.randn(1, 2, 100, 4), torch.randn(1, 2, 100, 4))
    buf = layer.keys.data_ptr()
    for step in range(50):        # plain steps and drafts rolled back: never a copy of the cache
        layer.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
        kv.truncate(_Cache(layer), 100 + step + 1)
    assert layer.keys.data_ptr() == buf and layer.get_seq_length() == 150


def test_runner_grows_full_attention_layers_only():
    for arch, growing in (("llama", True), ("mistral_swa", False), ("qwen3_next", None)):
        kinds = {type(layer) for layer in ModelRunner(build(arch)).cache.layers}
        if growing is None:   # hybrid: its attention layers grow, its recurrent ones stay as they are
            assert kv.GrowingLayer in kinds and len(kinds) > 1
        else:
            assert (kv.GrowingLayer in kinds) is growing
