"""Per-position conditional acceptance α_k and the expected tokens per step it implies.

α_k = P(draft position k accepted | positions < k accepted), k = 1, 2, …; with acceptance lengths
L (tokens emitted per step, bonus included) it is P(L ≥ k + 1 | L ≥ k).
E[τ](D) = 1 + Σ_{k≤D} Π_{i≤k} α_i; drafting token D + 1 gains exactly a_{D+1} = Π_{i≤D+1} α_i.

Sources:
- a constant α (`Acceptance.constant(0.8)`),
- a plain JSON `{"drafter": {"conditional": [α_1, α_2, …]}, …}` (optionally
  `"categories": {"code": [α_1, …], …}` per drafter, and `"by_draft_length": {"D": {"conditional":
  […], "proposal_rate": r}}`, what `Acceptance.to_dict` writes),
- a benchmark run: a directory holding `specbench_results.json` (or that file) with specdec_bench's
  keys: `Conditional_Acceptance_Rate` {k: P(L ≥ k | L ≥ k − 1)} where k = 1 is 1.0 and key k is draft
  position k − 1, optionally per category, and `Category_AL` {category: mean acceptance length}.
  Results may be keyed by drafter at any depth; each `Conditional_Acceptance_Rate` found is used
  with the nearest enclosing key that names a drafter (or "default"). A sweep over D (keys "D=<d>",
  as `draftwise bench` nests them) gives each D its own α_k, measured on the steps that D took
  (`Acceptance.by_draft_length`; `planner.trace` derives the same from one greedy run).

Beyond the last measured position α is extrapolated as the mean of the last two measured values
(conditional acceptance typically levels off), unless `extrapolate="zero"`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .model import DRAFTER_KINDS


@dataclass
class Acceptance:
    conditional: list[float]                     # α_1, α_2, … (draft positions 1 …)
    name: str = "constant"
    categories: dict[str, list[float]] = field(default_factory=dict)
    constant_alpha: Optional[float] = None
    extrapolate: str = "tail"                    # "tail" | "zero"
    source: str = ""
    # share of a row's steps with a non-empty proposal (prompt lookup without a match proposes
    # nothing; those steps count as rejections in `conditional` and cost a plain step)
    proposal_rate: float = 1.0
    # α_1, α_2, … of each request on its own, where a benchmark run gave them: what a static batch
    # needs, whose pace is its slowest row's (`expected_tokens_static`)
    per_request: list[list[float]] = field(default_factory=list)
    # the same measured at each draft length D (`planner.trace`): where a step starts depends on
    # D, so one D's α_k describe another D's steps only where acceptance has no memory
    by_draft_length: dict[int, "Acceptance"] = field(default_factory=dict)

    def at(self, D: int) -> "Acceptance":
        """The acceptance of steps drafting D tokens: measured at D where `by_draft_length` has
        it, else this one."""
        return self.by_draft_length.get(int(D), self)

    @staticmethod
    def from_records(records: list[dict], D: int, max_new_tokens: int, name: str = "default",
                     shrink: bool = True, extrapolate: str = "zero") -> "Acceptance":
        """From benchmark records (`{"outputs": [{"step_lengths": [...], "drafted": [...]}, …]}`,
        one per request) of a run at draft length D: pooled α_k, the proposal rate and each
        request's α_k (`per_request_conditional`)."""
        return Acceptance(conditional_from_records(records, D, max_new_tokens), name=name, extrapolate=extrapolate,
                          proposal_rate=proposal_rate_from_records(records, D, max_new_tokens),
                          per_request=per_request_conditional(records, D, max_new_tokens, shrink=shrink),
                          source=f"{len(records)} requests at D = {D}")

    @staticmethod
    def constant(alpha: float, name: str = "constant") -> "Acceptance":
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        return Acceptance([alpha], name=name, constant_alpha=float(alpha), source=f"constant α = {alpha}")

    def alpha(self, k: int) -> float:
        """α_k for draft position k ≥ 1."""
        if self.constant_alpha is not None:
            return self.constant_alpha
        if k <= len(self.conditional):
            return self.conditional[k - 1]
        if self.extrapolate == "zero" or not self.conditional:
            return 0.0
        tail = self.conditional[-2:]
        return sum(tail) / len(tail)

    def survival(self, k: int) -> float:
        """a_k = Π_{i≤k} α_i: probability draft position k is accepted."""
        p = 1.0
        for i in range(1, k + 1):
            p *= self.alpha(i)
        return p

    def expected_tokens(self, D: int) -> float:
        """E[τ](D) = 1 + Σ_{k≤D} Π_{i≤k} α_i (bonus token included)."""
        if self.constant_alpha is not None:
            return leviathan_expected_tokens(self.constant_alpha, D)
        total, p = 1.0, 1.0
        for k in range(1, D + 1):
            p *= self.alpha(k)
            total += p
        return total

    def expected_tokens_static(self, D: int, batch_size: int) -> float:
        """Tokens per step and row in a static batch (Hugging Face `generate`, draftwise's engine)
        with every step priced alike: the batch runs until its slowest row is done, so E[τ] is
        scaled by 1 / Σ `static_shares`. A continuous-batching server (vLLM, SGLang) refills
        finished rows and banks E[τ]. Without per-request data, E[τ]."""
        return self.expected_tokens(D) / sum(self.static_shares(D, batch_size))

    def static_shares(self, D: int, batch_size: int) -> list[float]:
        """[w_1 … w_B]: the steps a static batch of B rows runs with B, B − 1, …, 1 rows left,
        in units of one row's steps on its own (w_1 = 1 at batch 1; Σ w ≥ 1 as the slowest row
        sets the pace). Rows are B draws from the requests, with N tokens a row taking N/τ_r
        steps; w_k = (E[k-th fewest steps] − E[(k − 1)-th]) / E[steps of one row]. The ratios,
        not the per-request τ themselves: each request's τ comes from a few dozen steps, and the
        harmonic mean of such noisy estimates sits below the pooled one (taken whole, the
        validation under-predicted prompt lookup at batch 1 by ~10 %). Priced by their rows, the
        steps after the first rows finish cost less than the full batch's (`predict`)."""
        B = max(int(batch_size), 1)
        if not self.per_request:
            return [1.0] + [0.0] * (B - 1)
        inv = sorted(1.0 / Acceptance(c, extrapolate=self.extrapolate).expected_tokens(D) for c in self.per_request)
        n, mean = len(inv), sum(inv) / len(inv)

        def at_most(k: int, F: float) -> float:     # P(k-th smallest of B draws ≤ x) where P(draw ≤ x) = F
            return sum(math.comb(B, j) * F ** j * (1.0 - F) ** (B - j) for j in range(k, B + 1))
        order = [sum(x * (at_most(k, i / n) - at_most(k, (i - 1) / n)) for i, x in enumerate(inv, 1))
                 for k in range(1, B + 1)]
        return [(order[k] - (order[k - 1] if k else 0.0)) / mean for k in range(B)]

    def verify_share(self, batch_size: int) -> float:
        return verify_share(self.proposal_rate, batch_size)

    def for_category(self, category: Optional[str]) -> "Acceptance":
        if not category:
            return self
        if category not in self.categories:
            raise ValueError(f"no category {category!r} for {self.name}; have {sorted(self.categories)}")
        # per-D measurements are of the whole run, not of one category: left out
        return Acceptance(list(self.categories[category]), name=self.name, extrapolate=self.extrapolate,
                          source=f"{self.source} [{category}]", proposal_rate=self.proposal_rate)

    def to_dict(self) -> dict:
        out = {"name": self.name, "conditional": self.conditional, "constant_alpha": self.constant_alpha,
               "categories": self.categories, "source": self.source, "proposal_rate": self.proposal_rate}
        if self.by_draft_length:     # what `load_acceptance` reads back
            out["by_draft_length"] = {str(D): {"conditional": a.conditional, "proposal_rate": a.proposal_rate}
                                      for D, a in sorted(self.by_draft_length.items())}
        return out


