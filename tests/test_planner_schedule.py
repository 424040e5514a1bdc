"""plan(): per batch size and context, the best drafter and D, break-even, reasons, engine configs;
acceptance loading."""
import json

import pytest

from draftwise.planner import Acceptance, load_acceptance, pick_num_draft_tokens, plan


def test_acceptance_expected_tokens():
    a = Acceptance([0.9, 0.8, 0.5])
    assert a.expected_tokens(0) == 1
    assert a.expected_tokens(3) == pytest.approx(1 + 0.9 + 0.72 + 0.36)
    assert a.survival(2) == pytest.approx(0.72)
    # beyond the measured positions: the mean of the last two
    assert a.alpha(4) == pytest.approx(0.65)
    assert Acceptance([0.9, 0.8], extrapolate="zero").expected_tokens(5) == pytest.approx(1 + 0.9 + 0.72)
    assert Acceptance.constant(0.5).expected_tokens(2) == pytest.approx(1.75)


def test_load_plain_and_specbench(tmp_path):
    plain = {"eagle3": {"conditional": [0.8, 0.7], "categories": {"code": [0.9, 0.85]}}, "dflash": {"conditional": [0.7]}}
    f = tmp_path / "acc.json"
    f.write_text(json.dumps(plain))
    acc = load_acceptance(f)
    assert set(acc) == {"eagle3", "dflash"} and acc["eagle3"].conditional == [0.8, 0.7]
    assert load_acceptance(f, category="code")["eagle3"].conditional == [0.9, 0.85]

    run = tmp_path / "run"
    run.mkdir()
    sb = {"eagle3": {"AL": 2.3, "Conditional_Acceptance_Rate": {"1": 1.0, "2": 0.8, "3": 0.6, "4": 0.5},
                     "Category_AL": {"math": 3.0, "chat": 1.8}},
          "ngram": {"Conditional_Acceptance_Rate": {"1": 1.0, "2": 0.4}}}
    (run / "specbench_results.json").write_text(json.dumps(sb))
    acc = load_acceptance(run)
    assert acc["eagle3"].conditional == [0.8, 0.6, 0.5]       # key k = draft position k − 1
    assert acc["ngram"].conditional == [0.4]
    math_ = acc["eagle3"].for_category("math")
    assert math_.expected_tokens(3) == pytest.approx(3.0, abs=1e-6)   # scaled to the category's AL
    assert acc["eagle3"].for_category("chat").expected_tokens(3) == pytest.approx(1.8, abs=1e-6)
    # a single unnamed result
    (tmp_path / "one.json").write_text(json.dumps({"Conditional_Acceptance_Rate": [1.0, 0.7, 0.6]}))
    assert load_acceptance(tmp_path / "one.json")["default"].conditional == [0.7, 0.6]
    with pytest.raises(ValueError):
        load_acceptance({"nothing": 1})


def test_break_even_synthetic():
    # dense 8B on an H100 at short context, α = 0.6, a drafter costing 5 % of a decode step per token:
    # memory-bound at small batch (speculate), compute-bound at large batch (don't)
    kw = dict(alpha=0.6, cost_ratio=0.05, context_lengths=[128])
    r = plan("llama-3.1-8b", "h100-sxm", **kw)
    be = r["break_even_batch_size"]
    assert isinstance(be, int) and 128 < be <= 256
    ds = {c["batch_size"]: c["num_draft_tokens"] for c in r["schedule"]}
    assert ds[1] > 0 and ds[512] == 0
    assert all(ds[b] > 0 for b in ds if b < be) and all(ds[b] == 0 for b in ds if b >= be)
    # exact at the integer boundary
    r2 = plan("llama-3.1-8b", "h100-sxm", batch_sizes=[be - 1, be], **kw)
    assert [c["num_draft_tokens"] > 0 for c in r2["schedule"]] == [True, False]
    # D falls with load
    seq = [ds[b] for b in sorted(ds)]
    assert all(a >= b for a, b in zip(seq, seq[1:]))
    zero = next(c for c in r["schedule"] if c["num_draft_tokens"] == 0)
    assert zero["drafter"] == "none" and zero["speedup"] == pytest.approx(1.0)
    assert any("no D pays" in x["text"] for x in zero["reasons"])


