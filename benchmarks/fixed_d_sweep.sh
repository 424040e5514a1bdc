#!/usr/bin/env bash
# Every D = 0 … 8 side by side, with rounds and intervals, in the planner validation's cells where
# the measured curve is flat (prompt lookup at batch 1–4; elsewhere plain decoding wins by 20 % or
# more): what `planner_best_d.py` compares the planner's best D with. Each cell is one resumable
# `adaptive_ab.py` run (adaptive D comes along). ~16 min on the 2-core CPU with 2 rounds.
# Usage: bash benchmarks/fixed_d_sweep.sh [OUT] [PROFILE] [ROUNDS]
set -euo pipefail
OUT=${1:-runs/fixed-d}
PROFILE=${2:-runs/pv-interleaved/profile.json}
ROUNDS=${3:-3}
PY=${PYTHON:-python}
mkdir -p "$OUT"
for ds in throughput-256 throughput-1k; do
    for b in 1 2 4; do
        name="ngram-$ds-b$b"
        "$PY" benchmarks/adaptive_ab.py --drafter ngram --dataset "$ds" --batch-size "$b" --requests 16 \
            --rounds "$ROUNDS" --fixed 1,2,3,4,5,6,7,8 --adaptive "$PROFILE" --out "$OUT/$name" 2>&1 \
            | grep -v "^Loading" | tee "$OUT/$name.txt"
    done
done
