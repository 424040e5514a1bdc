"""Benchmark metrics, defined exactly as NVIDIA specdec_bench (SPEED-Bench) and aiperf define them.

Acceptance (specdec_bench convention)
-------------------------------------
A verification *step* emits ``L`` tokens: accepted drafts + 1 bonus/correction token (plain decoding
has L = 1 at every step).

* ``Request_AL[q]``   mean L over all steps of all turns of request q
* ``Category_AL[c]``  mean of Request_AL over the requests of category c (unweighted)
* ``Average_AL``      mean of Request_AL over all requests (unweighted)
* ``Acceptance_Length_Histogram``  {L: number of steps}, pooled over all steps, only lengths that occur
* ``Conditional_Acceptance_Rate[k]`` = P(L >= k | L >= k-1) from the pooled histogram, for
  k = 1 … max L; k = 1 is 1.0; key k describes draft position k-1. Lengths that never occur are
  handled by working on the cumulative counts N(L >= k) (no shifting of keys).
* ``Joint_Acceptance_Rate[k]`` = product of the conditionals up to k = P(L >= k).

Requests without any verification step (e.g. one generated token) are left out of every average.

aiperf convention (kept available next to it): j = L - 1 accepted drafts per step;
token-weighted AL = 1 + sum(accepted) / sum(steps); draft acceptance rate = sum(accepted) / sum(drafted).

Timing (per (request, turn) record)
-----------------------------------
t0 = request sent, t1 … tn = chunk (step) arrival times, ``num_tokens`` output tokens:
TTFT = t1 - t0; E2E = tn - t0; step times = gaps between consecutive distinct chunk times;
per-user tokens/s = (num_tokens - 1) / (tn - t1);
system output tokens/s = sum(num_tokens) / (max tn - min t0) over the records of one *window*
(one batch of the built-in engine, or one concurrency level of the client).
Every statistic is reported as {min, max, mean, std, 0.25, 0.5, 0.75} (population std, linear quantiles).
"""
from __future__ import annotations

import math
from collections import Counter, OrderedDict
from typing import Any, Iterable, Mapping, Sequence

ACCEPTANCE_KEYS = (
    "Request_AL",
    "Category_AL",
    "Average_AL",
    "Acceptance_Length_Histogram",
    "Conditional_Acceptance_Rate",
    "Joint_Acceptance_Rate",
)

QUALITATIVE_CATEGORIES = (
    "coding", "humanities", "math", "multilingual", "qa", "rag",
    "reasoning", "roleplay", "stem", "summarization", "writing",
)
THROUGHPUT_TIERS = ("low_entropy", "mixed", "high_entropy")


def category_order(categories: Iterable[str]) -> list[str]:
    """aiperf column order: qualitative categories in their canonical order, then the entropy tiers,
    then anything else alphabetically."""
    cats = set(categories)
    canon = [c for c in QUALITATIVE_CATEGORIES + THROUGHPUT_TIERS if c in cats]
    return canon + sorted(cats - set(canon))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _step_counts(req: Mapping[str, Any]) -> Counter:
    """Step-length counts of one request: from ``step_lengths`` (list of L) or ``length_counts``
    ({L: count}, e.g. rebuilt from per-position counters)."""
    if req.get("step_lengths") is not None:
        counts = Counter(int(x) for x in req["step_lengths"])
    elif req.get("length_counts") is not None:
        counts = Counter({int(k): int(v) for k, v in req["length_counts"].items() if int(v) > 0})
    else:
        counts = Counter()
    bad = [L for L in counts if L < 1]
    if bad:
        raise ValueError(f"request {req.get('question_id')!r}: step lengths must be >= 1, got {bad}")
    return counts


def rates_from_histogram(hist: Mapping[int, int]) -> tuple[dict[int, float], dict[int, float]]:
    """(Conditional_Acceptance_Rate, Joint_Acceptance_Rate) from a pooled {L: count} histogram."""
    hist = {int(k): int(v) for k, v in hist.items() if int(v) > 0}
    if not hist:
        return {}, {}
    total = sum(hist.values())
    max_len = max(hist)
    # at_least[k] = number of steps with L >= k
    at_least = {k: sum(v for L, v in hist.items() if L >= k) for k in range(1, max_len + 1)}
    cond: dict[int, float] = {}
    joint: dict[int, float] = {}
    for k in range(1, max_len + 1):
        cond[k] = 1.0 if k == 1 else at_least[k] / at_least[k - 1]
        joint[k] = at_least[k] / total
    return cond, joint


