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


steps = st.lists(st.tuples(st.integers(1, 5), st.booleans(), st.booleans(), st.integers(0, 10 ** 6)),
                 min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 3), steps=steps, seed=st.integers(0, 1000))
def test_runner_rollback_by_truncation_is_the_general_path(B, steps, seed):
    """Rows that append a full block and keep alike roll back by truncating the cache; the general
    path (masking every row's rejected entries, then dropping all-hole columns) must leave the same
    `valid`, lengths and next logits, bit for bit — also where a ragged step left holes before."""
    model = build("llama")
    fast, ref = ModelRunner(model, lean=True), ModelRunner(model, lean=True)
    ref.TRUNCATE_LEVEL = False
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 64, (B, 5), generator=g)
    for r in (fast, ref):
        r.reset(B)
        r.forward(prompt, [5] * B)
    for W, whole, level, s in steps:
        rng = torch.Generator().manual_seed(s)
        tokens = torch.randint(0, 64, (B, W), generator=rng)
        lens = [W] * B if whole else torch.randint(1, W + 1, (B,), generator=rng).tolist()
        keep = [int(torch.randint(0, min(lens) + 1, (1,), generator=rng))] * B if level else \
            [int(torch.randint(0, n + 1, (1,), generator=rng)) for n in lens]
        outs = []
        for r in (fast, ref):
            r.mark()
            outs.append(r.forward(tokens, lens)[0])
            r.rollback(keep)
        assert torch.equal(*outs)
        assert fast.lengths == ref.lengths and torch.equal(fast.valid, ref.valid)
    last = torch.randint(0, 64, (B, 1), generator=g)
    assert torch.equal(fast.forward(last, [1] * B)[0], ref.forward(last, [1] * B)[0])
