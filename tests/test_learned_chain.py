"""EAGLE-3 and MTP drafters: greedy exactness (untrained, briefly trained and near-oracle weights),
sampling losslessness, training/inference agreement, and checkpoint checks."""
import json

import numpy as np
import pytest
import torch

import draftwise
from draftwise.drafters.eagle3 import ChainDrafter
from draftwise.drafters.learned import (RaggedKV, default_layer_ids, load_checkpoint, save_checkpoint,
                                        target_fingerprint)
from draftwise.sampling import process_logits
from draftwise.train import eagle3 as t_eagle3
from draftwise.train import mtp as t_mtp
from draftwise.train.chain import unrolled_loss
from draftwise.train.data import teach
from tiny_models import build

N_NEW = 20
PROMPTS = [[5, 17, 33, 2, 90], [44, 9, 12], [7, 7, 61, 100, 3, 8, 21, 55, 19], [64]]
TRAIN = {"eagle3": t_eagle3, "mtp": t_mtp}


def bigram_llama():
    """A tiny llama whose blocks add nothing (o_proj = down_proj = 0): logits = head(norm(emb(x_t))).
    Its greedy next token is a function of the current token, which a chain drafter can represent
    exactly — so drafts get accepted and long accepted runs exercise the rollback paths."""
    m = build("llama")
    with torch.no_grad():
        for layer in m.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        m.lm_head.weight.mul_(3.0)
    return m


def oracle_mtp(target, noise: float = 0.0, seed: int = 0):
    """An MTP module that reproduces a bigram target: Proj keeps only the token embedding and the block
    adds nothing, so norm(out) = the target's norm(emb(next token)). `noise` perturbs it."""
    m = t_mtp.build_model(target)
    g = torch.Generator().manual_seed(seed)
    d = m.config["hidden_size"]
    with torch.no_grad():
        m.proj.weight.zero_()
        m.proj.weight[:, d:] = torch.eye(d)
        m.block.attn.o.weight.zero_()
        m.block.mlp.down.weight.zero_()
        if noise:
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * noise * (p.abs().mean() + 1e-3))
    return m


def random_weights(model, scale=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


_cache = {}


def target(arch):
    if arch not in _cache:
        model = bigram_llama() if arch == "bigram" else build(arch)
        model.generation_config.eos_token_id = None
        refs = []
        for p in PROMPTS:
            ids = torch.tensor([p])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_NEW, do_sample=False,
                                 eos_token_id=None, pad_token_id=0, min_new_tokens=N_NEW)
            refs.append(out[0, len(p):].tolist())
        _cache[arch] = (draftwise.load_target(model), refs)
    return _cache[arch]


def briefly_trained(kind, tgt, steps=6):
    """A few real optimizer steps on self-distilled batches (what CI can afford)."""
    from draftwise.train.data import OnlineStream
    from draftwise.train.trainer import TrainConfig, train

    torch.manual_seed(0)
    model = TRAIN[kind].build_model(tgt, ttt_steps=3) if kind == "eagle3" else TRAIN[kind].build_model(tgt)
    toks = np.random.default_rng(0).integers(0, 128, 2000)
    stream = OnlineStream(tgt, toks, model.layer_ids, batch_size=4, seq_len=24, regen="greedy")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        train(model, TRAIN[kind].loss_fn, stream, TrainConfig(steps=steps, lr=3e-3, warmup_steps=1, progress=False,
                                                              bf16=False), d)
    return model


def drafter_weights(kind, variant, tgt):
    if variant == "untrained":
        return random_weights(TRAIN[kind].build_model(tgt))
    if variant == "trained":
        return briefly_trained(kind, tgt)
    return oracle_mtp(tgt, noise=0.1)


def run(tgt, drafter, prompts, D, **kw):
    return draftwise.generate(tgt, prompts, drafter=drafter, num_draft_tokens=D, max_new_tokens=N_NEW, **kw)


@pytest.mark.parametrize("arch,kind,variant", [
    ("llama", "eagle3", "untrained"), ("qwen3", "eagle3", "untrained"), ("llama", "mtp", "untrained"),
    ("qwen3", "mtp", "untrained"), ("llama", "eagle3", "trained"), ("qwen3", "mtp", "trained"),
    ("bigram", "eagle3", "trained"), ("bigram", "mtp", "oracle")])
def test_greedy_exact(arch, kind, variant, tmp_path):
    tgt, refs = target(arch)
    model = drafter_weights(kind, variant, tgt)
    save_checkpoint(model, model.config, tmp_path / "ck")
    spec = f"{kind}:{tmp_path / 'ck'}"  # through the checkpoint loader, as users load it
    longest = 0
    for batch in (1, 4):
        idx = [2] if batch == 1 else [0, 1, 2, 3]
        for D in ([3] if batch == 1 else [1, 3, 8]):
            out = run(tgt, spec, [PROMPTS[i] for i in idx], D)
            for o, i in zip(out, idx):
                assert o.token_ids == refs[i], f"{arch}/{kind}/{variant}/B={batch}/D={D}: prompt {i} diverged"
                assert sum(o.accept_lengths) == len(o.token_ids)
                longest = max(longest, max(o.accept_lengths))
    if variant == "oracle":
        assert longest >= 5  # long accepted runs really happened


