"""Shared checks of the parallel block drafters (DFlash, DSpark): tiny targets, a few training steps,
greedy exactness against HF generate, inference-vs-training consistency, sampling losslessness."""
from __future__ import annotations

import importlib

import numpy as np
import torch
import transformers as T

import draftwise
from draftwise.train.data import OnlineStream
from draftwise.train.trainer import ListStream, TrainConfig, train
from tiny_models import build

N_NEW = 20
PROMPTS = [[5, 17, 33, 2, 90], [44, 9, 12], [7, 7, 61, 100, 3, 8, 21, 55, 19], [64]]
TOKENS = np.random.default_rng(0).integers(0, 128, size=4000)

_targets: dict = {}
_trained: dict = {}


def hf_greedy(model, prompt, n=N_NEW):
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0, min_new_tokens=n)
    return out[0, len(prompt):].tolist()


def target(arch):
    if arch not in _targets:
        model = build(arch)
        model.generation_config.eos_token_id = None
        _targets[arch] = (draftwise.load_target(model), [hf_greedy(model, p) for p in PROMPTS])
    return _targets[arch]


def module(kind):
    return importlib.import_module(f"draftwise.train.{kind}")


def drafter_cls(kind):
    from draftwise.drafters.dflash import DFlashDrafter
    from draftwise.drafters.dspark import DSparkDrafter
    return {"dflash": DFlashDrafter, "dspark": DSparkDrafter}[kind]


def fresh_model(kind, tgt, seed=0, **opts):
    torch.manual_seed(seed)
    return module(kind).build_model(tgt, **opts)


def batches(tgt, layers, n=2, bs=4, seq_len=32, regen="greedy"):
    stream = OnlineStream(tgt, TOKENS, layers, batch_size=bs, seq_len=seq_len, prompt_len=8, regen=regen,
                          mask_prompt=True)
    return [stream.make(i) for i in range(n)]


def trained_model(kind, arch, steps=16):
    """A drafter trained for a few steps on the target's own greedy continuations (cached)."""
    key = (kind, arch)
    if key not in _trained:
        tgt, _ = target(arch)
        m = fresh_model(kind, tgt, seed=1, soft=False)  # hard CE on greedy continuations: argmax-matching
        data = batches(tgt, m.hidden_layers)
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            log = train(m, module(kind).loss_fn, ListStream(data),
                        TrainConfig(steps=steps, lr=3e-3, warmup_steps=2, progress=False, bf16=False), d)
        _trained[key] = (m.eval(), log)
    return _trained[key]


def check_greedy_exact(kind, arch, batch, model):
    tgt, refs = target(arch)
    idx = [2] if batch == 1 else [0, 1, 2, 3]
    accepted = 0
    for D in (1, 3, 8):
        out = draftwise.generate(tgt, [PROMPTS[i] for i in idx], drafter=drafter_cls(kind)(model),
                                 num_draft_tokens=D, max_new_tokens=N_NEW)
        for o, i in zip(out, idx):
            assert o.token_ids == refs[i], f"{kind}/{arch}/B={batch}/D={D}: prompt {i} diverged"
            assert sum(o.accept_lengths) == len(o.token_ids)
            assert max(o.num_drafted) <= min(D, model.block_size - 1)
            accepted += sum(a - 1 for a in o.accept_lengths)
    return accepted


