"""Cost model: monotonic in B, D, L; drafter scaling; calibration; hardware profiles."""
import json

import pytest

from draftwise.planner import CostModel, Hardware, datasheet_names, get_hardware
from draftwise.planner.model import drafter_desc


def test_datasheets():
    for n in ("h100-sxm", "h200", "b200", "a100-80gb", "l40s", "mi300x"):
        assert n in datasheet_names()
        h = get_hardware(n)
        assert h.source == "datasheet" and h.flops > 1e14 and h.bandwidth > 5e11 and h.memory >= 48e9
    assert get_hardware("H100").name == "h100-sxm"
    assert get_hardware("h200").bandwidth == 4.8e12
    with pytest.raises(FileNotFoundError):
        get_hardware("tpu-v9")


def test_profile_roundtrip(tmp_path):
    h = Hardware(name="x", flops=1e12, bandwidth=1e11, memory=1e10, source="measured",
                 gemm_curve=[[1, 1e10], [16, 1.6e11], [256, 1e12]])
    p = tmp_path / "p.json"
    h.save(p)
    h2 = get_hardware(str(p))
    assert h2 == h
    # measured curve: interpolated, proportional to rows below the first point, flat above the last
    assert h2.gemm_throughput(16) == pytest.approx(1.6e11)
    assert 1.6e11 < h2.gemm_throughput(64) < 1e12
    assert h2.gemm_throughput(0.5) == pytest.approx(0.5e10)
    assert h2.gemm_throughput(4096) == pytest.approx(1e12)


@pytest.mark.parametrize("target,hw,n", [("llama-3.1-8b", "h100-sxm", 1), ("deepseek-v3", "h200", 8),
                                         ("qwen3-next-80b-a3b", "b200", 1), ("llama-3.1-8b", "cpu", 1)])
def test_monotonic(target, hw, n):
    cm = CostModel(target, hw, num_devices=n)
    Bs, Ds, Ls = [1, 2, 8, 32, 128, 512], [0, 1, 3, 7, 15], [128, 1024, 8192, 32768]
    for L in Ls:
        for D in Ds:
            ts = [cm.target_time(B, D, L) for B in Bs]
            assert all(a <= b + 1e-15 for a, b in zip(ts, ts[1:])), (L, D, ts)
        for B in Bs:
            ts = [cm.target_time(B, D, L) for D in Ds]
            assert all(a <= b + 1e-15 for a, b in zip(ts, ts[1:])), (L, B, ts)
    for B in Bs:
        ts = [cm.target_time(B, 3, L) for L in Ls]
        assert all(a <= b + 1e-15 for a, b in zip(ts, ts[1:]))
    # step time with a drafter grows with D too
    d = drafter_desc("eagle3", cm.target)
    ts = [cm.step_time(4, D, 1024, d) for D in Ds]
    assert all(a < b for a, b in zip(ts, ts[1:]))


def test_regimes():
    cm = CostModel("llama-3.1-8b", "h100-sxm")
    # memory-bound at batch 1: verifying 8 tokens costs about the same as 1
    assert cm.target_time(1, 7, 1024) / cm.target_time(1, 0, 1024) < 1.05
    # compute-bound at batch 512: 8 tokens cost several times one
    assert cm.target_time(512, 7, 128) / cm.target_time(512, 0, 128) > 3
    # attention: KV reads grow with B·L
    br = cm.target_breakdown(64, 0, 32768)
    assert br["attention"] > br["linear"]
    # MoE: at batch 1 extra verified tokens pull in new experts (B=1, D=7 reads ~8x the experts)
    ds = CostModel("deepseek-v3", "h200", num_devices=8)
    b0, b7 = ds.target_breakdown(1, 0, 1024), ds.target_breakdown(1, 7, 1024)
    assert b7["moe"] / b0["moe"] > 5
    # recurrent rollback: state traffic grows with D
    qn = CostModel("qwen3-next-80b-a3b", "b200")
    assert qn.target_breakdown(8, 7, 1024)["recurrent"] > 2 * qn.target_breakdown(8, 0, 1024)["recurrent"]


