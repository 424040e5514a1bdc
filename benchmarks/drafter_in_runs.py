"""What a draft model's steps cost inside a validation's runs, against what the profile prices them at.

    python benchmarks/drafter_in_runs.py runs/pv-draft [--drafter draft-model:zoo/draft]

Reads a `planner_validation.py` output folder: its profile (profile.json), the target's step times
inside the drafter's runs (profile_in_sweep-*.json), the sweep's timing (sweep/timing.json) and
the measured acceptance per cell (summary.json). Per context, batch size and D, the drafter's
seconds a step are the step's median time less the target's median at that shape inside the same
runs, less what a plain step spends outside its target forward (the engine's own: plain decoding's
median step less its target's); the profile prices them at D × its measured seconds of one draft-model token
(draft_step_times), plus, where the profile timed it, its `catch_up_seconds` with probability
1 − (1 − a_D)^B, a_D the measured chance a row accepts all D drafts (what the cost model charges).
The ratio shows where the cost model's drafter is off, and how that moves with D: a ratio that
falls with D is a cost paid once a step, not per token. Then the validation's speedup error over
all D, with plain decoding priced as the profile priced it and as the sweep's plain runs paid it
(BENCHMARKS §5.0zzz, session 34).
"""
import argparse
import json
import re
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="a planner_validation.py --out folder")
    ap.add_argument("--drafter", default="draft-model:zoo/draft")
    ap.add_argument("--draft-lengths", default="1,2,4,8")
    args = ap.parse_args()
    out = Path(args.out)
    profile = json.loads((out / "profile.json").read_text())
    inside = sorted(out.glob("profile_in_sweep-*.json"))
    if not inside:
        raise SystemExit(f"{out}: no profile_in_sweep-*.json (a planner_validation.py --out folder has one per drafter)")
    points = json.loads(inside[0].read_text())["step_times"]
    in_runs = {(p["B"], p["D"], p["L"]): p["seconds"] for p in points}
    in_runs_plain = {(p["B"], p["L"]): p["plain_run_seconds"] for p in points if "plain_run_seconds" in p}
    per_token = {(p["B"], p["L"]): p["seconds"] for p in profile.get("draft_step_times", [])}
    catch_up = {(p["B"], p["L"]): p.get("catch_up_seconds", 0.0) for p in profile.get("draft_step_times", [])}
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    if not per_token:       # prompt lookup: no drafter to split out, only the baseline
        print(f"{out}/profile.json measured no draft model: the baseline only")
        baseline(summary, profile, points)
        return
    alphas = {(c["context"], c["batch_size"]): c.get("acceptance") or []
              for c in summary.get("cell_results", []) if c.get("drafter") == args.drafter}
    timing = json.loads((out / "sweep" / "timing.json").read_text())["results"]
    # the datasets in order of length, against the profile's contexts in order
    datasets = sorted(timing, key=lambda d: int(re.sub(r"\D", "", d.replace("k", "000")) or 0))
    contexts = sorted({L for _, _, L in in_runs})
    print(f"{args.drafter}: drafter seconds a step inside the runs / the profile's price (ms)")
    for ds, L in zip(datasets, contexts):
        runs = timing[ds].get(args.drafter)
        if runs is None:
            raise SystemExit(f"{ds}: no runs of {args.drafter} (have: {', '.join(timing[ds])})")
        for key in sorted(runs[next(iter(runs))], key=lambda b: int(b.split("=")[1])):
            B = int(key.split("=")[1])
            plain = timing[ds].get("none", {}).get("D=0", {}).get(key, {}).get("timing", {}).get("step_time", {})
            own = plain.get("0.5", 0.0) - in_runs_plain.get((B, L), plain.get("0.5", 0.0))   # the engine's own
            cells = []
            for D in (int(x) for x in args.draft_lengths.split(",")):
                step = runs.get(f"D={D}", {}).get(key, {}).get("timing", {}).get("step_time", {}).get("0.5")
                tgt, tok = in_runs.get((B, D, L)), per_token.get((B, L))
                if step is None or tgt is None or tok is None:
                    cells.append(f"D={D}: –")
                    continue
                drafter = step - tgt - own
                a_D = 1.0
                for a in (alphas.get((L, B)) or [0.0])[:D]:
                    a_D *= a
                price = D * tok + (1.0 - (1.0 - a_D) ** B) * catch_up.get((B, L), 0.0)
                cells.append(f"D={D}: {drafter * 1e3:5.1f} / {price * 1e3:5.1f} (×{drafter / price:.2f})")
            print(f"  L={L:5d} B={B:2d}  " + "  ".join(cells))
    baseline(summary, profile, points)


def baseline(summary: dict, profile: dict, points: list) -> None:
    """The validation's predicted speedups over all D against the measured, as the planner made
    them (plain decoding at the profile's price) and with plain decoding at the price the sweep's
    own plain runs paid: what of the error is the baseline every speedup divides by."""
    prof = {(p["B"], p["L"]): p["plain_run_seconds"] for p in profile.get("step_times", []) if "plain_run_seconds" in p}
    swept = {(p["B"], p["L"]): p["plain_run_seconds"] for p in points if "plain_run_seconds" in p}
    cells = summary.get("cell_results", [])
    if not cells or not prof or not swept:
        return
    tol = summary.get("tolerance", 0.15)
    errs = {"the profile's plain step": [], "the sweep's plain step": []}
    print(f"speedup over all D > 0, predicted against measured (within {tol:.0%}, mean error):")
    for c in cells:
        key = (c["batch_size"], c["context"])
        if key not in prof or key not in swept:
            continue
        for D, m in c["speedup_measured"].items():
            if D == "0":
                continue
            pred = c["speedup_predicted"][D]
            errs["the profile's plain step"].append(abs(pred / m - 1))
            errs["the sweep's plain step"].append(abs(pred * swept[key] / prof[key] / m - 1))
    for name, e in errs.items():
        if e:
            print(f"  with {name}: {sum(x <= tol for x in e) / len(e):.0%} within, mean {sum(e) / len(e):.1%}")


if __name__ == "__main__":
    main()