class _Spy:
    """Records each proposal's anchor positions and backbone states, to compare with training."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)


def check_inference_matches_training(kind, arch):
    """The cached, ragged inference path computes the same block states as the training forward with
    block masks over the final sequences (anchors = the pending positions seen during decoding)."""
    tgt, _ = target(arch)
    model, _ = trained_model(kind, arch)
    drafter = drafter_cls(kind)(model)
    seen = [[] for _ in PROMPTS]  # per request: (anchor position, states)
    orig = drafter._block

    def spy(ctx):
        h = orig(ctx)
        pos, hs = drafter.last_block
        rows = spy.rows
        for j, seq in enumerate(ctx.sequences):
            seen[rows[j]].append((int(pos[j]), hs[j].clone()))
        return h

    spy.rows = list(range(len(PROMPTS)))
    drafter._block = spy
    orig_select = drafter.select_rows

    def select(rows):
        spy.rows = [spy.rows[i] for i in rows.tolist()]
        orig_select(rows)

    drafter.select_rows = select
    out = draftwise.generate(tgt, PROMPTS, drafter=drafter, num_draft_tokens=3, max_new_tokens=12 + 0)
    checked = 0
    for i, o in enumerate(out):
        seq = torch.tensor([o.prompt_token_ids + o.token_ids])
        with torch.no_grad():
            hs = tgt.model(input_ids=seq, output_hidden_states=True).hidden_states
            hidden = {l: hs[l] for l in model.hidden_layers}
            anchors = torch.tensor([[a for a, _ in seen[i]]])
            ref = model(seq, hidden, anchors)["hidden"][0]  # [N, Bk−1, d]
        for j, (_, h) in enumerate(seen[i]):
            torch.testing.assert_close(h, ref[j], atol=2e-4, rtol=1e-3)
            checked += 1
    assert checked >= len(PROMPTS) * 2
    return checked


# --------------------------------------------------------------------------- sampling losslessness

def tiny_vocab_target(V=8, seed=3):
    torch.manual_seed(seed)
    cfg = T.LlamaConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=1, intermediate_size=32, initializer_range=0.5,
                        tie_word_embeddings=False, max_position_embeddings=64)
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    model.generation_config.eos_token_id = None
    return draftwise.load_target(model)


def exact_two_token_distribution(tgt, prompt, params):
    from draftwise.sampling import process_logits
    V = tgt.vocab_size
    with torch.no_grad():
        p1 = process_logits(tgt.model(input_ids=torch.tensor([prompt])).logits[0, -1], params)
        seqs = torch.tensor([prompt + [t] for t in range(V)])
        p2 = process_logits(tgt.model(input_ids=seqs).logits[:, -1], params)  # [V, V]
    return (p1[:, None] * p2).double()  # joint [V, V]


def check_sampling_lossless(kind, temperature=1.0, top_k=None, top_p=None, n=100_000, chunks=1, seed=0):
    """Empirical joint distribution of the first two generated tokens (both from the first verification
    step's drafts when accepted) over n draws vs the target's exact processed distribution."""
    from draftwise.types import SamplingParams
    tgt = tiny_vocab_target()
    V = tgt.vocab_size
    m = fresh_model(kind, tgt, seed=seed, block_size=3, layer_ids=(1, 2), num_layers=1)
    with torch.no_grad():
        m.norm.weight.fill_(0.05)  # flat-ish drafts over the tiny vocabulary: both accept and reject paths run
        if kind == "dspark":  # a non-zero Markov head, so the drafted q_k really depend on x_{k−1}
            m.markov_out.weight.normal_(0, 0.1)
    prompt = [1, 2, 3, 4]
    params = SamplingParams(temperature, top_k, top_p)
    exact = exact_two_token_distribution(tgt, prompt, params)
    counts = torch.zeros(V, V, dtype=torch.float64)
    acc_first = []
    per = n // chunks
    for c in range(chunks):
        out = draftwise.generate(tgt, [prompt] * per, drafter=drafter_cls(kind)(m), num_draft_tokens=3,
                                 max_new_tokens=3, temperature=temperature, top_k=top_k, top_p=top_p,
                                 seed=seed * 100 + c, ignore_eos=True)
        firsts = torch.tensor([o.token_ids[:2] for o in out])
        counts += torch.bincount(firsts[:, 0] * V + firsts[:, 1], minlength=V * V).view(V, V).double()
        acc_first += [o.accept_lengths[0] for o in out]
    N = counts.sum()
    emp = counts / N
    sd = (exact * (1 - exact) / N).sqrt()
    z = ((emp - exact).abs() / sd.clamp_min(1e-12))[exact > 0]
    assert float(emp[exact == 0].sum()) == 0.0, "a token outside the processed support was emitted"
    assert float(z.max()) < 5.0, f"max |z| = {float(z.max()):.2f} (cells {int((exact > 0).sum())})"
    # TV against its noise level (E|f − p| ≈ sqrt(2 p (1−p) / (π N)) per cell)
    tv = 0.5 * float((emp - exact).abs().sum())
    noise = 0.5 * float((2 * exact * (1 - exact) / (torch.pi * N)).sqrt().sum())
    assert tv < 2.0 * noise + 1e-3, (tv, noise)
    acc = torch.tensor(acc_first, dtype=torch.float64)
    # both paths of the rejection rule must be exercised: some drafts accepted, some rejected
    assert 0.1 < float((acc > 1).double().mean()) < 0.9
    assert float((acc > 2).double().mean()) > 0.03
    return tv, noise