def test_oracle_accepts_almost_everything():
    tgt, refs = target("bigram")
    d = ChainDrafter(oracle_mtp(tgt), tgt)
    out = run(tgt, d, PROMPTS, 4)
    assert [o.token_ids for o in out] == refs
    assert out.stats.mean_accept_length > 4.0


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_training_matches_inference(kind):
    """The unrolled training forward computes exactly the logits the drafter produces at inference
    when the first i drafts were the sequence's own tokens."""
    tgt, _ = target("llama")
    m = random_weights(TRAIN[kind].build_model(tgt, ttt_steps=4), 0.1)
    ids = torch.randint(0, 128, (2, 12))
    batch = teach(tgt, ids, m.layer_ids)
    batch["loss_mask"] = torch.ones(2, 12)
    seen = []
    orig = m.logits
    m.logits = lambda out: seen.append(orig(out).detach()) or seen[-1]
    unrolled_loss(m, batch, 4)
    m.logits = orig
    a = 5
    attn = m.attn if kind == "eagle3" else m.block.attn
    with torch.no_grad():
        for i in range(4):
            cache = RaggedKV(2, attn.kvh, attn.dh, "cpu", torch.float32)
            g = m.fuse({l: h[:, :a + 1] for l, h in batch["hidden"].items()})
            out, _ = m.step(g, m.embed(ids[:, 1:a + 2]), torch.arange(a + 1)[None].expand(2, -1), cache=cache,
                            n=torch.full((2,), a + 1))
            g = out[:, -1:]
            for j in range(1, i + 1):
                g, _ = m.step(g, m.embed(ids[:, a + 1 + j:a + 2 + j]), cache.lens[:, None], cache=cache,
                              n=torch.ones(2, dtype=torch.long))
            torch.testing.assert_close(m.logits(g[:, 0]), seen[i][:, a], atol=1e-5, rtol=1e-5)


def _chi2_ok(counts: np.ndarray, probs: np.ndarray, n: int) -> tuple[float, float]:
    """Pearson χ² over categories with expected count ≥ 5 (rest pooled); returns (stat, dof)."""
    exp = probs * n
    big = exp >= 5
    obs = np.append(counts[big], counts[~big].sum())
    e = np.append(exp[big], exp[~big].sum())
    keep = e > 0
    stat = float(((obs[keep] - e[keep]) ** 2 / e[keep]).sum())
    return stat, float(keep.sum() - 1)


@pytest.mark.parametrize("kind,N", [("mtp", 100_000), ("eagle3", 20_000)])
def test_sampling_lossless(kind, N):
    """With the drafter, the first two generated tokens over N draws (1e5 for MTP) follow the target's processed
    distribution (temperature + top-k): χ² on the first token and on the second given the most common
    first token. Near-oracle MTP (q ≈ p, most drafts accepted) and random EAGLE-3 (q far from p)."""
    tgt, _ = target("bigram")
    model = oracle_mtp(tgt, noise=0.3) if kind == "mtp" else random_weights(t_eagle3.build_model(tgt), 0.1)
    drafter = ChainDrafter(model, tgt)
    prompt = [17, 90]
    temp, top_k = 0.9, 40
    out = draftwise.generate(tgt, [prompt] * N, drafter=drafter, num_draft_tokens=2, max_new_tokens=2,
                             temperature=temp, top_k=top_k, seed=7)
    toks = np.array([o.token_ids for o in out])
    acc = np.mean([o.accept_lengths[0] for o in out])
    params = draftwise.types.SamplingParams(temp, top_k, None)
    with torch.no_grad():
        p1 = process_logits(tgt.model(torch.tensor([prompt])).logits[0, -1], params).numpy()
    stat, dof = _chi2_ok(np.bincount(toks[:, 0], minlength=128), p1, N)
    assert stat < dof + 6 * np.sqrt(2 * dof), (stat, dof)  # ~6σ: flakiness ≈ 1e-6 per test
    x1 = int(np.bincount(toks[:, 0]).argmax())
    sel = toks[toks[:, 0] == x1, 1]
    with torch.no_grad():
        p2 = process_logits(tgt.model(torch.tensor([prompt + [x1]])).logits[0, -1], params).numpy()
    stat, dof = _chi2_ok(np.bincount(sel, minlength=128), p2, len(sel))
    assert stat < dof + 6 * np.sqrt(2 * dof), (stat, dof)
    if kind == "mtp":
        assert acc > 1.4  # the drafts really were accepted most of the time


# --------------------------------------------------------------------------- checkpoints