def verify_share(proposal_rate: float, batch_size: int) -> float:
    """Probability that a step of `batch_size` rows verifies a drafted block at all, each row
    proposing with probability `proposal_rate`: the engine pads the block to its widest row, so
    one row with a proposal makes every row pay for it."""
    return 1.0 - (1.0 - min(max(proposal_rate, 0.0), 1.0)) ** batch_size


def full_steps(records: list[dict], D: int, max_new_tokens: int) -> list[int]:
    """Step lengths L of the steps run with the full D available (the last steps of a request,
    capped by max_new_tokens, are left out)."""
    out = []
    for r in records:
        for o in r["outputs"]:
            produced = 0
            for L in o["step_lengths"]:
                if max_new_tokens - produced - 1 >= D:
                    out.append(L)
                produced += L
    return out


def conditional_from_records(records: list[dict], D: int, max_new_tokens: int) -> list[float]:
    """α_k = P(draft k proposed and accepted | drafts < k accepted), over the steps run with the
    full D available. A drafter that proposes fewer than D tokens (an n-gram without a long match)
    counts as rejected beyond its proposal, so E[τ(D)] = 1 + Σ_k Π_{j≤k} α_j is what it delivers."""
    from ..bench.metrics import rates_from_histogram

    cond, _ = rates_from_histogram(Counter(full_steps(records, D, max_new_tokens)))  # P(L ≥ k+1 | L ≥ k)
    return [cond.get(k + 1, 0.0) for k in range(1, D + 1)]


