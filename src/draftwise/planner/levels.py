"""Two prices of width: a host on which a step verifying drafts costs one price in some stretches
and another in others, while a plain step keeps its own.

On the 2-core CPU of BENCHMARKS.md (session 37's section) a step verifying 5 drafts at 1k tokens,
batch 1, cost ~1.35 plain steps in some stretches and ~1.85 in others, each stretch lasting
seconds to minutes (its two vCPUs seem to share one core at times). A profile's median then takes
whichever level most of its passes met, a run meets either, and the best D moves with it (D = 5
at the cheap level, 3 at the dear one). `draftwise profile` keeps each pass's own median
(`pass_seconds`); this module finds the (B, L) whose passes fall into two groups, builds the
profile as each level would have measured it, and picks the D that loses least at either.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Optional, Sequence

from .hardware import Hardware

# Two groups of passes are two levels where, at MIN_WIDTHS widths or more, every pass of the dear
# group priced the width at least GAP × what every pass of the cheap group did (in plain steps of
# its own pass), with MIN_PASSES passes or more a group. On the host above, at batch 1, the dear
# level was 1.3× the cheap one at widths 5–9 and the same at widths 2–4; a pass's own noise is
# ~5 %, and at batch 3–16 no split held at more than two widths.
GAP = 1.15
MIN_WIDTHS = 3
MIN_PASSES = 2
# A pass whose plain step is this far from the passes' median met something else (another process
# slowing the whole machine): left out of both groups. (In plain steps of its own pass every width
# of it looked cheap: the unit moved, not the price of width.)
DISTURBED = 1.25
LEVELS = ("cheap", "dear")


def _groups(step_times: Sequence[dict]) -> dict[tuple[int, int], dict[int, dict]]:
    out: dict[tuple[int, int], dict[int, dict]] = {}
    for m in step_times:
        out.setdefault((int(m["B"]), int(m["L"])), {})[int(m["D"])] = m
    return out


def _plain_key(points: dict[int, dict]) -> Optional[str]:
    """Which per-pass time of the D = 0 point each pass's prices are in units of: its run of plain
    steps where the profile timed one, else its one-token step."""
    base = points.get(0) or {}
    return next((k for k in ("pass_plain_run_seconds", "pass_seconds") if base.get(k)), None)


def _prices(points: dict[int, dict]) -> Optional[tuple[list[int], dict[int, list[float]]]]:
    """(usable passes, {D: [price per pass]}): each step in plain steps of its own pass, so that the
    whole machine slowing moves both alike and cancels. None without per-pass times."""
    key = _plain_key(points)
    if key is None:
        return None
    plain = points[0][key]
    if any(len(m.get("pass_seconds") or []) != len(plain) for m in points.values()):
        return None
    mid = statistics.median(plain)
    usable = [p for p, t in enumerate(plain) if 1 / DISTURBED <= t / mid <= DISTURBED]
    return usable, {D: [m["pass_seconds"][p] / plain[p] for p in range(len(plain))]
                    for D, m in sorted(points.items()) if D > 0}


def find_levels(step_times: Sequence[dict], gap: float = GAP) -> list[dict]:
    """[{"B", "L", "cheap_passes", "dear_passes", "disturbed_passes", "widths", "price": {"cheap",
    "dear"}}] for each (B, L) whose passes fall into a cheap and a dear group (see GAP): at the
    D of `widths` every dear pass priced the step at least `gap` × what every cheap pass did;
    `price[level]` is that level's median price at each of them, in plain steps. A steady drift, or
    noise, orders the passes differently at each width and is left to the median. Passes count
    from 0, in the order they ran."""
    out = []
    for (B, L), points in sorted(_groups(step_times).items()):
        got = _prices(points)
        if got is None:
            continue
        usable, r = got
        if len(usable) < 2 * MIN_PASSES:
            continue
        # a split that separates any width is a cut of the passes ordered by that width's price
        cuts = {frozenset(sorted(usable, key=r[D].__getitem__)[:k])
                for D in r for k in range(MIN_PASSES, len(usable) - MIN_PASSES + 1)}
        best = None
        for cheap in cuts:
            dear = [p for p in usable if p not in cheap]
            seps = {D: min(r[D][p] for p in dear) / max(r[D][p] for p in cheap) for D in r}
            split = [D for D, x in seps.items() if x >= gap]
            score = (len(split), sum(math.log(seps[D]) for D in split))
            if len(split) >= MIN_WIDTHS and (best is None or score > best[0]):
                best = (score, sorted(cheap), dear, split)
        if best is None:
            continue
        _, cheap, dear, split = best
        out.append({"B": B, "L": L, "cheap_passes": cheap, "dear_passes": dear,
                    "disturbed_passes": [p for p in range(len(r[split[0]])) if p not in usable], "widths": split,
                    "price": {lv: [statistics.median(r[D][p] for p in ps) for D in split]
                              for lv, ps in (("cheap", cheap), ("dear", dear))}})
    return out


def at_level(step_times: Sequence[dict], levels: Sequence[dict], level: str) -> list[dict]:
    """The step times as the profile would have measured them had every (B, L) of `levels` met
    `level` ("cheap" or "dear") in every pass: the plain step at its median over every pass, each
    wider step at that level's median price in plain steps; `pass_seconds` keeps that level's
    passes only."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    which = {(lv["B"], lv["L"]): lv[f"{level}_passes"] for lv in levels}
    groups = _groups(step_times)
    out = []
    for m in step_times:
        B, D, L = int(m["B"]), int(m["D"]), int(m["L"])
        ps = which.get((B, L))
        if ps is None:
            out.append(dict(m))
            continue
        key = _plain_key(groups[(B, L)])
        base = groups[(B, L)][0]
        plain = base[key]
        anchor = base["plain_run_seconds"] if key == "pass_plain_run_seconds" else base["seconds"]
        new = {**m, "pass_seconds": [m["pass_seconds"][p] for p in ps]}
        if not (D == 0 and key == "pass_seconds"):     # the unit itself stays as measured
            new["seconds"] = anchor * statistics.median(m["pass_seconds"][p] / plain[p] for p in ps)
        if "pass_plain_run_seconds" in m:
            new["pass_plain_run_seconds"] = [m["pass_plain_run_seconds"][p] for p in ps]
        out.append(new)
    return out


