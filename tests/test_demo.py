"""`draftwise demo` on a tiny zoo built in a temp dir (the real zoo is covered by test_zoo)."""
import json

from draftwise.cli import main
from draftwise.zoo.demo import available_drafters, load_prompts
from tiny_models import make_tokenizer, save_model


def test_demo_runs_and_reports(tmp_path, capsys):
    tok = make_tokenizer(300)
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    save_model(zoo, "target", len(tok), tok, max_positions=256)
    save_model(zoo, "draft", len(tok), tok, seed=3, max_positions=256)
    out = tmp_path / "demo.json"
    rc = main(["demo", "--zoo", str(zoo), "--max-new-tokens", "8", "--out", str(out), "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "accept len" in printed and "speedup" in printed
    result = json.loads(out.read_text())
    kinds = {p["kind"] for p in load_prompts()}
    labels = [label for label, _ in available_drafters(zoo)]
    assert labels[:4] == ["plain", "draft-model", "ngram", "suffix"]
    assert {(r["drafter"], r["kind"]) for r in result["rows"]} == {(d, k) for d in labels for k in kinds}
    for r in result["rows"]:
        assert r["mean_accept_length"] >= 1.0 and r["tokens_per_s"] > 0
        if r["drafter"] != "plain":
            assert r["greedy_match"] is True  # fp32: speculative output equals plain output


def test_bundled_prompts_cover_kinds():
    kinds = {p["kind"] for p in load_prompts()}
    assert {"code", "prose", "dialogue", "questions"} <= kinds


def test_demo_tiny_standin(tmp_path, capsys):
    out = tmp_path / "demo.json"
    rc = main(["demo", "--tiny", "--max-new-tokens", "6", "--out", str(out), "--no-progress",
               "--drafter", "ngram"])
    assert rc == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["drafter"] for r in rows} == {"plain", "ngram"}
    assert all(r["greedy_match"] for r in rows if r["drafter"] != "plain")
