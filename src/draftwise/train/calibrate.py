"""Sequential Temperature Scaling (STS) of DSpark's confidence head.

The scheduler reads survival a_k = Π_{i≤k} c_i as the probability that drafts 1 … k are all accepted.
STS fits one temperature T_k per draft position on the confidence *logits*, left to right: with
T_1 … T_{k−1} fixed, T_k is the grid value minimising the expected calibration error (ECE) of
Π_{i≤k} σ(l_i / T_i) against the observed event "drafts 1 … k all accepted".

Observations come from the real engine (`draftwise.generate`) on held-out prompts: every
verification step records the drafter's raw confidence logits for the drafts it offered and how many
the target accepted. Prompts are split: the first part fits the temperatures, the rest measures ECE
before and after. The temperatures go into the checkpoint's config (`confidence_temperatures`) and
are applied by the drafter at inference.

CLI: python -m draftwise.train.calibrate --drafter DIR --target DIR --data TOKENS [--prompts 32 …]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from ..drafters.base import Drafter

DEFAULT_GRID = [math.exp(x) for x in torch.linspace(math.log(0.05), math.log(20.0), 121).tolist()]


class _Recorder(Drafter):
    """Wraps a DSpark drafter; records (confidence logits, drafts offered, drafts accepted) per row
    and step."""

    def __init__(self, inner):
        self.inner = inner
        self.name, self.hidden_layers, self.parallel = inner.name, inner.hidden_layers, inner.parallel
        self.records: list[tuple[list[float], int, int]] = []
        self._last = None

    def start(self, ctx):
        self.inner.start(ctx)

    def propose(self, ctx, max_tokens):
        p = self.inner.propose(ctx, max_tokens)
        self._last = (self.inner.last_conf_logits.detach().cpu(), p.num_tokens.detach().cpu())
        return p

    def accepted(self, num_accepted):
        logits, num = self._last
        for r, a in enumerate(num_accepted.tolist()):
            k = int(num[r])
            if k > 0:
                self.records.append((logits[r, :k].tolist(), k, int(a)))
        self.inner.accepted(num_accepted)

    def select_rows(self, rows):
        self.inner.select_rows(rows)

    def finish(self, sequences, prompt_lengths):
        self.inner.finish(sequences, prompt_lengths)


def collect(target, drafter, prompts, num_draft_tokens: int, max_new_tokens: int = 64, temperature: float = 1.0,
            seed: int = 0, batch_size: int = 16):
    """Run the engine; return a list of (logits [k], offered k, accepted a) per verification step."""
    import draftwise

    rec = _Recorder(drafter)
    for i in range(0, len(prompts), batch_size):
        draftwise.generate(target, prompts[i:i + batch_size], drafter=rec, num_draft_tokens=num_draft_tokens,
                           max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + i, ignore_eos=True)
    return rec.records


def ece(pred: torch.Tensor, label: torch.Tensor, bins: int = 10) -> float:
    """Expected calibration error with equal-width bins: Σ_b n_b/N · |mean(pred_b) − mean(label_b)|."""
    if pred.numel() == 0:
        return float("nan")
    idx = (pred * bins).long().clamp(0, bins - 1)
    n = torch.bincount(idx, minlength=bins).float()
    sp = torch.bincount(idx, weights=pred.double(), minlength=bins)
    sl = torch.bincount(idx, weights=label.double(), minlength=bins)
    return float((sp - sl).abs().sum() / pred.numel())


def _tensors(records, D: int):
    """Padded logits [S, D], offered [S], accepted [S]."""
    S = len(records)
    L = torch.zeros(S, D, dtype=torch.float64)
    k = torch.zeros(S, dtype=torch.long)
    a = torch.zeros(S, dtype=torch.long)
    for s, (lg, kk, aa) in enumerate(records):
        L[s, :kk] = torch.tensor(lg[:D], dtype=torch.float64)
        k[s], a[s] = min(kk, D), aa
    return L, k, a


def survival_ece(records, temps, bins: int = 10) -> dict:
    """Per-position ECE of Π_{i≤k} σ(l_i / T_i) vs 1[accepted ≥ k], and the ECE pooled over all
    (step, position) pairs."""
    D = len(temps)
    L, k, a = _tensors(records, D)
    T = torch.tensor(temps, dtype=torch.float64)
    surv = torch.sigmoid(L / T).cumprod(1)
    per, preds, labels = [], [], []
    for j in range(D):
        sel = k > j
        p, y = surv[sel, j], (a[sel] > j).double()
        per.append(ece(p, y, bins) if sel.any() else None)
        preds.append(p)
        labels.append(y)
    pooled = ece(torch.cat(preds), torch.cat(labels), bins) if records else float("nan")
    return {"per_position": per, "pooled": pooled, "observations": int(sum(int(x.numel()) for x in preds))}


def fit_temperatures(records, D: int, grid=None, bins: int = 10, min_obs: int = 50, tol: float = 0.002
                     ) -> list[float]:
    """Sequential temperature scaling: T_1, then T_2 given T_1, …. Among grid values within `tol` of the
    lowest ECE the one closest to T = 1 wins (ECE is noisy: no drift to extreme temperatures on a
    flat objective); positions with fewer than min_obs observations keep the previous temperature."""
    grid = grid or DEFAULT_GRID
    L, k, a = _tensors(records, D)
    temps: list[float] = []
    prefix = torch.ones(L.shape[0], dtype=torch.float64)
    for j in range(D):
        sel = k > j
        if int(sel.sum()) < min_obs:
            temps.append(temps[-1] if temps else 1.0)
        else:
            y = (a[sel] > j).double()
            scores = [(ece(prefix[sel] * torch.sigmoid(L[sel, j] / t), y, bins), t) for t in grid]
            lo = min(e for e, _ in scores)
            best = min((t for e, t in scores if e <= lo + tol), key=lambda t: abs(math.log(t)))
            temps.append(float(best))
        prefix = prefix * torch.sigmoid(L[:, j] / temps[-1])
    return temps


def calibrate_model(model, target, prompts, num_draft_tokens: int | None = None, max_new_tokens: int = 64,
                    temperature: float = 1.0, seed: int = 0, holdout: float = 0.3, bins: int = 10,
                    grid=None) -> dict:
    """Fit STS temperatures for a DSparkModel in place (model.set_temperatures) and report ECE before
    and after on the fitting prompts and on held-out prompts."""
    from ..drafters.dspark import DSparkDrafter

    D = num_draft_tokens or model.block_size - 1
    D = min(D, model.block_size - 1)
    n_fit = max(1, int(round(len(prompts) * (1 - holdout)))) if len(prompts) > 1 else 1
    fit_p, test_p = prompts[:n_fit], prompts[n_fit:]
    model.set_temperatures([1.0] * (model.block_size - 1))
    fit_r = collect(target, DSparkDrafter(model), fit_p, D, max_new_tokens, temperature, seed)
    test_r = collect(target, DSparkDrafter(model), test_p, D, max_new_tokens, temperature, seed + 10_000) \
        if test_p else []
    temps = fit_temperatures(fit_r, D, grid, bins)
    full = temps + [temps[-1]] * (model.block_size - 1 - D)
    model.set_temperatures(full)
    ones = [1.0] * D
    report = {
        "temperatures": full, "num_draft_tokens": D, "sampling_temperature": temperature, "bins": bins,
        "fit": {"steps": len(fit_r), "ece_before": survival_ece(fit_r, ones, bins),
                "ece_after": survival_ece(fit_r, temps, bins)},
    }
    if test_r:
        report["heldout"] = {"steps": len(test_r), "ece_before": survival_ece(test_r, ones, bins),
                             "ece_after": survival_ece(test_r, temps, bins)}
    return report


def calibrate_checkpoint(path, target, prompts, **kw) -> dict:
    """Load a dspark checkpoint, calibrate, and write the temperatures and the report into its config."""
    from ..drafters.dspark import DSparkModel
    from ..drafters.dflash import load

    model = load(path, "dspark", target, cls=DSparkModel)
    report = calibrate_model(model, target, prompts, **kw)
    p = Path(path) / "config.json"
    cfg = json.loads(p.read_text())
    cfg["confidence_temperatures"] = report["temperatures"]
    cfg["calibration"] = report
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tmp.replace(p)
    return report


def main(argv=None) -> int:
    import draftwise

    from .data import heldout_prompts, load_token_source

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", required=True, help="dspark checkpoint folder (updated in place)")
    ap.add_argument("--target", required=True)
    ap.add_argument("--data", required=True, help="held-out token .bin/.npy or text for the prompts")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--draft-tokens", type=int, default=None, help="D (default: block size − 1)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the engine runs")
    ap.add_argument("--holdout", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    target = draftwise.load_target(args.target)
    toks = load_token_source(args.data, target.tokenizer)
    prompts = heldout_prompts(toks, args.prompts, args.prompt_len, seed=args.seed + 777)
    rep = calibrate_checkpoint(args.drafter, target, prompts, num_draft_tokens=args.draft_tokens,
                               max_new_tokens=args.new_tokens, temperature=args.temperature, seed=args.seed,
                               holdout=args.holdout)
    print(json.dumps(rep, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
