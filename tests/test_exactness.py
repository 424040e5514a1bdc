"""Greedy speculative output must equal the target's own greedy output, token for token (fp32).

The reference is Hugging Face's own `generate` (per prompt, no padding), so the test also checks
that draftwise's plain decoding and its ragged-cache bookkeeping agree with an independent engine.
"""
import pytest
import torch

import draftwise
from tiny_models import build, noisy_copy

N_NEW = 24
PROMPTS = [[5, 17, 33, 2, 90], [44, 9, 12], [7, 7, 61, 100, 3, 8, 21, 55, 19], [64]]
DRAFTERS = ["none", "ngram", "suffix", "draft-model"]
FULL_MATRIX = ["llama", "qwen3", "gpt2", "mixtral", "qwen3_next", "phi3"]
SLOW_STATEFUL = ["mamba2", "falcon_h1"]  # pure-PyTorch SSM kernels: fewer combinations
NOISE = {"qwen3_next": 0.005}  # chaotic random hybrid: a closer copy still gives long accepted runs


def hf_greedy(model, prompt):
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_NEW, do_sample=False,
                         eos_token_id=None, pad_token_id=0, min_new_tokens=N_NEW)
    return out[0, len(prompt):].tolist()


_cache = {}


def setup(arch):
    if arch not in _cache:
        model = build(arch)
        model.generation_config.eos_token_id = None
        refs = [hf_greedy(model, p) for p in PROMPTS]
        _cache[arch] = (model, noisy_copy(model, NOISE.get(arch, 0.05)), refs)
    return _cache[arch]


def drafter_for(name, draft):
    return {"none": None, "draft-model": draft}.get(name, name)


def check(arch, drafter, batch, D):
    model, draft, refs = setup(arch)
    idx = [2] if batch == 1 else [0, 1, 2, 3]
    out = draftwise.generate(model, [PROMPTS[i] for i in idx], drafter=drafter_for(drafter, draft),
                             num_draft_tokens=D, max_new_tokens=N_NEW)
    for o, i in zip(out, idx):
        assert o.token_ids == refs[i], f"{arch}/{drafter}/B={batch}/D={D}: prompt {i} diverged"
        assert sum(o.accept_lengths) == len(o.token_ids)
    return out


@pytest.mark.parametrize("arch", FULL_MATRIX)
def test_references_are_varied(arch):
    """Degenerate references (one repeated token) would make exactness prove little."""
    _, _, refs = setup(arch)
    distinct = [len(set(r)) for r in refs]
    assert sum(distinct) / len(distinct) >= 4, distinct


@pytest.mark.parametrize("arch", FULL_MATRIX)
@pytest.mark.parametrize("drafter", DRAFTERS)
@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_exact(arch, drafter, batch):
    for D in ([0] if drafter == "none" else [1, 3, 8]):
        out = check(arch, drafter, batch, D)
        if drafter == "draft-model" and D == 8:
            # the noisy copy must exercise long accepted runs, or this proves little about rollback
            assert max(max(o.accept_lengths) for o in out) >= 4


@pytest.mark.parametrize("arch", SLOW_STATEFUL)
@pytest.mark.parametrize("drafter", ["none", "ngram", "draft-model"])
def test_greedy_exact_ssm(arch, drafter):
    check(arch, drafter, 4, 3)


def test_bf16_runs_and_reports_agreement():
    """bf16 batched verification changes rounding, so exactness is not promised — but it must run."""
    model = build("llama", dtype=torch.bfloat16)
    out = draftwise.generate(model, PROMPTS, drafter=noisy_copy(model, 0.05), num_draft_tokens=3,
                             max_new_tokens=12)
    assert all(len(o.token_ids) == 12 for o in out)


@pytest.mark.parametrize("arch", ["llama", "qwen3_next"])
@pytest.mark.parametrize("drafter", ["ngram", "draft-model"])
def test_greedy_exact_with_adaptive_draft_length(arch, drafter):
    """Run-time adaptive D only reads the drafts, so greedy output stays the target's own."""
    model, draft, refs = setup(arch)
    out = draftwise.generate(model, PROMPTS, drafter=drafter_for(drafter, draft), num_draft_tokens=8,
                             max_new_tokens=N_NEW, adaptive=True)
    for o, ref in zip(out, refs):
        assert o.token_ids == ref


def test_sliding_window_model_exact_inside_window_and_clear_error_beyond():
    model = build("mistral_swa")
    model.generation_config.eos_token_id = None
    refs = [hf_greedy(model, p) for p in PROMPTS]
    out = draftwise.generate(model, PROMPTS, drafter=noisy_copy(model, 0.05), num_draft_tokens=3,
                             max_new_tokens=N_NEW)
    assert [o.token_ids for o in out] == refs
    with pytest.raises(NotImplementedError, match="sliding-window attention"):
        draftwise.generate(model, [list(range(1, 120)) * 2], max_new_tokens=40)