def level_hardware(hw: Hardware, levels: Optional[Sequence[dict]] = None) -> dict[str, Hardware]:
    """{"cheap": …, "dear": …}: the profile at each level, or {} where no (B, L) has two;
    `levels`, if given, as `find_levels` found them on `hw.step_times`."""
    if levels is None:
        levels = find_levels(hw.step_times) if hw.step_times else []
    if not levels:
        return {}
    return {lv: replace(hw, step_times=at_level(hw.step_times, levels, lv),
                        notes=f"{hw.notes}; every (B, L) with two prices of width at its {lv} one".lstrip("; "))
            for lv in LEVELS}


def least_regret(speedups: Sequence[Sequence[float]], picks: Sequence[int]) -> int:
    """The D whose worst loss against each level's own pick (`picks[i]` for `speedups[i]`, each a
    list over D = 0, 1, …) is least; the smaller D on ties. A run meets either level, so the D to
    run is the one that is never far from right, not the right one for the level the profile met
    most."""
    if len(set(picks)) == 1:
        return picks[0]
    n = min(len(s) for s in speedups)

    def regret(D: int) -> float:
        return max(1 - s[D] / s[p] for s, p in zip(speedups, picks))
    return min(range(n), key=lambda D: (round(regret(D), 12), D))


def _span(xs: Sequence[float], fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}–{format(hi, fmt)}"


def describe_levels(levels: Sequence[dict]) -> list[str]:
    """One line per (B, L) with two levels, for `draftwise profile`'s log and `plan`'s table."""
    def passes(ps):
        return f"pass{'es' if len(ps) > 1 else ''} {', '.join(str(p + 1) for p in ps)}"
    out = []
    for lv in levels:
        ws = lv["widths"]
        d = f"{ws[0]}–{ws[-1]}" if ws == list(range(ws[0], ws[-1] + 1)) and len(ws) > 1 else ", ".join(map(str, ws))
        line = (f"B={lv['B']} L={lv['L']}: verifying D = {d} drafts cost {_span(lv['price']['cheap'], '.2f')}× a "
                f"plain step in {passes(lv['cheap_passes'])} and {_span(lv['price']['dear'], '.2f')}× in "
                f"{passes(lv['dear_passes'])}")
        if lv.get("disturbed_passes"):
            line += f" ({passes(lv['disturbed_passes'])} left out: its plain steps were off by over {DISTURBED - 1:.0%})"
        out.append(line)
    return out