def test_schedule_cells_and_reasons():
    acc = {"eagle3": {"conditional": [0.8, 0.75, 0.7, 0.65, 0.6, 0.55]}, "dflash": {"conditional": [0.75, 0.6, 0.5, 0.4]}}
    r = plan("llama-3.1-8b", "h100-sxm", acceptance=acc, batch_sizes=[1, 64], context_lengths=[1024, 32768])
    assert len(r["schedule"]) == 4
    for c in r["schedule"]:
        for k in ("batch_size", "context_length", "drafter", "num_draft_tokens", "speedup",
                  "expected_tokens_per_step", "reasons", "per_drafter", "throughput_tok_s"):
            assert k in c
        assert set(c["per_drafter"]) == {"eagle3", "dflash"}
        rules = {x["rule"] for x in c["reasons"]}
        assert "1-linear" in rules and "4-marginal" in rules
        if c["num_draft_tokens"] > 0:
            assert "5-drafter" in rules
        assert c["speedup"] >= 1.0 - 1e-9
    long = next(c for c in r["schedule"] if c["context_length"] == 32768 and c["batch_size"] == 64)
    texts = " | ".join(x["text"] for x in long["reasons"])
    assert "G = 4: start at D = 128/G − 1 = 31" in texts or "G = 4" in texts
    assert "long context" in texts


def test_moe_and_recurrent_reasons():
    r = plan("deepseek-v3", "h200", num_devices=8, alpha=0.8, batch_sizes=[1], context_lengths=[1024])
    texts = " | ".join(x["text"] for x in r["schedule"][0]["reasons"])
    assert "MoE: verifying" in texts and "the experts at batch 1" in texts
    assert r["drafters"]["mtp"]["desc"]["kind"] == "mtp"      # DeepSeek-V3 has an MTP layer: the default
    q = plan("qwen3-next-80b-a3b", "b200", alpha=0.7, batch_sizes=[8], context_lengths=[4096])
    assert "gated_delta_net layers: rollback" in " | ".join(x["text"] for x in q["schedule"][0]["reasons"])
    big = plan("llama-3.1-70b", "l40s", alpha=0.7, batch_sizes=[1], context_lengths=[1024])
    assert big["schedule"][0]["fits_in_memory"] is False
    assert big["schedule"][0]["reasons"][0]["rule"] == "memory"


def test_engine_configs_and_latency_target():
    r = plan("llama-3.1-8b", "h100-sxm", alpha=0.7, drafters="eagle3", batch_sizes=[1, 8, 64, 256, 512],
             context_lengths=[512], latency_target_ms=10)
    ec = r["engine_configs"]
    v, s, t = ec["vllm"], ec["sglang"], ec["tensorrt_llm"]
    assert v["speculative_config"]["method"] == "eagle3"
    assert v["speculative_config"]["num_speculative_tokens"] == r["schedule"][0]["num_draft_tokens"]
    assert s["speculative_algorithm"] == "EAGLE3"
    assert s["speculative_num_draft_tokens"] == s["speculative_num_steps"] + 1
    trt = t["speculative_config"]["draft_len_schedule"]
    sched = {c["batch_size"]: c["num_draft_tokens"] for c in r["schedule"]}
    last = max(b for b, d in sched.items() if d > 0)
    assert trt == {b: d for b, d in sched.items() if b <= last}      # trailing zeros are implicit
    assert t["speculative_config"]["max_draft_len"] == max(t["speculative_config"]["draft_len_schedule"].values())
    op = r["operating_points"]["512"]
    assert op["batch_size"] is not None and op["throughput_tok_s"] > 0
    for c in r["schedule"]:
        assert c["meets_latency_target"] == (c["ms_per_token"] <= 10)


def test_measured_profile_uses_its_dtype(tmp_path):
    from draftwise.planner import Hardware
    h = Hardware(name="cpu-test", flops=2e11, bandwidth=4e10, memory=24e9, source="measured", dtype="float32",
                 attention_tile=1, compute_efficiency=1, bandwidth_efficiency=1, gemm_curve=[[1, 2e9], [64, 1e11], [512, 2e11]])
    p = tmp_path / "prof.json"
    h.save(p)
    r = plan({"model_type": "llama", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096, "torch_dtype": "bfloat16"},
             str(p), alpha=0.7, batch_sizes=[1, 16], context_lengths=[256])
    assert r["target"]["weight_bytes_per_param"] == 4
    assert r["hardware"]["source"] == "measured"


def test_predict_grid_agrees_with_plan():
    from draftwise.planner import predict
    acc = {"eagle3": Acceptance([0.8, 0.7, 0.6, 0.5], name="eagle3")}
    rows = predict("llama-3.1-8b", "h100-sxm", acceptance=acc, batch_sizes=[1, 256], draft_tokens=range(9),
                   context_lengths=[128])
    assert len(rows) == 2 * 9
    for min_gain in (0.0, 0.02):
        r = plan("llama-3.1-8b", "h100-sxm", acceptance=acc, batch_sizes=[1, 256], context_lengths=[128],
                 max_draft=8, min_gain=min_gain)
        for c in r["schedule"]:
            cells = sorted((x for x in rows if x["batch_size"] == c["batch_size"]), key=lambda x: x["num_draft_tokens"])
            D = pick_num_draft_tokens([x["speedup"] for x in cells], min_gain)
            if min_gain == 0:
                assert D == max(cells, key=lambda x: (x["throughput_tok_s"], -x["num_draft_tokens"]))["num_draft_tokens"]
            assert D == c["num_draft_tokens"]
            assert cells[D]["speedup"] == pytest.approx(c["speedup"])
    assert next(x for x in rows if x["num_draft_tokens"] == 0)["speedup"] == pytest.approx(1.0)


