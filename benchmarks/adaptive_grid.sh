#!/usr/bin/env bash
# Adaptive D against the best fixed D of each cell of the planner validation (BENCHMARKS §5.1),
# side by side with rounds: two drafters × two throughput sets × batch 1–16. Each cell is one
# resumable `adaptive_ab.py` run (a fresh process: adaptive D starts learning from nothing).
# The fixed D compared are the two best of that cell in a validation sweep: with SWEEP=PATH (a
# planner_validation.py summary.json), the two best D ≥ 1 it measured in each cell; without it, the
# ones written below (session 9's sweep). Ends with a markdown table of every cell (OUT/table.md).
# With VERSUS=PATH (another version of src/draftwise/planner/adaptive.py) every cell also runs that
# scheduler side by side (`adaptive_ab.py --versus`), ~25 % longer.
# ONLY=PATTERN runs only the cells whose drafter matches it (a shell pattern: ONLY=ngram).
# Usage: [SWEEP=summary.json] [VERSUS=old.py] [ONLY=ngram] bash benchmarks/adaptive_grid.sh [OUT] [PROFILE]
set -euo pipefail
OUT=${1:-runs/adaptive-grid}
PROFILE=${2:-runs/pv-interleaved/profile.json}
PY=${PYTHON:-python}
best2() {  # drafter dataset batch: the two best D >= 1 of that cell in $SWEEP
    "$PY" - "$SWEEP" "$@" <<'PYEOF'
import json, sys
path, drafter, dataset, batch = sys.argv[1:]
for c in json.load(open(path))["cell_results"]:
    if (c["drafter"], c["dataset"], c["batch_size"]) == (drafter, dataset, int(batch)):
        s = {int(d): v for d, v in c["speedup_measured"].items() if int(d) > 0}
        print(",".join(str(d) for d in sorted(s, key=s.get, reverse=True)[:2]))
        break
else:
    sys.exit(f"{path} has no cell {drafter} {dataset} batch {batch}")
PYEOF
}
cell() {  # drafter dataset batch requests rounds fixed
    local name fixed; name="$(echo "$1" | cut -d: -f1)-$2-b$3"
    case "$1" in ${ONLY:-*}) ;; *) return 0 ;; esac
    fixed=$6; [ -z "${SWEEP:-}" ] || fixed=$(best2 "$1" "$2" "$3")
    "$PY" benchmarks/adaptive_ab.py --drafter "$1" --dataset "$2" --batch-size "$3" --requests "$4" \
        --rounds "$5" --fixed "$fixed" --adaptive "$PROFILE" --out "$OUT/$name" ${VERSUS:+--versus "$VERSUS"} 2>&1 | grep -v "^Loading" \
        | tee "$OUT/$name.txt"
}
mkdir -p "$OUT"
for ds in throughput-256 throughput-1k; do
    if [ "$ds" = throughput-256 ]; then f1=4,5; f2=3,5; else f1=4,7; f2=7,4; fi
    cell ngram "$ds" 1 16 4 "$f1"
    cell ngram "$ds" 2 16 6 "$f2"
    cell ngram "$ds" 4 16 6 1,3
    cell ngram "$ds" 8 32 5 1
    cell ngram "$ds" 16 64 4 1
    for b in 1 2 4 8 16; do
        n=$(( b * 4 > 16 ? b * 4 : 16 ))
        cell draft-model:zoo/draft "$ds" "$b" "$n" $(( b == 1 ? 3 : 4 )) 1
    done
done
"$PY" benchmarks/adaptive_ab.py --table "$OUT" | tee "$OUT/table.md"
