"""Sequential temperature scaling of DSpark's confidences: ECE, recovery of known temperatures on
synthetic acceptance data, and the end-to-end path (engine runs → temperatures in the checkpoint →
applied at inference)."""
import json

import torch

import draftwise
from block_drafter_common import TOKENS, target, trained_model
from draftwise.drafters.dflash import save
from draftwise.train.calibrate import calibrate_checkpoint, ece, fit_temperatures, survival_ece


def test_ece():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(20000, generator=g, dtype=torch.float64)
    y = (torch.rand(20000, generator=g, dtype=torch.float64) < p).double()
    assert ece(p, y) < 0.02
    assert abs(ece(torch.full((10,), 0.9, dtype=torch.float64), torch.zeros(10, dtype=torch.float64)) - 0.9) < 1e-9
    assert ece((p * 0.5), y) > 0.2


def synthetic_records(true_temps, n=6000, seed=0):
    """Steps whose drafts are accepted left to right with P = σ(l_k / T*_k), stopping at a rejection."""
    g = torch.Generator().manual_seed(seed)
    D = len(true_temps)
    recs = []
    for _ in range(n):
        logits = (torch.randn(D, generator=g, dtype=torch.float64) * 3 + 1).tolist()
        a = 0
        for k in range(D):
            if float(torch.rand(1, generator=g, dtype=torch.float64)) < float(torch.sigmoid(torch.tensor(logits[k] / true_temps[k]))):
                a += 1
            else:
                break
        recs.append((logits, D, a))
    return recs


def test_sts_recovers_known_temperatures():
    true = [2.0, 0.5, 1.5, 3.0]
    fit = synthetic_records(true, seed=0)
    test = synthetic_records(true, seed=1)
    temps = fit_temperatures(fit, len(true))
    # the last position is seen rarely and its survival is small: ECE hardly constrains it
    for t, want in zip(temps[:3], true[:3]):
        assert want / 1.35 < t < want * 1.35, (temps, true)
    before = survival_ece(test, [1.0] * len(true))
    after = survival_ece(test, temps)
    assert after["pooled"] < 0.02 < before["pooled"]
    assert all(a < b + 0.005 for a, b in zip(after["per_position"], before["per_position"]))


def test_calibrate_checkpoint_end_to_end(tmp_path):
    tgt, _ = target("llama")
    model, _ = trained_model("dspark", "llama")
    save(model, tmp_path / "ck")
    prompts = [TOKENS[i * 37:i * 37 + 6].tolist() for i in range(6)]
    rep = calibrate_checkpoint(tmp_path / "ck", tgt, prompts, max_new_tokens=16, temperature=1.0, holdout=0.34)
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    temps = cfg["confidence_temperatures"]
    assert len(temps) == model.block_size - 1 and all(t > 0 for t in temps)
    fit = cfg["calibration"]["fit"]
    # position 1 has no prefix: its fitted temperature cannot do worse than T = 1 (on the grid) there
    assert fit["ece_after"]["per_position"][0] <= fit["ece_before"]["per_position"][0] + 1e-12
    assert "heldout" in rep
    d = draftwise.build_drafter(f"dspark:{tmp_path / 'ck'}", tgt)
    torch.testing.assert_close(d.model.conf_temps, torch.tensor(temps, dtype=torch.float32))
    out = draftwise.generate(tgt, prompts[:2], drafter=d, num_draft_tokens=4, max_new_tokens=8, temperature=1.0,
                             seed=0)
    assert all(len(o.token_ids) == 8 for o in out)
