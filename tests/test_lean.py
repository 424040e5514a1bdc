"""The lean forward computes what Hugging Face's forward computes, bit for bit, holes and all, so
the target may use it without touching greedy exactness."""
from pathlib import Path

import pytest
import torch
import transformers as T

import draftwise
from draftwise.lean import LeanForward, supports
from draftwise.target import ModelRunner, pad_rows
from tiny_models import COMMON, build

CASES = {
    "llama": lambda: build("llama"),
    "qwen3": lambda: build("qwen3"),
    "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2, intermediate_size=128, **COMMON)).eval(),
    "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                            num_key_value_heads=1, intermediate_size=128,
                                                            sliding_window=None, **COMMON)).eval(),
}


@pytest.mark.parametrize("arch", sorted(CASES))
def test_lean_matches_hf_on_ragged_steps_with_rollback(arch):
    torch.manual_seed(0)
    model = CASES[arch]()
    assert supports(model)
    hf, lean = ModelRunner(model), ModelRunner(model, lean=True)
    assert lean._lean is not None and hf._lean is None
    layers = tuple(range(hf.num_layers + 1))
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 128, (n,), generator=g).tolist() for n in (5, 1, 9)]
    for r in (hf, lean):
        r.reset(3)
    toks, lens = pad_rows(prompts, "cpu")
    outs = [r.forward(toks, lens)[0] for r in (hf, lean)]
    for b, n in enumerate(lens.tolist()):
        assert torch.equal(outs[1][b, :n], outs[0][b, :n])
    for step in range(6):
        lens = torch.tensor([1 + (step + i) % 4 for i in range(3)])
        toks = torch.randint(0, 128, (3, int(lens.max())), generator=g)
        outs = []
        for r in (hf, lean):
            r.mark()
            outs.append(r.forward(toks, lens, layers))
            r.rollback((lens - step % 3).clamp_min(1))      # leave holes in the cache
        (a, ha), (b_, hb) = outs
        for b in range(3):   # compare the real positions only (padding outputs are meaningless)
            n = int(lens[b])
            assert torch.equal(b_[b, :n], a[b, :n]), f"step {step} row {b}: logits differ"
            for i in layers:
                assert torch.equal(hb[i][b, :n], ha[i][b, :n]), f"step {step} row {b}: hidden state {i} differs"
    assert torch.equal(hf.seq_lens, lean.seq_lens) and torch.equal(hf.valid, lean.valid)


def test_unsupported_models_keep_hf_forward():
    for arch in ("gpt2", "mixtral", "mistral_swa", "qwen3_next"):
        m = build(arch)
        assert not supports(m)
        assert ModelRunner(m, lean=True)._lean is None


@pytest.mark.parametrize("arch", sorted(CASES))
def test_target_takes_lean_forward_only_when_it_is_bitwise_hf(arch, monkeypatch):
    model = CASES[arch]()
    assert draftwise.load_target(model).uses_lean_forward
    assert not draftwise.load_target(model, lean=False).uses_lean_forward
    # a lean forward that rounds differently (here: one ulp-scale change in every norm) is refused
    norm = LeanForward._norm
    monkeypatch.setattr(LeanForward, "_norm", staticmethod(lambda m, x: norm(m, x) * (1 + 1e-6)))
    assert not draftwise.load_target(model).uses_lean_forward
    assert ModelRunner(model, lean=True).uses_lean_forward   # drafts take it regardless


def test_lean_matches_hf_on_the_reference_target_at_a_long_context():
    """Grouped heads at several query widths over a few hundred cached tokens with holes: where a
    kernel's rounding depends on the shape of the call (folding a group's heads into the query axis
    changed it here, the tiny models above did not show it), a long cache shows it."""
    model = draftwise.load_target(Path(__file__).resolve().parents[1] / "zoo" / "target", lean=False).model
    hf, lean = ModelRunner(model), ModelRunner(model, lean=True)
    g = torch.Generator().manual_seed(1)
    for rows in (1, 3):
        for r in (hf, lean):
            r.reset(rows)
        toks = torch.randint(2, 4000, (rows, 300), generator=g)
        lens = torch.tensor([300, 240, 170][:rows])
        for r in (hf, lean):
            r.forward(toks, lens, need_logits=False)
        for width in (2, 5, 9, 3, 1, 4):
            toks = torch.randint(2, 4000, (rows, width), generator=g)
            lens = torch.randint(1, width + 1, (rows,), generator=g)
            outs = []
            for r in (hf, lean):
                r.mark()
                outs.append(r.forward(toks, lens)[0])
                r.rollback(lens.clamp(max=2))
            real = torch.arange(width)[None, :] < lens[:, None]
            assert torch.equal(outs[1][real], outs[0][real]), f"{rows} rows, width {width}: logits differ"
