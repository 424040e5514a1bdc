"""Model descriptions from Hugging Face configs."""
import json
import random

import pytest

from draftwise.planner.model import (bundled_models, describe, drafter_desc, expected_experts)


def test_bundled():
    names = bundled_models()
    for n in ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "qwen3-next-80b-a3b"):
        assert n in names
    assert describe("Llama-3.1-8B").name == "llama-3.1-8b"      # case-insensitive, hub-style ok
    assert describe("meta-llama/llama-3.1-8b").total_params == describe("llama-3.1-8b").total_params
    with pytest.raises(FileNotFoundError):
        describe("no-such-model")


def test_expected_experts_formula():
    assert expected_experts(256, 8, 1) == pytest.approx(8)
    assert expected_experts(256, 8, 0) == 0
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))   # 3.5
    assert expected_experts(256, 8, 10_000) == pytest.approx(256)
    # monotone, bounded
    vals = [expected_experts(64, 4, t) for t in range(1, 50)]
    assert all(a < b for a, b in zip(vals, vals[1:])) and vals[-1] <= 64
    # Monte Carlo with uniform top-k routing
    rng = random.Random(0)
    n, k, T, trials = 16, 4, 3, 4000
    mc = sum(len(set().union(*[rng.sample(range(n), k) for _ in range(T)])) for _ in range(trials)) / trials
    assert mc == pytest.approx(expected_experts(n, k, T), rel=0.02)


def test_llama_8b():
    m = describe("llama-3.1-8b")
    assert m.total_params == pytest.approx(8.03e9, rel=0.01)
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert m.attention_group_size == 4
    assert m.layer_counts() == {"full+dense": 32}
    assert m.weight_bytes == pytest.approx(2 * m.total_params)
    assert m.kv_bytes_per_sequence(1000) == 1000 * m.kv_bytes_per_token
    # fp8 weights halve the bytes
    assert describe("llama-3.1-8b", weight_dtype="fp8").weight_bytes == pytest.approx(m.total_params)
    # FLOPs/token = 2·active + attention 2·H·L·(dk + dv) per layer
    f0, f1 = m.flops_per_token(0), m.flops_per_token(1000)
    assert f0 == 2 * m.active_params
    assert f1 - f0 == pytest.approx(32 * 2 * 32 * 1000 * 256)
    assert describe("llama-3.1-70b").total_params == pytest.approx(70.55e9, rel=0.01)


def test_deepseek_v3():
    m = describe("deepseek-v3")
    assert all(l.attention.kind == "mla" for l in m.layers)
    assert all(l.attention.kv_elems_per_token == 576 for l in m.layers)
    assert m.kv_elems_per_token == 61 * 576
    assert m.total_params == pytest.approx(671e9, rel=0.01)
    assert m.active_params == pytest.approx(37e9, rel=0.03)
    assert m.layer_counts() == {"mla+dense": 3, "mla+moe": 58}
    assert m.moe.n_experts == 256 and m.moe.top_k == 8
    assert m.weight_bytes_per_param == 1          # fp8 checkpoint
    assert m.kv_bytes_per_elem == 2
    assert m.attention_group_size == 128          # all heads read one latent
    assert m.num_mtp_layers == 1


def test_qwen3_next_linear_layers_constant_state():
    m = describe("qwen3-next-80b-a3b")
    assert m.layer_counts() == {"gated_delta_net+moe": 36, "full+moe": 12}
    assert m.total_params == pytest.approx(80e9, rel=0.02)
    assert 2.5e9 < m.active_params < 4e9
    lin = [l for l in m.layers if l.recurrent]
    assert all(l.attention is None for l in lin)
    # the state does not grow with context; only the 12 full-attention layers do
    grow = m.kv_bytes_per_sequence(2000) - m.kv_bytes_per_sequence(1000)
    assert grow == pytest.approx(1000 * 12 * 2 * 2 * 256 * 2)
    assert m.state_bytes_per_sequence == 36 * (32 * 128 * 128 + (2 * 2048 + 4096) * 3) * 2


def _count_hf(model):
    return sum(p.numel() for n, p in model.named_parameters() if "norm" not in n and not n.endswith("bias"))


def test_matches_real_hf_models(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3NextConfig
    torch.manual_seed(0)
    c = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=100, tie_word_embeddings=False)
    assert describe(c).total_params == _count_hf(AutoModelForCausalLM.from_config(c))
    q = Qwen3NextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, vocab_size=100, num_experts=8, num_experts_per_tok=2,
                        moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                        layer_types=["linear_attention"] * 3 + ["full_attention"])
    real = _count_hf(AutoModelForCausalLM.from_config(q))
    assert describe(q).total_params == pytest.approx(real, rel=0.02)
    # path and folder
    (tmp_path / "config.json").write_text(json.dumps(c.to_dict()))
    assert describe(tmp_path).total_params == describe(tmp_path / "config.json").total_params == describe(c).total_params


def test_other_architectures():
    from transformers import FalconH1Config, Gemma3TextConfig, Mamba2Config, MixtralConfig
    f = describe(FalconH1Config(num_hidden_layers=4))
    assert all(l.attention and l.recurrent and l.mlp for l in f.layers)
    mb = describe(Mamba2Config(num_hidden_layers=4))
    assert mb.kv_bytes_per_token == 0 and mb.state_bytes_per_sequence > 0
    g = describe(Gemma3TextConfig())
    assert any(l.attention.kind == "sliding" for l in g.layers)
    sl = next(l for l in g.layers if l.attention.kind == "sliding")
    assert sl.attention.context(10 ** 6) == g.config["sliding_window"]
    mx = describe(MixtralConfig(num_hidden_layers=2))
    assert mx.moe.n_experts == 8 and mx.moe.top_k == 2


def test_drafters():
    t = describe("llama-3.1-8b")
    e = drafter_desc("eagle3", t)
    assert not e.parallel and len(e.layers) == 1 and e.once_params == 3 * 4096 * 4096
    assert e.head_params == 32000 * 4096
    assert drafter_desc("dflash", t).parallel and drafter_desc("dspark", t).parallel
    assert drafter_desc("ngram", t).free and drafter_desc("suffix", t).free
    mtp = drafter_desc("mtp", describe("deepseek-v3"))
    assert mtp.layers[0].mlp.kind == "moe"
    dm = drafter_desc("draft_model", t, config={"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
                                                  "num_hidden_layers": 16, "num_attention_heads": 32,
                                                  "num_key_value_heads": 8, "vocab_size": 128256})
    assert dm.model.total_params > 1e9
    with pytest.raises(ValueError):
        drafter_desc("medusa-x", t)
    with pytest.raises(ValueError):
        drafter_desc("draft_model", t)