def test_a_gain_under_the_margin_is_not_worth_speculating():
    # argmax at D = 2 gains 1 %: under the 2 % margin it is D = 0, with the rule that decided it
    assert pick_num_draft_tokens([1.0, 0.99, 1.01, 1.005], 0.02) == 0
    assert pick_num_draft_tokens([1.0, 0.99, 1.01, 1.005], 0.0) == 2
    assert pick_num_draft_tokens([1.0, 1.03, 1.03], 0.02) == 1      # smallest D on ties
    acc = {"eagle3": Acceptance.constant(0.3, name="eagle3")}
    kw = dict(acceptance=acc, batch_sizes=[1, 64, 512], context_lengths=[1024], max_draft=8)
    argmax = plan("llama-3.1-8b", "h100-sxm", min_gain=0.0, **kw)
    margin = next(c for c in argmax["schedule"] if 1.0 < c["speedup"] < 1.3)   # a cell that gains a little
    r = plan("llama-3.1-8b", "h100-sxm", min_gain=margin["speedup"] - 1 + 0.01, **kw)
    c = next(c for c in r["schedule"] if c["batch_size"] == margin["batch_size"])
    assert margin["num_draft_tokens"] > 0 and c["num_draft_tokens"] == 0 and c["drafter"] == "none"
    assert any(x["rule"] == "4-margin" and f"{margin['num_draft_tokens']}," in x["text"] for x in c["reasons"])
    with pytest.raises(ValueError, match="min_gain"):
        plan("llama-3.1-8b", "h100-sxm", min_gain=-0.1, **kw)


def test_unnamed_acceptance_takes_the_drafter_name(tmp_path):
    f = tmp_path / "specbench_results.json"
    f.write_text(json.dumps({"Conditional_Acceptance_Rate": {"1": 1.0, "2": 0.8, "3": 0.7}}))
    r = plan("llama-3.1-8b", "h100-sxm", acceptance=tmp_path, drafters="dflash", batch_sizes=[1], context_lengths=[512])
    assert list(r["drafters"]) == ["dflash"]
    assert r["schedule"][0]["drafter"] in ("dflash", "none")
    # past the measured positions α is extrapolated, and the reasons say so
    if r["schedule"][0]["num_draft_tokens"] > 2:
        assert any(x["rule"] == "acceptance" for x in r["schedule"][0]["reasons"])
    with pytest.raises(ValueError):
        plan("llama-3.1-8b", "h100-sxm", acceptance=tmp_path, batch_sizes=[1], context_lengths=[512])


def test_steps_without_a_proposal_cost_a_plain_step():
    """Prompt lookup proposes nothing without a match; the engine then verifies one token per row.
    At batch 1 half the steps are plain steps; at batch 64 some row almost always proposes."""
    from draftwise.planner import predict
    always = Acceptance([0.8] * 4, name="ngram")
    half = Acceptance([0.8] * 4, name="ngram", proposal_rate=0.5)
    kw = dict(batch_sizes=[1, 64], draft_tokens=[0, 4], context_lengths=[512])
    a, h = (predict("llama-3.1-8b", "h100-sxm", acceptance={"ngram": x}, **kw) for x in (always, half))
    cell = lambda rows, B, D: next(r for r in rows if r["batch_size"] == B and r["num_draft_tokens"] == D)  # noqa: E731
    t0, t4 = cell(a, 1, 0)["target_time_s"], cell(a, 1, 4)["target_time_s"]
    assert cell(h, 1, 4)["target_time_s"] == pytest.approx((t0 + t4) / 2)
    assert cell(h, 64, 4)["target_time_s"] == pytest.approx(cell(a, 64, 4)["target_time_s"], rel=1e-9)
    assert half.verify_share(1) == 0.5 and half.to_dict()["proposal_rate"] == 0.5
    assert plan("llama-3.1-8b", "h100-sxm", acceptance={"ngram": {"conditional": [0.8] * 4, "proposal_rate": 0.5}},
                batch_sizes=[1], context_lengths=[512])["schedule"][0]["batch_size"] == 1