def proposal_rate_from_records(records: list[dict], D: int, max_new_tokens: int) -> float:
    """Share of a row's steps (with the full D available) in which the drafter proposed anything."""
    n = proposed = 0
    for r in records:
        for o in r["outputs"]:
            produced = 0
            for L, k in zip(o["step_lengths"], o["drafted"]):
                if max_new_tokens - produced - 1 >= D:
                    n += 1
                    proposed += k > 0
                produced += L
    return proposed / n if n else 1.0


def per_request_conditional(records: list[dict], D: int, max_new_tokens: int, shrink: bool = True) -> list[list[float]]:
    """Each request's α_k, for a static batch's spread of finishing times. A request's own
    estimate rests on a few dozen steps, and the order statistics of noisy estimates put a
    batch's rows further apart than they are; with `shrink`, each is pulled toward the pooled α_k
    by the share of its mean step length's variance that is noise (empirical Bayes:
    w = σ_b² / (σ_b² + s_r²/n_r), σ_b² the spread between requests beyond their noise)."""
    pooled = conditional_from_records(records, D, max_new_tokens)
    own = [conditional_from_records([r], D, max_new_tokens) for r in records]
    if not shrink or len(records) < 2:
        return own
    steps = [full_steps([r], D, max_new_tokens) for r in records]
    noise = [statistics.variance(s) / len(s) if len(s) > 1 else float("inf") for s in steps]
    means = [statistics.fmean(s) if s else 0.0 for s in steps]
    finite = [v for v in noise if v != float("inf")]
    between = max(0.0, statistics.variance(means) - (statistics.fmean(finite) if finite else 0.0))
    out = []
    for c, v in zip(own, noise):
        w = between / (between + v) if between > 0 and v != float("inf") else 0.0
        out.append([w * a + (1 - w) * p for a, p in zip(c, pooled)])
    return out


def leviathan_expected_tokens(alpha: float, D: int) -> float:
    """(1 − α^{D+1}) / (1 − α); D + 1 when α = 1."""
    if alpha >= 1.0:
        return float(D + 1)
    return (1.0 - alpha ** (D + 1)) / (1.0 - alpha)


# --------------------------------------------------------------------------------------------
# loading


def _cond_from_specbench(v: Any) -> list[float]:
    """specdec_bench's {k: P(L ≥ k | L ≥ k−1)} (k = 1 is 1.0, key k = draft position k−1) →
    [α_1, α_2, …]. A list is taken as already [α_1, …] unless its first entry is exactly 1.0 and
    more follow (then it is the specdec_bench layout)."""
    if isinstance(v, dict):
        items = sorted((int(k), float(x)) for k, x in v.items() if x is not None)
        return [x for k, x in items if k >= 2]
    vals = [float(x) for x in v]
    if len(vals) > 1 and vals[0] == 1.0:
        return vals[1:]
    return vals