def test_drafter_scaling():
    cm = CostModel("llama-3.1-8b", "h100-sxm")
    t = cm.target
    ar = [cm.drafter_time(drafter_desc("eagle3", t), 1, D, 1024) for D in (1, 2, 4, 8)]
    assert ar[3] / ar[0] > 6                       # autoregressive: ∝ D
    par = [cm.drafter_time(drafter_desc("dflash", t), 1, D, 1024) for D in (1, 2, 4, 8)]
    assert par[3] / par[0] < 1.3                   # parallel: ≈ flat at small batch
    assert cm.drafter_time(drafter_desc("ngram", t), 64, 8, 1024) < 1e-4
    assert cm.drafter_time(drafter_desc("eagle3", t), 8, 0, 1024) == 0


def test_calibration_recovers_scales():
    cm = CostModel("llama-3.1-8b", "h100-sxm")
    meas = []
    for B in (1, 4, 16, 64):
        for D in (0, 3, 7):
            for L in (256, 4096):
                br = cm.forward_breakdown(None, B, 1 + D, L)
                w = br["linear"] + br["moe"] + br["recurrent"] + br["head"] + br["comm"]
                meas.append({"B": B, "D": D, "L": L, "seconds": 1.7 * w + 2.5 * br["attention"] + 3e-3})
    cal = cm.fit(meas)
    assert cal.linear_scale == pytest.approx(1.7, rel=1e-3)
    assert cal.attention_scale == pytest.approx(2.5, rel=1e-3)
    assert cal.overhead_s == pytest.approx(3e-3, rel=1e-3)
    assert cal.mean_abs_rel_error < 1e-6
    assert cm.target_time(4, 3, 256) == pytest.approx(next(m["seconds"] for m in meas
                                                             if (m["B"], m["D"], m["L"]) == (4, 3, 256)))



def test_calibration_overhead_bound_steps():
    """Noisy steps whose time falls as work grows (a tiny model on a busy machine) cannot resolve
    a work scale; the fit keeps the hardware model's work time and fits the overhead alone."""
    cm = CostModel("llama-3.1-8b", "h100-sxm")
    meas = [{"B": B, "D": D, "L": 256, "seconds": 0.02 - 1e-3 * (B + D)} for B in (1, 2) for D in (0, 3)]
    cal = cm.fit(meas)
    assert cal.points == 4 and cal.source.endswith("(overhead only)")
    assert cal.linear_scale == cal.attention_scale == 1.0
    assert 0.01 < cal.overhead_s < 0.02
    assert cal.mean_abs_rel_error < 0.2

def test_profile_calibrates_matching_target(tmp_path):
    from draftwise.planner.model import load_config
    cfg, _ = load_config("llama-3.1-8b")
    base = CostModel("llama-3.1-8b", "h100-sxm")
    steps = [{"B": B, "D": D, "L": 512, "seconds": 2.0 * base.target_time(B, D, 512)} for B in (1, 8) for D in (0, 3, 7)]
    h = get_hardware("h100-sxm")
    h.step_times, h.target_config, h.target = steps, cfg, "llama-3.1-8b"
    cm = CostModel("llama-3.1-8b", h)
    assert cm.calibration.points == 6
    assert cm.target_time(8, 3, 512) == pytest.approx(steps[4]["seconds"], rel=0.02)
    # a different target is not calibrated with it
    assert CostModel("llama-3.1-70b", h).calibration.points == 0