def acceptance_metrics(requests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """specdec_bench's acceptance metrics.

    ``requests``: iterable of ``{"question_id": str, "category": str, "step_lengths": [int, …]}``
    (``length_counts: {L: n}`` may replace ``step_lengths``). Several entries with the same
    question_id (e.g. one per turn) are pooled into one request. Returns a dict with the keys
    ``Request_AL, Category_AL, Average_AL, Acceptance_Length_Histogram,
    Conditional_Acceptance_Rate, Joint_Acceptance_Rate`` (histogram/rate keys are ints).
    """
    per_req: "OrderedDict[str, Counter]" = OrderedDict()
    req_cat: dict[str, str] = {}
    for r in requests:
        qid = str(r["question_id"])
        per_req.setdefault(qid, Counter()).update(_step_counts(r))
        req_cat.setdefault(qid, str(r.get("category", "")))
    request_al: dict[str, float] = {}
    pooled: Counter = Counter()
    for qid, counts in per_req.items():
        n = sum(counts.values())
        if n == 0:
            continue
        request_al[qid] = sum(L * c for L, c in counts.items()) / n
        pooled.update(counts)
    by_cat: dict[str, list[float]] = {}
    for qid, al in request_al.items():
        by_cat.setdefault(req_cat[qid], []).append(al)
    category_al = {c: _mean(by_cat[c]) for c in category_order(by_cat)}
    cond, joint = rates_from_histogram(pooled)
    return {
        "Request_AL": request_al,
        "Category_AL": category_al,
        "Average_AL": _mean(list(request_al.values())) if request_al else float("nan"),
        "Acceptance_Length_Histogram": {L: pooled[L] for L in sorted(pooled)},
        "Conditional_Acceptance_Rate": cond,
        "Joint_Acceptance_Rate": joint,
    }


def aiperf_acceptance(requests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """aiperf's token-weighted convention, overall and per category.

    Each request: ``step_lengths`` (or ``length_counts``) and optionally ``drafted`` (a list of
    drafted-token counts per step, or a total). Returns ``{"Token_Weighted_AL", "Draft_Acceptance_Rate",
    "Category_Token_Weighted_AL", "Category_Draft_Acceptance_Rate", "num_steps", "num_accepted",
    "num_drafted"}``; the acceptance rate is None when drafted counts are missing or zero.
    """
    tot: dict[str, list[float]] = {}
    have_drafted: dict[str, bool] = {}
    for r in requests:
        counts = _step_counts(r)
        steps = sum(counts.values())
        accepted = sum((L - 1) * c for L, c in counts.items())
        d = r.get("drafted")
        drafted = None if d is None else (sum(d) if isinstance(d, (list, tuple)) else d)
        for key in ("__all__", str(r.get("category", ""))):
            t = tot.setdefault(key, [0, 0, 0])
            t[0] += steps
            t[1] += accepted
            if drafted is None:
                have_drafted[key] = False
            else:
                have_drafted.setdefault(key, True)
                t[2] += drafted

    def al(key):
        t = tot.get(key)
        return 1.0 + t[1] / t[0] if t and t[0] else float("nan")

    def rate(key):
        t = tot.get(key)
        return t[1] / t[2] if t and have_drafted.get(key) and t[2] else None

    cats = category_order(k for k in tot if k != "__all__")
    t = tot.get("__all__", [0, 0, 0])
    return {
        "Token_Weighted_AL": al("__all__"),
        "Draft_Acceptance_Rate": rate("__all__"),
        "Category_Token_Weighted_AL": {c: al(c) for c in cats},
        "Category_Draft_Acceptance_Rate": {c: rate(c) for c in cats},
        "num_steps": t[0],
        "num_accepted": t[1],
        "num_drafted": t[2] if have_drafted.get("__all__") else None,
    }


def length_counts_from_per_position(num_drafts: int, accepted_per_pos: Sequence[int]) -> dict[int, int]:
    """Rebuild the {L: count} step histogram of chain drafting from vLLM-style counters:
    ``num_drafts`` steps, ``accepted_per_pos[i]`` = steps whose draft at position i was accepted
    (so N(L >= i + 2) = accepted_per_pos[i], N(L >= 1) = num_drafts)."""
    at_least = [int(num_drafts)] + [int(x) for x in accepted_per_pos]
    for a, b in zip(at_least, at_least[1:]):
        if b > a:
            raise ValueError(f"per-position accepted counts must not increase: {at_least}")
    out = {}
    for i, n in enumerate(at_least):
        nxt = at_least[i + 1] if i + 1 < len(at_least) else 0
        if n - nxt > 0:
            out[i + 1] = n - nxt
    return out


# ------------------------------------------------------------------------------------------ timing

def summary_stats(values: Iterable[float]) -> dict[str, float] | None:
    """{min, max, mean, std, 0.25, 0.5, 0.75} (population std; linear-interpolated quantiles)."""
    xs = sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))
    if not xs:
        return None
    n = len(xs)
    mean = sum(xs) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / n)

    def q(p):
        pos = p * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {"min": xs[0], "max": xs[-1], "mean": mean, "std": std,
            "0.25": q(0.25), "0.5": q(0.5), "0.75": q(0.75)}