def _match_al(cond: list[float], al: float) -> list[float]:
    """Scale α by one factor so E[τ](len(cond)) equals a measured mean acceptance length."""
    D = len(cond)
    acc = Acceptance(cond, name="x", extrapolate="zero")
    if D == 0 or al <= 1.0:
        return [0.0] * D
    if al >= D + 1:
        return [1.0] * D
    lo, hi = 0.0, max(1.0 / max(min(cond), 1e-6), 1.0) if cond else 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        e = Acceptance([min(1.0, mid * a) for a in cond], extrapolate="zero").expected_tokens(D)
        lo, hi = (mid, hi) if e < al else (lo, mid)
    s = (lo + hi) / 2
    return [min(1.0, s * a) for a in cond]


_DRAFT_KEY = re.compile(r"^D=(\d+)$")     # a bench report's per-draft-length key
# a bench run's plain baseline (drafter "none", D = 0) has a Conditional_Acceptance_Rate too (k = 1
# only): read as a drafter, it was named after its batch-size key and `draftwise plan` stopped
# with "cannot tell which drafter 'bs=1' is"
_PLAIN = {"none", "plain", "baseline"}
_ADAPTIVE = "+adaptive"    # `draftwise bench --adaptive`'s label suffix


def _drafter_name(path: list[str]) -> str:
    for key in reversed(path):
        k = key.lower().replace("-", "_")
        for kind in DRAFTER_KINDS:
            if kind in k:
                return key
        if k in ("eagle", "pld", "nextn", "draft"):
            return key
    # the nearest key that is not a metrics-section name
    skip = {"results", "metrics", "overall", "summary", "all", "specbench", "per_drafter"}
    for key in reversed(path):
        if key.lower() not in skip and not key.lower().startswith(("category", "conditional")):
            return key
    return "default"


