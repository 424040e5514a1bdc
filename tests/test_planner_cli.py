"""`draftwise plan` / `draftwise profile` through the real command-line entry point."""
import json

import pytest

from draftwise.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr().out
    return rc, out


def test_plan_leviathan_json(capsys):
    rc, out = run(capsys, "plan", "--alpha", "0.8", "--cost-ratio", "0.05", "--json")
    assert rc == 0
    r = json.loads(out)
    assert r["best_num_draft_tokens"] == 8
    assert r["expected_tokens_per_step"] == pytest.approx((1 - 0.8 ** 9) / 0.2)
    assert r["speedup"] == pytest.approx((1 - 0.8 ** 9) / (0.2 * 1.4))
    rc, out = run(capsys, "plan", "--alpha", "1", "--cost-ratio", "0.5", "--json")
    r = json.loads(out)
    assert r["best_num_draft_tokens"] == 16 and r["expected_tokens_ceiling"] is None   # ∞ → null


def test_plan_leviathan_text(capsys):
    rc, out = run(capsys, "plan", "--alpha", "0.8", "--cost-ratio", "0.05")
    assert rc == 0 and "best D = 8" in out and "stop at 8" in out


def test_plan_schedule_json(capsys, tmp_path):
    rc, out = run(capsys, "plan", "--target", "llama-3.1-8b", "--hardware", "h100-sxm", "--alpha", "0.7",
                  "--batch-sizes", "1,8,512", "--context-lengths", "1024", "--json")
    assert rc == 0
    r = json.loads(out)
    assert "break_even_batch_size" in r
    assert [c["batch_size"] for c in r["schedule"]] == [1, 8, 512]
    for c in r["schedule"]:
        assert {"drafter", "num_draft_tokens", "speedup", "reasons", "context_length"} <= set(c)
        assert all(isinstance(x["text"], str) and x["text"] for x in c["reasons"])
    assert r["engine_configs"]["vllm"]["speculative_config"]["num_speculative_tokens"] >= 1

    # a config.json path, a profile JSON and a bench run directory
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096, "torch_dtype": "float32"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    prof = {"name": "cpu-test", "flops": 2e11, "bandwidth": 4e10, "memory": 24e9, "source": "measured",
            "dtype": "float32", "attention_tile": 1, "gemm_curve": [[1, 2e9], [64, 1e11], [512, 2e11]]}
    (tmp_path / "prof.json").write_text(json.dumps(prof))
    run_dir = tmp_path / "bench"
    run_dir.mkdir()
    (run_dir / "specbench_results.json").write_text(json.dumps(
        {"eagle3": {"Conditional_Acceptance_Rate": {"1": 1.0, "2": 0.7, "3": 0.6}},
         "dflash": {"Conditional_Acceptance_Rate": {"1": 1.0, "2": 0.6, "3": 0.5, "4": 0.4}}}))
    out_file = tmp_path / "plan.json"
    rc, out = run(capsys, "plan", "--target", str(tmp_path), "--hardware", str(tmp_path / "prof.json"),
                  "--acceptance", str(run_dir), "--batch-sizes", "1,4", "--context-lengths", "128,1024",
                  "--json", "--output", str(out_file))
    r = json.loads(out)
    assert json.loads(out_file.read_text()) == r
    assert set(r["drafters"]) == {"eagle3", "dflash"}
    assert len(r["schedule"]) == 4 and set(r["break_even_by_context"]) == {"128", "1024"}


def test_plan_schedule_text(capsys):
    rc, out = run(capsys, "plan", "--target", "qwen3-next-80b-a3b", "--hardware", "b200", "--alpha", "0.75",
                  "--drafter", "mtp,dflash", "--batch-sizes", "1,64", "--context-lengths", "4096")
    assert rc == 0
    assert "break-even batch size" in out and "drafter" in out and "qwen3-next-80b-a3b" in out


def test_plan_errors(capsys):
    assert main(["plan", "--target", "llama-3.1-8b", "--json"]) == 2          # no acceptance
    assert main(["plan", "--target", "nope", "--alpha", "0.5"]) == 2           # unknown model


def test_profile_small(capsys, tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "torch_dtype": "float32"}
    (tmp_path / "tiny.json").write_text(json.dumps(cfg))
    out = tmp_path / "p.json"
    dcfg = dict(cfg, num_hidden_layers=1)
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps(dcfg))
    rc = main(["profile", "--target", str(tmp_path / "tiny.json"), "-o", str(out), "--rows", "1,8",
               "--batch-sizes", "1,2", "--draft-tokens", "0,3", "--context-lengths", "16", "--repeats", "1",
               "--device", "cpu", "--draft-model", str(tmp_path / "draft" / "config.json")])
    assert rc == 0
    p = json.loads(out.read_text())
    assert p["source"] == "measured" and p["flops"] > 0 and p["bandwidth"] > 0
    assert [m for m, _ in p["gemm_curve"]] == [1, 8]
    assert {(s["B"], s["D"], s["L"]) for s in p["step_times"]} == {(1, 0, 16), (1, 3, 16), (2, 0, 16), (2, 3, 16)}
    assert p["sps_curves"] and p["target_config"]["hidden_size"] == 64
    # each pass's own times, six passes by default, for telling two prices of width apart
    assert all(len(s["pass_seconds"]) == 6 for s in p["step_times"]) and isinstance(p["price_levels"], list)
    assert {(s["B"], s["L"]) for s in p["draft_step_times"]} == {(1, 16), (2, 16)}
    assert p["draft_config"]["num_hidden_layers"] == 1 and all(s["seconds"] > 0 for s in p["draft_step_times"])
    # reused by plan, calibrated on its own target
    capsys.readouterr()
    rc = main(["plan", "--target", str(tmp_path / "tiny.json"), "--hardware", str(out), "--alpha", "0.7",
               "--batch-sizes", "1,2", "--context-lengths", "16", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert r["calibration"]["points"] == 4
    # the run-time scheduler reads the measured steps/s curve
    from draftwise.planner import AdaptiveDraftLength
    a = AdaptiveDraftLength.from_profile(out, batch_size=2, context_length=16)
    assert a.sps(2) > 0 and a.sps.n == [2, 8]