def record_timing(t0: float, chunk_times: Sequence[float], num_tokens: int) -> dict[str, Any]:
    """Per (request, turn) timing: ttft, e2e, step_times (gaps between distinct chunk times) and
    per-user tokens/s. ``chunk_times`` may repeat a time for several tokens of one step."""
    times = sorted(float(t) for t in chunk_times)
    out: dict[str, Any] = {"ttft": None, "e2e": None, "step_times": [], "user_tps": None,
                           "num_tokens": int(num_tokens)}
    if not times:
        return out
    distinct = [times[0]]
    for t in times[1:]:
        if t > distinct[-1]:
            distinct.append(t)
    out["ttft"] = distinct[0] - t0
    out["e2e"] = distinct[-1] - t0
    out["step_times"] = [b - a for a, b in zip(distinct, distinct[1:])]
    if num_tokens > 1 and distinct[-1] > distinct[0]:
        out["user_tps"] = (num_tokens - 1) / (distinct[-1] - distinct[0])
    return out


def system_tps(windows: Iterable[Iterable[tuple[float, float, int]]]) -> float | None:
    """System output tokens/s = sum tokens / sum over windows of (max t_end - min t_start).
    ``windows``: iterables of (t_start, t_end, num_tokens) per record. One window gives exactly
    specdec_bench's sum(tokens) / (max tn - min t0)."""
    tokens = 0
    span = 0.0
    for w in windows:
        w = list(w)
        if not w:
            continue
        tokens += sum(n for _, _, n in w)
        span += max(e for _, e, _ in w) - min(s for s, _, _ in w)
    return tokens / span if span > 0 else None


def timing_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate timing of one configuration.

    ``records``: one per (request, turn) with ``t0`` (absolute send time), ``chunk_times``
    (absolute arrival times), ``num_tokens`` and ``window`` (an id grouping records that ran together).
    """
    per = [record_timing(r["t0"], r["chunk_times"], r["num_tokens"]) for r in records]
    windows: dict[Any, list] = {}
    for r, p in zip(records, per):
        if p["e2e"] is None:
            continue
        windows.setdefault(r.get("window", 0), []).append((r["t0"], r["t0"] + p["e2e"], r["num_tokens"]))
    steps = [s for p in per for s in p["step_times"]]
    return {
        "num_records": len(records),
        "num_output_tokens": sum(int(r["num_tokens"]) for r in records),
        "ttft": summary_stats(p["ttft"] for p in per),
        "e2e": summary_stats(p["e2e"] for p in per),
        "step_time": summary_stats(steps),
        "user_tps": summary_stats(p["user_tps"] for p in per),
        "system_tps": system_tps(windows.values()),
    }


def speedup(spec: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, float | None]:
    """Speedup of a speculative configuration over the plain baseline at the same batch size /
    concurrency: ratio of mean per-user tokens/s and ratio of system tokens/s."""
    def ratio(a, b):
        return a / b if a is not None and b not in (None, 0) else None

    su = spec.get("user_tps") or {}
    bu = base.get("user_tps") or {}
    return {"user": ratio(su.get("mean"), bu.get("mean")),
            "system": ratio(spec.get("system_tps"), base.get("system_tps"))}


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated when maximising both coordinates, sorted by x."""
    idx = [i for i, (x, y) in enumerate(points) if x is not None and y is not None]
    front = []
    for i in idx:
        xi, yi = points[i]
        dominated = any((points[j][0] >= xi and points[j][1] >= yi) and
                        (points[j][0] > xi or points[j][1] > yi) for j in idx if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def break_even(batch_speedups: Mapping[int, float | None]) -> int | None:
    """Break-even batch size: the smallest batch size at which the speedup is below 1
    (speculation stops paying); None if it never falls below 1 in the sweep."""
    for b in sorted(b for b, s in batch_speedups.items() if s is not None):
        if batch_speedups[b] < 1.0:
            return b
    return None