def load_acceptance(source: Any, *, category: Optional[str] = None,
                    dataset: Optional[str] = None) -> dict[str, Acceptance]:
    """{drafter name: Acceptance} from a bench run directory, a specbench_results.json or a plain
    JSON (see module docstring), or a dict of the same. `dataset`: only that top-level key of a
    bench run ({dataset: {drafter: …}}); without it, each drafter's first dataset."""
    if isinstance(source, dict):
        data, src = source, "dict"
    else:
        p = Path(str(source))
        if p.is_dir():
            cands = [p / "specbench_results.json"] + sorted(p.glob("**/specbench_results.json"))
            cands = [c for c in cands if c.is_file()]
            if not cands:
                raise FileNotFoundError(f"no specbench_results.json under {p}")
            if dataset is not None:
                have = [c for c in cands if dataset in json.loads(c.read_text())]
                if not have:
                    raise ValueError(f"no dataset {dataset!r} under {p}; it has {sorted(_datasets_in(cands))}")
                cands = have
            out: dict[str, Acceptance] = {}
            for c in cands:
                for k, v in load_acceptance(c, category=category, dataset=dataset).items():
                    name = k if k != "default" else (c.parent.name if c.parent != p else k)
                    out.setdefault(name, v)
            return out
        if not p.is_file():
            raise FileNotFoundError(f"no acceptance file {p}")
        data, src = json.loads(p.read_text()), str(p)
    if dataset is not None:
        if not isinstance(data, dict) or not isinstance(data.get(dataset), dict):
            raise ValueError(f"no dataset {dataset!r} in {src}; its top-level keys are {sorted(data)}")
        data, src = {dataset: data[dataset]}, f"{src} [{dataset}]"

    found: dict[str, Acceptance] = {}
    per_d: dict[str, dict[int, Acceptance]] = {}
    per_d_from: dict[str, tuple] = {}

    def walk(node: Any, path: list[str]) -> None:
        if not isinstance(node, dict):
            return
        if isinstance(node.get("conditional"), (list, dict)):       # plain format
            name = path[-1] if path else "default"
            cats = {c: _cond_from_specbench(v) if isinstance(v, dict) else [float(x) for x in v]
                    for c, v in (node.get("categories") or {}).items()}
            cond = node["conditional"]
            cond = _cond_from_specbench(cond) if isinstance(cond, dict) else [float(x) for x in cond]
            own = {int(D): Acceptance([float(x) for x in v["conditional"]], name=name, source=src,
                                      extrapolate="zero", proposal_rate=float(v.get("proposal_rate", 1.0)))
                   for D, v in (node.get("by_draft_length") or {}).items()}
            found[name] = Acceptance(cond, name=name, categories=cats, source=src,
                                     proposal_rate=float(node.get("proposal_rate", 1.0)), by_draft_length=own)
        plain = any(k.lower() in _PLAIN or k == "D=0" for k in path)
        if "Conditional_Acceptance_Rate" in node and not plain:     # specdec_bench format
            name = _drafter_name(path)
            cond = _cond_from_specbench(node["Conditional_Acceptance_Rate"])
            cats: dict[str, list[float]] = {}
            for key in ("Category_Conditional_Acceptance_Rate", "Category_Conditional_AR"):
                for c, v in (node.get(key) or {}).items():
                    cats[c] = _cond_from_specbench(v)
            for c, al in (node.get("Category_AL") or {}).items():
                if c not in cats and isinstance(al, (int, float)) and cond:
                    cats[c] = _match_al(cond, float(al))
            found.setdefault(name, Acceptance(cond, name=name, categories=cats, source=src))
            # a bench sweep over D ({dataset: {drafter: {"D=d": {"bs=b": …}}}}): each D's own
            # α_k (the steps that D took), from the first dataset and batch size of this drafter
            at = next((i for i, k in enumerate(path) if _DRAFT_KEY.match(k)), None)
            if at is not None:
                D = int(_DRAFT_KEY.match(path[at]).group(1))
                where = per_d_from.setdefault(name, tuple(path[:at]))
                if D > 0 and where == tuple(path[:at]) and D not in per_d.setdefault(name, {}):
                    per_d[name][D] = Acceptance(cond, name=name, categories=cats, source=f"{src} [{'/'.join(path)}]")
        for k, v in node.items():
            if isinstance(v, dict) and k not in ("conditional", "categories", "by_draft_length", "Conditional_Acceptance_Rate",
                                                 "Category_AL", "Category_Conditional_Acceptance_Rate"):
                walk(v, path + [str(k)])

    walk(data, [])
    for name, runs in per_d.items():
        if runs:     # priced at each D by that D's run; beyond the largest, by the largest's α_k
            found[name] = dataclasses.replace(runs[max(runs)], by_draft_length=runs)
    for name in [n for n in found if n.endswith(_ADAPTIVE) and n[: -len(_ADAPTIVE)] in found]:
        del found[name]     # run-time D: its steps mix every D; the fixed-D runs describe each D
    if not found:
        raise ValueError(f"no conditional acceptance found in {src} (expected specdec_bench's "
                         f"Conditional_Acceptance_Rate or {{drafter: {{conditional: [...]}}}})")
    if category:  # drafters without that category are left out
        have = {k: v.for_category(category) for k, v in found.items() if category in v.categories}
        if not have:
            cats = sorted({c for v in found.values() for c in v.categories})
            raise ValueError(f"no category {category!r} in {src}; categories: {cats}")
        found = have
    return found


def _datasets_in(files) -> set[str]:
    return {k for f in files for k, v in json.loads(Path(f).read_text()).items() if isinstance(v, dict)}


def run_contexts(run_dir: Any) -> dict[str, float]:
    """{dataset: mean context length while decoding, in tokens (prompt plus half the output)} of a
    `draftwise bench` run, in the run's order: which context each dataset's acceptance describes.
    Empty for anything that is not a bench run directory."""
    from ..bench.runner import CONFIG_FILE, read_results

    run = Path(str(run_dir))
    if not (run.is_dir() and (run / CONFIG_FILE).is_file()):
        return {}
    sums: dict[str, list[float]] = {}
    for r in read_results(run):
        for o in r["outputs"]:
            s = sums.setdefault(r["dataset"], [0.0, 0])
            s[0] += o["prompt_tokens"] + o["num_tokens"] / 2
            s[1] += 1
    order = json.loads((run / CONFIG_FILE).read_text()).get("sweep", {}).get("datasets", [])
    names = [d for d in order if d in sums] + sorted(set(sums) - set(order))
    return {d: sums[d][0] / sums[d][1] for d in names if sums[d][1]}
