"""A host with two prices of width (`planner.levels`): the profile finds the passes that met each,
and the plan picks the D that loses least at either."""
from dataclasses import replace

import pytest

from draftwise.planner import plan, predict
from draftwise.planner.cli import format_plan
from draftwise.planner.hardware import get_hardware
from draftwise.planner.levels import at_level, describe_levels, find_levels, least_regret, level_hardware
from draftwise.planner.model import load_config
from draftwise.planner.profile import measure_steps

from test_planner_profile import FakeRunner, fake_model

PLAIN = 6e-3


def grid(per_pass: list[float], Ds=range(9), B: int = 1, L: int = 1000, noise=None) -> list[dict]:
    """Step times of a profile whose pass p prices each drafted token at per_pass[p] plain steps
    (`noise(p, D)`, if given, scales a pass's time)."""
    out = []
    for D in Ds:
        ps = [PLAIN * (1 + k * D) * (noise(p, D) if noise else 1.0) for p, k in enumerate(per_pass)]
        m = {"B": B, "D": D, "L": L, "seconds": sorted(ps)[len(ps) // 2], "pass_seconds": ps}
        if D == 0:
            m["plain_run_seconds"], m["pass_plain_run_seconds"] = 0.95 * m["seconds"], [0.95 * p for p in ps]
        out.append(m)
    return out


def test_two_levels_are_found_and_split_by_pass():
    # passes 1, 3, 4 dear (0.17 plain steps a drafted token), 2 and 5 cheap (0.07), ±3 % noise
    wobble = lambda p, D: 1 + 0.03 * ((p * 7 + D * 3) % 3 - 1)
    lv = find_levels(grid([0.17, 0.07, 0.17, 0.17, 0.07], noise=wobble))
    assert len(lv) == 1
    assert lv[0]["cheap_passes"] == [1, 4] and lv[0]["dear_passes"] == [0, 2, 3]
    # the widths told apart: from D = 2 (1.34 against 1.14 plain steps) up
    assert lv[0]["widths"] == list(range(2, 9)) and lv[0]["disturbed_passes"] == []
    assert lv[0]["price"]["dear"][-1] / lv[0]["price"]["cheap"][-1] == pytest.approx(2.36 / 1.56, rel=0.05)
    assert (lv[0]["B"], lv[0]["L"]) == (1, 1000)


# A profile of the 2-core CPU of BENCHMARKS.md (session 38), batch 1 at 1k tokens: ms per pass
# for D = 0 … 8, and D = 0's run of plain steps. Passes 2 and 5 met the cheap level.
HOST = {0: [6.57, 7.06, 6.58, 6.39, 6.41, 6.53], 1: [9.64, 9.69, 9.98, 9.2, 9.36, 9.56],
        2: [10.81, 15.5, 10.78, 10.66, 10.62, 10.92], 3: [10.5, 10.01, 9.86, 9.95, 9.45, 10.1],
        4: [10.92, 8.44, 10.79, 10.82, 8.61, 11.18], 5: [11.91, 8.89, 12.23, 12.57, 8.72, 12.17],
        6: [13.98, 10.21, 13.65, 13.46, 8.94, 13.01], 7: [11.82, 10.02, 11.11, 11.3, 8.91, 11.38],
        8: [11.91, 10.61, 12.25, 12.01, 9.73, 12.19]}
HOST_PLAIN = [6.53, 6.85, 6.45, 6.46, 6.71, 6.44]


def host_profile(plain=HOST_PLAIN) -> list[dict]:
    out = [{"B": 1, "D": D, "L": 1048, "seconds": sorted(ps)[3] / 1e3, "pass_seconds": [t / 1e3 for t in ps]}
           for D, ps in HOST.items()]
    out[0]["plain_run_seconds"], out[0]["pass_plain_run_seconds"] = sorted(plain)[3] / 1e3, [t / 1e3 for t in plain]
    return out


def test_the_hosts_two_levels():
    (lv,) = find_levels(host_profile())
    assert lv["cheap_passes"] == [1, 4] and lv["dear_passes"] == [0, 2, 3, 5]
    assert lv["widths"] == [4, 5, 6, 7, 8]           # 2–4 tokens cost the same at both levels
    assert describe_levels([lv]) == ["B=1 L=1048: verifying D = 4–8 drafts cost 1.26–1.50× a plain step in "
                                      "passes 2, 5 and 1.67–2.10× in passes 1, 3, 4, 6"]
    # each level: the plain step as measured over every pass, the wider steps at the level's price
    cheap = {m["D"]: m for m in at_level(host_profile(), [lv], "cheap")}
    assert cheap[0]["plain_run_seconds"] == pytest.approx(6.53e-3)
    assert cheap[5]["seconds"] == pytest.approx(6.53e-3 * (8.89 / 6.85 + 8.72 / 6.71) / 2)
    assert cheap[5]["pass_seconds"] == pytest.approx([8.89e-3, 8.72e-3])


def test_a_pass_that_slowed_the_whole_machine_is_left_out():
    # pass 1's plain steps at 1.8× (another process): every width "cheap" in plain steps of its own
    # pass, but that is the unit moving, not the price of width
    steps = host_profile(plain=[11.8] + HOST_PLAIN[1:])
    (lv,) = find_levels(steps)
    assert lv["disturbed_passes"] == [0] and lv["cheap_passes"] == [1, 4] and lv["dear_passes"] == [2, 3, 5]
    assert "(pass 1 left out: its plain steps were off by over 25%)" in describe_levels([lv])[0]


@pytest.mark.parametrize("per_pass", [
    [0.12, 0.125, 0.118, 0.122, 0.12],          # one level, noise
    [0.07, 0.085, 0.10, 0.115, 0.13, 0.145],     # a steady drift: spread wide, but no jump
])
def test_one_level_or_a_drift_is_not_two(per_pass):
    assert find_levels(grid(per_pass)) == []


def test_a_profile_without_passes_has_no_levels():
    steps = [{k: v for k, v in m.items() if not k.startswith("pass_")} for m in grid([0.17, 0.07, 0.17])]
    assert find_levels(steps) == []
    assert find_levels(grid([0.17])) == []          # one pass: nothing to compare


def test_each_level_is_the_median_of_its_passes():
    steps = grid([0.17, 0.07, 0.17, 0.05], B=1) + grid([0.1, 0.1, 0.1, 0.1], B=4)
    lv = find_levels(steps)
    assert [(x["B"], x["cheap_passes"], x["dear_passes"]) for x in lv] == [(1, [1, 3], [0, 2])]
    cheap, dear = at_level(steps, lv, "cheap"), at_level(steps, lv, "dear")
    at = lambda pts, B, D: next(m for m in pts if (m["B"], m["D"]) == (B, D))
    assert at(cheap, 1, 5)["seconds"] == pytest.approx(PLAIN * (1 + 0.06 * 5))
    assert at(dear, 1, 5)["seconds"] == pytest.approx(PLAIN * (1 + 0.17 * 5))
    assert at(cheap, 1, 0)["plain_run_seconds"] == pytest.approx(0.95 * PLAIN)
    assert at(cheap, 4, 5) == at(steps, 4, 5) == at(dear, 4, 5)      # one level there: untouched
    with pytest.raises(ValueError, match="cheap, dear"):
        at_level(steps, lv, "median")


def test_least_regret():
    cheap = [1.0, 1.10, 1.18, 1.22, 1.25, 1.26]     # best D = 5
    dear = [1.0, 1.08, 1.12, 1.13, 1.12, 1.09]      # best D = 3
    # D = 4 loses 0.8 % at the cheap level and 0.9 % at the dear one; D = 3 3.2 %, D = 5 3.5 %
    assert least_regret([cheap, dear], [5, 3]) == 4
    assert least_regret([cheap, cheap], [5, 5]) == 5
    # a level whose own pick is plain decoding (its best gain under the margin) counts from D = 0
    assert least_regret([[1.0, 1.01, 0.90], [1.0, 1.2, 1.3]], [0, 2]) == 1      # 7.7 % at worst
    assert least_regret([[1.0, 1.01, 0.98], [1.0, 1.2, 1.3]], [0, 2]) == 2      # 2 %


class TwoSpeedRunner(FakeRunner):
    """A plain forward costs 6 ms; a wider one 6 ms + 1 ms (cheap) or 2 ms (dear) a token beyond
    the first, the level switching every `period` seconds of the fake clock."""

    def __init__(self, period: float):
        super().__init__()
        self.t, self.period = 0.0, period

    def now(self):
        return self.t

    def forward(self, tok, n):
        w = tok.shape[1]
        dear = int(self.t // self.period) % 2 == 1
        self.t += 0.006 + (w - 1) * (0.002 if dear else 0.001)


def test_measure_steps_keeps_each_pass_and_the_levels_show():
    r = TwoSpeedRunner(period=1.0)
    pts = measure_steps(fake_model(), [1], list(range(6)), [8], repeats=3, passes=4, runner=r, clock=r.now)
    assert all(len(p["pass_seconds"]) == 4 for p in pts)
    assert len(pts[0]["pass_plain_run_seconds"]) == 4
    lv = find_levels(pts)
    assert len(lv) == 1 and lv[0]["cheap_passes"] and lv[0]["dear_passes"]
    # each level's price of a drafted token: 1/6 or 2/6 of a plain step
    at = {name: {m["D"]: m["seconds"] for m in at_level(pts, lv, name)} for name in ("cheap", "dear")}
    assert at["cheap"][5] / at["cheap"][0] == pytest.approx(1 + 5 / 6, rel=0.02)
    assert at["dear"][5] / at["dear"][0] == pytest.approx(1 + 10 / 6, rel=0.02)
    # one speed throughout: no levels
    steady = TwoSpeedRunner(period=1e9)
    assert find_levels(measure_steps(fake_model(), [1], list(range(6)), [8], repeats=3, passes=4, runner=steady,
                                     clock=steady.now)) == []


def _profile(per_pass: list[float]):
    cfg, _ = load_config("llama-3.1-8b")
    h = get_hardware("h100-sxm")
    h.source, h.target_config, h.target, h.dtype = "measured", cfg, "llama-3.1-8b", "bfloat16"
    h.step_times = grid(per_pass, B=1) + grid(per_pass, B=4)
    return h


def test_plan_picks_the_d_that_loses_least_at_either_level():
    # three dear passes out of five: the median is the dear level, whose own best D is smaller
    h = _profile([0.16, 0.05, 0.16, 0.16, 0.05])
    kw = dict(alpha=0.8, drafters=["ngram"], batch_sizes=[1, 4], context_lengths=[1000], max_draft=8)
    res = plan("llama-3.1-8b", h, **kw)
    assert [(x["B"], x["cheap_passes"], x["dear_passes"]) for x in res["price_levels"]] == \
        [(1, [1, 4], [0, 2, 3]), (4, [1, 4], [0, 2, 3])]
    cell = res["schedule"][0]
    own = {lv: v["num_draft_tokens"] for lv, v in cell["price_levels"].items()}
    # each level priced alone gives its own D, and the median profile the dear one's
    alone = {lv: plan("llama-3.1-8b", hw, **kw)["schedule"][0]["num_draft_tokens"]
             for lv, hw in level_hardware(h).items()}
    assert own == alone and own["cheap"] > own["dear"] + 1
    assert plan("llama-3.1-8b", _median_only(h), **kw)["schedule"][0]["num_draft_tokens"] == own["dear"]
    # the plan's D: between them, the one whose worst loss against either level's own D is least
    D = cell["num_draft_tokens"]
    assert own["dear"] < D < own["cheap"]
    sp = {lv: [p["speedup"] for p in predict("llama-3.1-8b", hw, alpha=0.8, drafters=["ngram"], batch_sizes=[1],
                                              draft_tokens=range(9), context_lengths=[1000])]
          for lv, hw in level_hardware(h).items()}
    worst = [max(1 - sp[lv][d] / sp[lv][own[lv]] for lv in sp) for d in range(9)]
    assert D == min(range(9), key=worst.__getitem__)
    assert worst[D] < 0.5 * min(worst[own["cheap"]], worst[own["dear"]])
    for lv, v in cell["price_levels"].items():
        assert v["speedup_at_planned_D"] == pytest.approx(sp[lv][D]) and v["speedup"] == pytest.approx(sp[lv][own[lv]])
    reason = next(r["text"] for r in cell["reasons"] if r["rule"] == "price-levels")
    assert f"the best D is {own['cheap']} at the cheap price and {own['dear']} at the dear one" in reason
    assert f"D = {D} loses at most" in reason
    # the readable table says so, and shows each level's own D
    text = format_plan(res)
    assert "two prices of width" in text and "B=1 L=1000: verifying D = 2–8 drafts cost" in text
    assert f"[{own['cheap']}/{own['dear']}]" in text
    # a profile with one level plans as before, and says nothing of levels
    one = plan("llama-3.1-8b", _profile([0.16] * 5), **kw)
    assert "price_levels" not in one and "price_levels" not in one["schedule"][0]
    assert "two prices" not in format_plan(one)
    assert all(r["rule"] != "price-levels" for r in one["schedule"][0]["reasons"])


def _median_only(h):
    return replace(h, step_times=[{k: v for k, v in p.items() if not k.startswith("pass_")} for p in h.step_times])