def test_plain_decoding_priced_by_its_run_where_profiled():
    """D = 0 (plain decoding, every speedup's baseline) costs the profile's plain-run step; a
    speculative step without a proposal still costs one token a row amid wider steps."""
    from draftwise.planner import predict
    from draftwise.planner.acceptance import Acceptance
    from draftwise.planner.model import load_config
    cfg, _ = load_config("llama-3.1-8b")
    steps = [{"B": B, "D": D, "L": L, "seconds": 1e-3 * (B + D) * (1 + L / 1000),
              **({"plain_run_seconds": 0.8e-3 * B * (1 + L / 1000)} if D == 0 else {})}
             for B in (1, 4) for D in (0, 4) for L in (500, 1000)]
    h = get_hardware("h100-sxm")
    h.step_times, h.target_config, h.target = steps, cfg, "llama-3.1-8b"
    cm = CostModel("llama-3.1-8b", h)
    assert cm.plain_time(4, 1000) == pytest.approx(0.8 * cm.target_time(4, 0, 1000))
    assert cm.plain_time(64, 8000) == pytest.approx(0.8 * cm.target_time(64, 0, 8000))   # ratio of the edge
    acc = {"ngram": Acceptance([0.9] * 4, name="ngram", proposal_rate=0.5)}
    P = {p["num_draft_tokens"]: p for p in predict("llama-3.1-8b", h, acceptance=acc, batch_sizes=[1],
                                                   draft_tokens=[0, 4], context_lengths=[1000])}
    assert P[0]["target_time_s"] == pytest.approx(0.8 * 2e-3) and P[0]["speedup"] == pytest.approx(1.0)
    # half the steps verify 1 + 4 tokens, half none: those cost the mixed price of one token a row
    assert P[4]["target_time_s"] == pytest.approx(0.5 * 10e-3 + 0.5 * 2e-3)
    assert P[4]["speedup"] == pytest.approx(P[4]["expected_tokens_per_step"] * 0.8 * 2e-3 / P[4]["step_time_s"])
    # an older profile without plain runs prices plain decoding as its D = 0 point
    h.step_times = [{k: v for k, v in m.items() if k != "plain_run_seconds"} for m in steps]
    assert CostModel("llama-3.1-8b", h).plain_time(4, 1000) == pytest.approx(cm.target_time(4, 0, 1000))


def test_measured_draft_model_token_times():
    """A profile that timed the draft model replaces the modelled draft cost for that draft model."""
    from draftwise.planner.model import drafter_desc
    draft_cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}
    h = get_hardware("cpu")
    h.draft_config = draft_cfg
    h.draft_step_times = [{"B": 1, "L": 128, "seconds": 1e-3}, {"B": 4, "L": 128, "seconds": 2e-3},
                          {"B": 1, "L": 1024, "seconds": 3e-3}, {"B": 4, "L": 1024, "seconds": 5e-3}]
    cm = CostModel("llama-3.1-8b", h)
    d = drafter_desc("draft_model", cm.target, config=draft_cfg)
    assert cm.drafter_time(d, 1, 3, 100) == pytest.approx(3e-3)
    assert cm.drafter_time(d, 2, 1, 128) == pytest.approx(1.5e-3)           # log-linear in B
    assert cm.drafter_time(d, 4, 2, 900) == pytest.approx(1e-2)             # nearest context
    assert cm.drafter_time(d, 8, 1, 128) == pytest.approx(2e-3 + 4 * (1e-3 / 3))  # per row beyond
    other = dict(draft_cfg, num_hidden_layers=2)                            # another draft: modelled
    d2 = drafter_desc("draft_model", cm.target, config=other)
    assert cm.drafter_time(d2, 1, 3, 100) != pytest.approx(3 * cm.drafter_time(d2, 1, 1, 100) + 1)
    assert cm.measured_draft_token(d2, 1, 100) is None
    # the target's verification slowed by the draft: (factor − 1) of it joins the draft's cost
    assert cm.measured_target_factor(d, 1, 128) == 1.0
    for p in h.draft_step_times:
        p["target_factor"] = 1.2 if p["B"] == 1 else 1.4
    slowed = CostModel("llama-3.1-8b", h)
    assert slowed.measured_target_factor(d, 2, 128) == pytest.approx(1.3)              # log-linear in B
    assert slowed.measured_target_factor(d, 64, 128) == pytest.approx(1.4)             # held beyond
    assert slowed.drafter_time(d, 1, 3, 100) == pytest.approx(3e-3 + 0.2 * slowed.target_time(1, 3, 100))
    assert slowed.measured_target_factor(d2, 1, 128) == 1.0                            # another draft


