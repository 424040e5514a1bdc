"""Is the planner's best D the measured best, once the measurement can tell? (planner issue)

    bash benchmarks/fixed_d_sweep.sh runs/fixed-d
    python benchmarks/planner_best_d.py runs/fixed-d \
        --predicted benchmarks/results/planner_validation_s7_static.json \
        --predicted benchmarks/results/planner_validation_s6.json

The validation sweep (`planner_validation.py`) measures each (drafter, context, batch, D) cell
once, minutes apart from its neighbours; where D = 0 … 8 lie within a few per cent of each other
(prompt lookup at batch 1–2) its argmax is decided by the machine's drift. `fixed_d_sweep.sh`
decodes those cells' D side by side in rounds (`adaptive_ab.py`); here each cell gets its measured
best D (step-priced, as `adaptive_ab.py` defines it), the D statistically tied with it (95 %
interval of throughput over the best's reaching 1), and the planner's prediction from each
`--predicted` validation summary (the prediction only: same profile, same acceptance input).
Cells the sweep did not re-measure keep the validation's verdict, so the last line is the hit
rate over the whole validation grid.
"""
import argparse
import json
from pathlib import Path

from adaptive_ab import load_units, summarise


def measured(cell: Path) -> dict:
    setting = json.loads((cell / "setting.json").read_text())
    rep = summarise(load_units(cell / "units.jsonl"), cell.name)
    out = {"dataset": setting["dataset"], "batch_size": setting["batch_size"], "units": rep["units"]}
    for est in ("step_priced", "wall"):
        fixed = {(0 if n == "plain" else int(n.split("=")[1])): r for n, r in rep["configs"].items() if n != "adaptive"}
        best = max(fixed, key=lambda d: fixed[d][est + "_over_plain"])
        out[est] = {"best": best, "tied": sorted(d for d, r in fixed.items() if r[est + "_over_best_fixed_ci"][1] >= 1.0),
                    "over_plain": {d: r[est + "_over_plain"] for d, r in sorted(fixed.items())}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", help="the folder fixed_d_sweep.sh wrote")
    ap.add_argument("--predicted", action="append", required=True, help="a planner_validation summary JSON")
    ap.add_argument("--drafter", default="ngram")
    args = ap.parse_args()
    cells = {(m["dataset"], m["batch_size"]): m for m in
             (measured(d) for d in sorted(Path(args.sweep).iterdir()) if (d / "units.jsonl").exists())}
    report = {"cells": list(cells.values()), "predictions": {}}
    for path in args.predicted:
        val = json.loads(Path(path).read_text())
        label = val.get("batching") or "continuous"
        rows, hits, hits_tied, n = [], 0, 0, 0
        for c in val["cell_results"]:
            key = (c["dataset"], c["batch_size"])
            pred = c["best_D_predicted"]
            if c["drafter"] == args.drafter and key in cells:
                m = cells[key]["step_priced"]
                hit = abs(pred - m["best"]) <= 1
                tied = any(abs(pred - d) <= 1 for d in m["tied"])
                rows.append(f"  {c['dataset']:15s} B={c['batch_size']:<3d} predicted D={pred}  measured best D={m['best']} "
                            f"(tied: {m['tied']}; the validation's pass: {c['best_D_measured']})  "
                            f"±1: {'hit' if hit else 'miss'}, ±1 of a tied D: {'hit' if tied else 'miss'}")
            else:
                hit = tied = c["best_D_hit"]
            hits, hits_tied, n = hits + hit, hits_tied + tied, n + 1
        report["predictions"][label] = {"file": path, "best_D_within_1": hits / n, "best_D_within_1_of_tied": hits_tied / n}
        print(f"{label} planner ({path}):")
        print("\n".join(rows))
        print(f"  whole grid ({n} cells): best D within ±1 {hits / n:.0%}; within ±1 of a D tied with the best {hits_tied / n:.0%}")
    for m in cells.values():
        s = m["step_priced"]
        print(f"{m['dataset']:15s} B={m['batch_size']:<3d} step-priced over plain: "
              + " ".join(f"D{d}={v:.3f}" for d, v in s["over_plain"].items()) + f"  (wall best D={m['wall']['best']})")
    (Path(args.sweep) / "best_d.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