def test_default_layer_ids():
    assert default_layer_ids(32) == (2, 16, 29)
    assert default_layer_ids(6) == (2, 3, 4)
    assert default_layer_ids(2) == (1, 2)
    assert default_layer_ids(1) == (1,)
    for n in range(1, 40):
        ids = default_layer_ids(n)
        assert len(set(ids)) == len(ids) == min(3, n) and all(1 <= i <= n for i in ids)


def test_checkpoint_roundtrip(tmp_path):
    tgt, _ = target("llama")
    m = random_weights(t_eagle3.build_model(tgt))
    save_checkpoint(m, m.config, tmp_path)
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert not any("embed" in k and k.startswith("frozen") for k in saved)
    assert sum(v.numel() for v in saved.values()) == sum(p.numel() for p in m.parameters())
    cfg, state = load_checkpoint(tmp_path, "eagle3", tgt)
    assert cfg["target"] == target_fingerprint(tgt) and cfg["target_layer_ids"] == list(m.layer_ids)
    d = draftwise.build_drafter(f"eagle3:{tmp_path}", tgt)
    for k, v in m.state_dict().items():
        torch.testing.assert_close(d.model.state_dict()[k], v)


def _other_target(**changes):
    import transformers as T
    from tiny_models import COMMON
    kw = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, **COMMON)
    kw.update(changes)
    return T.LlamaForCausalLM(T.LlamaConfig(**kw)).eval()


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_checkpoint_errors(kind, tmp_path):
    tgt, _ = target("llama")
    m = TRAIN[kind].build_model(tgt)
    ck = tmp_path / "ck"
    save_checkpoint(m, m.config, ck)
    other = "mtp" if kind == "eagle3" else "eagle3"
    with pytest.raises(ValueError, match=f"is a {kind} checkpoint, not {other}"):
        draftwise.generate(tgt, [[1, 2, 3]], drafter=f"{other}:{ck}", max_new_tokens=2)
    for change, word in [({"hidden_size": 32, "num_attention_heads": 2}, "hidden size"),
                         ({"num_hidden_layers": 3}, "layer count"), ({"vocab_size": 100}, "vocabulary")]:
        with pytest.raises(ValueError, match=word):
            draftwise.generate(_other_target(**change), [[1, 2, 3]], drafter=f"{kind}:{ck}", max_new_tokens=2)
    with pytest.raises(FileNotFoundError):
        draftwise.build_drafter(f"{kind}:{tmp_path / 'nope'}", tgt)
    with pytest.raises(ValueError, match="needs a trained checkpoint"):
        draftwise.build_drafter(kind, tgt)
    cfg = json.loads((ck / "config.json").read_text())
    cfg["mystery_option"] = 1
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="mystery_option"):
        draftwise.build_drafter(f"{kind}:{ck}", tgt)
    (ck / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="lacks model.safetensors"):
        draftwise.build_drafter(f"{kind}:{ck}", tgt)


@pytest.mark.parametrize("every", [1, 2])
def test_feature_bookkeeping_matches_plain_forward(every):
    """FeatureDrafter hands out, for each committed position exactly once and in order, the target's
    feature of that position (checked against a plain forward over the final sequence), with the
    token at the position and the one after it — whether it takes them every step or every other."""
    from draftwise.drafters.learned import FeatureDrafter

    tgt, _ = target("llama")
    seen = {}

    class Recorder(FeatureDrafter):
        name = "recorder"

        def __init__(self):
            super().__init__(tgt, (1, 2))
            self.calls = 0

        def propose(self, ctx, max_tokens):
            self.calls += 1
            self.absorb(ctx)
            if self.calls % every == 0:
                feats, n, pos, tok, nxt = self.take_pending(ctx)
                for r in range(ctx.batch_size):
                    key = tuple(ctx.sequences[r][:3])
                    for j in range(int(n[r])):
                        p = int(pos[r, j])
                        assert p not in seen.setdefault(key, {}), "position handed out twice"
                        seen[key][p] = (feats[1][r, j].clone(), feats[2][r, j].clone(), int(tok[r, j]),
                                        int(nxt[r, j]))
            return self.make_proposal([], [], max_tokens)

    out = draftwise.generate(tgt, PROMPTS[:3], drafter=Recorder(), num_draft_tokens=2, max_new_tokens=9)
    for prompt, o in zip(PROMPTS[:3], out):
        seq = prompt + o.token_ids
        with torch.no_grad():
            hs = tgt.model(torch.tensor([seq]), output_hidden_states=True).hidden_states
        got = seen[tuple(seq[:3])]
        assert sorted(got) == list(range(len(got)))  # contiguous from position 0
        assert len(got) >= len(prompt) - 1 + len(o.token_ids) - 2
        for p, (h1, h2, t, t1) in got.items():
            torch.testing.assert_close(h1, hs[1][0, p], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(h2, hs[2][0, p], atol=1e-5, rtol=1e-5)
            assert (t, t1) == (seq[p], seq[p + 1])