def test_a_draft_model_step_after_every_draft_was_accepted_feeds_two_tokens_a_row():
    """A row that accepted every draft hands the draft model two tokens in the step's first forward
    (its last draft, then the bonus token), and the batch's forward is that wide: with probability
    1 − (1 − a_D)^B, a_D the chance a row accepts all D, a step pays the profile's
    `catch_up_seconds` once. Priced per token alone, the draft model's steps in the validation's runs
    cost up to 2.2× the model's at D = 1 (BENCHMARKS §5.0zzz, session 34)."""
    from draftwise.planner.acceptance import Acceptance
    from draftwise.planner.model import drafter_desc
    from draftwise.planner.schedule import _drafter_time
    draft_cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}
    h = get_hardware("cpu")
    h.draft_config = draft_cfg
    h.draft_step_times = [{"B": 1, "L": 128, "seconds": 1e-3, "catch_up_seconds": 4e-4},
                          {"B": 4, "L": 128, "seconds": 2e-3, "catch_up_seconds": 8e-4}]
    cm = CostModel("llama-3.1-8b", h)
    d = drafter_desc("draft_model", cm.target, config=draft_cfg)
    assert cm.drafter_time(d, 4, 2, 128) == pytest.approx(4e-3)                          # nothing accepted in full
    assert cm.drafter_time(d, 1, 2, 128, all_accepted=0.5) == pytest.approx(2e-3 + 0.5 * 4e-4)
    assert cm.drafter_time(d, 4, 2, 128, all_accepted=0.5) == pytest.approx(4e-3 + (1 - 0.5 ** 4) * 8e-4)
    assert cm.drafter_time(d, 4, 2, 128, all_accepted=1.0) == pytest.approx(4e-3 + 8e-4)
    # the planner passes each D's chance of a row accepting all D drafts
    a = Acceptance([0.8, 0.5, 0.5])
    for D in (1, 3):
        assert _drafter_time(cm, d, None, 4, D, 128, a) == pytest.approx(
            cm.drafter_time(d, 4, D, 128, all_accepted=a.survival(D)))
    assert _drafter_time(cm, d, None, 4, 1, 128, a) == pytest.approx(2e-3 + (1 - 0.2 ** 4) * 8e-4)
    # without a measurement, the model's own price of a second token a row
    other = drafter_desc("draft_model", cm.target, config=dict(draft_cfg, num_hidden_layers=2))
    assert cm.drafter_time(other, 4, 2, 128, all_accepted=1.0) > cm.drafter_time(other, 4, 2, 128)


def test_profiled_grid_interpolates_and_extrapolates_with_the_model():
    from draftwise.planner.model import load_config
    cfg, _ = load_config("llama-3.1-8b")
    base = CostModel("llama-3.1-8b", "h100-sxm")
    steps = [{"B": B, "D": D, "L": L, "seconds": 1e-3 * (B + D) * (1 + L / 1000)}
             for B in (1, 4) for D in (0, 4) for L in (500, 1000)]
    h = get_hardware("h100-sxm")
    h.step_times, h.target_config, h.target = steps, cfg, "llama-3.1-8b"
    cm = CostModel("llama-3.1-8b", h)
    assert cm.target_time(4, 4, 1000) == pytest.approx(16e-3)                 # a grid point
    assert cm.target_time(1, 2, 500) == pytest.approx(1e-3 * 3 * 1.5)          # linear in D
    assert cm.target_time(2, 0, 750) == pytest.approx(1e-3 * (1 + 0.5 * 3) * 1.75)  # log-linear in B, linear in L
    # beyond the grid: the edge's measurement times the model's growth
    far = cm.target_time(64, 4, 1000)
    assert far == pytest.approx(16e-3 * cm.target_breakdown(64, 4, 1000)["total"] /
                                cm.target_breakdown(4, 4, 1000)["total"])
    assert far > cm.target_time(4, 4, 1000) and base.target_time(4, 4, 1000) != pytest.approx(16e-3)