def test_static_batches_run_at_the_pace_of_the_slowest_request():
    """Two kinds of request: one whose drafts are always accepted (τ = D + 1), one whose drafts never
    are (τ = 1). A row on its own takes E[N/τ_r] steps; a static batch of B takes E[max_r N/τ_r],
    and E[τ] is scaled by the ratio: unchanged at batch 1, ≈ the slow request's pace at batch 16;
    with one kind of request only, static and continuous agree."""
    from draftwise.planner import predict

    D = 4
    mixed = Acceptance([0.5] * D, name="ngram", per_request=[[1.0] * D, [0.0] * D])
    E, mean_inv = mixed.expected_tokens(D), (1 / 5 + 1 / 1) / 2
    assert mixed.expected_tokens_static(D, 1) == pytest.approx(E)
    assert mixed.expected_tokens_static(D, 2) == pytest.approx(E * mean_inv / (0.25 * 0.2 + 0.75 * 1.0))
    assert mixed.expected_tokens_static(D, 16) == pytest.approx(E * mean_inv, rel=1e-4)
    same = Acceptance([0.6] * D, name="ngram", per_request=[[0.6] * D] * 3)
    assert same.expected_tokens_static(D, 8) == pytest.approx(same.expected_tokens(D))
    assert Acceptance([0.6] * D).expected_tokens_static(D, 8) == pytest.approx(Acceptance([0.6] * D).expected_tokens(D))
    kw = dict(acceptance={"ngram": mixed}, batch_sizes=[1, 16], draft_tokens=[0, D], context_lengths=[128])
    cont = {(r["batch_size"], r["num_draft_tokens"]): r["speedup"] for r in predict("llama-3.1-8b", "h100-sxm", **kw)}
    stat = {(r["batch_size"], r["num_draft_tokens"]): r["speedup"]
            for r in predict("llama-3.1-8b", "h100-sxm", batching="static", **kw)}
    assert stat[(1, 0)] == cont[(1, 0)] == pytest.approx(1.0)
    assert stat[(1, D)] == pytest.approx(cont[(1, D)])
    assert stat[(16, D)] == pytest.approx(cont[(16, D)] * mean_inv, rel=0.02)   # H100: 1–16 rows ≈ one price
    with pytest.raises(ValueError, match="batching"):
        predict("llama-3.1-8b", "h100-sxm", batching="dynamic", **kw)


def test_a_static_batch_pays_its_tail_at_the_rows_left():
    """Batch 2 of the two kinds above: both fast (¼), steps 0.2 each; one of each (½), 0.2 and 1;
    both slow (¼), 1 and 1 (in units of N). E[fewest] = 0.4, E[most] = 0.8, one row alone 0.6:
    2/3 of a row's steps with both rows, 2/3 more with one. On a profile where a step costs its
    rows, the one-row steps cost half."""
    from draftwise.planner import predict
    from draftwise.planner.hardware import get_hardware
    from draftwise.planner.model import load_config

    D = 4
    mixed = Acceptance([0.5] * D, name="ngram", per_request=[[1.0] * D, [0.0] * D])
    assert mixed.static_shares(D, 2) == pytest.approx([2 / 3, 2 / 3])
    assert mixed.static_shares(D, 1) == pytest.approx([1.0])
    assert sum(mixed.static_shares(D, 16)) == pytest.approx(1 / 0.6, rel=1e-4)
    assert Acceptance([0.6] * D).static_shares(D, 3) == [1.0, 0.0, 0.0]
    cfg, _ = load_config("llama-3.1-8b")
    h = get_hardware("h100-sxm")
    h.step_times = [{"B": B, "D": d, "L": 128, "seconds": 1e-3 * B * (1 + d)} for B in (1, 2, 4) for d in (0, D)]
    h.target_config, h.target = cfg, "llama-3.1-8b"
    P = {(r["batch_size"], r["num_draft_tokens"]): r
         for r in predict("llama-3.1-8b", h, acceptance={"ngram": mixed}, batch_sizes=[1, 2], draft_tokens=[0, D],
                          context_lengths=[128], batching="static")}
    td = P[(2, D)]["draft_time_s"]
    full, one = 2e-3 * (1 + D) + td, 1e-3 * (1 + D) + td
    E = mixed.expected_tokens(D)
    assert P[(2, D)]["expected_tokens_per_step"] == pytest.approx(E * full / (2 / 3 * full + 2 / 3 * one))
    assert P[(2, D)]["throughput_tok_s"] == pytest.approx(2 * E / (2 / 3 * full + 2 / 3 * one))
    assert P[(1, D)]["expected_tokens_per_step"] == pytest.approx(E)
    assert P[(2, 0)]["speedup"] == pytest.approx(1.0)
