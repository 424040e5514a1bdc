"""`draftwise bench` sweep: outputs and their schemas, resume after a kill, the real engine."""
import csv
import json

import pytest

from draftwise.bench._testing import FakeBackend
from draftwise.bench.runner import RESULTS_FILE, BenchConfig, read_results, run_bench

KEYS = ["Request_AL", "Category_AL", "Average_AL", "Acceptance_Length_Histogram",
        "Conditional_Acceptance_Rate", "Joint_Acceptance_Rate"]
STATS = {"min", "max", "mean", "std", "0.25", "0.5", "0.75"}


def _cfg(out, **kw):
    base = dict(target="fake", out=str(out), drafters=["ngram", "suffix"], draft_lengths=[2, 3],
                batch_sizes=[1, 2], datasets=["qualitative"], num_requests=6, max_new_tokens=12, progress=False)
    base.update(kw)
    return BenchConfig(**base)


PNGS = ("al_by_category-qualitative.png", "conditional_acceptance-qualitative.png",
        "speedup_vs_batch-qualitative.png", "pareto-qualitative.png")


def _check_outputs(out, n_requests=6, plots=True):
    for name in ("configuration.json", "specbench_results.json", "timing.json", "acceptance_length.csv",
                 "acceptance_rate.csv", "throughput.csv", "specbench_responses.jsonl", "report.md",
                 *(PNGS if plots else ())):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    res = json.loads((out / "specbench_results.json").read_text())
    assert set(res["qualitative"]) == {"none", "ngram", "suffix"}
    assert set(res["qualitative"]["none"]) == {"D=0"}
    assert set(res["qualitative"]["ngram"]) == {"D=2", "D=3"}
    for dr, by_d in res["qualitative"].items():
        for d, by_bs in by_d.items():
            assert set(by_bs) == {"bs=1", "bs=2"}
            for entry in by_bs.values():
                assert list(entry) == KEYS
                assert len(entry["Request_AL"]) == n_requests
                assert entry["Conditional_Acceptance_Rate"]["1"] == 1.0
                assert sum(entry["Acceptance_Length_Histogram"].values()) > 0
    assert res["qualitative"]["none"]["D=0"]["bs=1"]["Average_AL"] == 1.0
    timing = json.loads((out / "timing.json").read_text())
    t = timing["results"]["qualitative"]["ngram"]["D=2"]["bs=2"]
    for k in ("ttft", "e2e", "step_time", "user_tps"):
        assert set(t["timing"][k]) == STATS
    assert t["timing"]["system_tps"] > 0 and set(t["speedup"]) == {"user", "system"}
    assert t["lossless"]["share"] == 1.0 and t["lossless"]["compared"] == n_requests
    assert set(timing["break_even"]["qualitative"]["suffix"]["D=3"]) == {"system", "user", "batch_sizes"}
    rows = list(csv.reader((out / "acceptance_length.csv").open()))
    header = rows[0]
    assert header[0] == "Model" and header[-1] == "Overall"
    cats = header[1:-1]
    order = ["coding", "humanities", "math", "multilingual", "qa", "rag"]
    assert cats == order
    assert [r[0] for r in rows[1:]] == ["ngram D=2", "ngram D=3", "suffix D=2", "suffix D=3"]
    for r in rows[1:]:
        vals = [float(x) for x in r[1:-1] if x]
        assert all(len(x.split(".")[1]) == 2 for x in r[1:] if x)
        assert float(r[-1]) == pytest.approx(sum(vals) / len(vals), abs=0.006)
    resp = [json.loads(l) for l in (out / "specbench_responses.jsonl").read_text().splitlines()]
    assert len(resp) == 5 * 2 * n_requests
    assert {"question_id", "category", "turns", "choices"} <= set(resp[0])
    assert resp[0]["choices"][0]["index"] == 0 and isinstance(resp[0]["choices"][0]["turns"], list)
    md = (out / "report.md").read_text()
    assert "Break-even" in md and "Losslessness" in md


def test_sweep_outputs_and_multiturn(tmp_path):
    out = tmp_path / "run"
    be = FakeBackend()
    run_bench(_cfg(out), backend=be)
    _check_outputs(out)
    recs = read_results(out)
    assert len(recs) == 5 * 2 * 6  # (baseline + 2 drafters x 2 D) x 2 batch sizes x 6 requests
    conf = json.loads((out / "configuration.json").read_text())
    assert conf["settings"]["max_new_tokens"] == 12 and "torch" in conf["versions"]
    assert "target" in conf["models"]


def test_multiturn_history_reencoded(tmp_path):
    ds = tmp_path / "mt.jsonl"
    ds.write_text(json.dumps({"question_id": "m", "category": "writing", "turns": ["First?", "Second?"]}) + "\n")
    be = FakeBackend()
    run_bench(_cfg(tmp_path / "r", drafters=[], datasets=[str(ds)], batch_sizes=[1], num_requests=None,
                   warmup=False), backend=be)
    p1, p2 = (be.tokenizer.decode(p) for p in be.prompts_seen)
    assert p1 == "User: First?\nAssistant:"
    assert p2.startswith("User: First?\nAssistant: ") and p2.endswith("\nUser: Second?\nAssistant:")
    (rec,) = read_results(tmp_path / "r")
    assert len(rec["outputs"]) == 2 and rec["turns"] == ["First?", "Second?"]


def test_resume_after_kill(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated kill"):
        run_bench(_cfg(out), backend=FakeBackend(fail_after=17))
    lines_before = (out / RESULTS_FILE).read_text().splitlines()
    assert 0 < len(lines_before) < 60
    # a kill while writing leaves a torn last line: it is dropped, not fatal
    with (out / RESULTS_FILE).open("a") as f:
        f.write('{"key": "qualitative|none|D=0|bs=1", "question_id": "to')
    be = FakeBackend()
    run_bench(_cfg(out, plots=False), backend=be)
    lines_after = (out / RESULTS_FILE).read_text().splitlines()
    assert lines_after[:len(lines_before)] == lines_before  # nothing lost or rewritten
    recs = [json.loads(l) for l in lines_after]
    keys = [(r["key"], r["question_id"]) for r in recs]
    assert len(keys) == len(set(keys)) == 60  # nothing redone twice, nothing missing
    _check_outputs(out, plots=False)
    # a third run has nothing left to do
    be3 = FakeBackend()
    run_bench(_cfg(out, plots=False), backend=be3)
    assert be3.calls == 0
    # different settings are refused
    with pytest.raises(ValueError, match="different settings"):
        run_bench(_cfg(out, max_new_tokens=13), backend=FakeBackend())


def test_interleaved_sweep_same_results_side_by_side(tmp_path):
    """--interleave runs each batch of requests through every configuration before the next batch
    (per dataset and batch size): the same records as the sequential sweep, in another order, and
    a kill resumes without redoing anything."""
    seq, inter = tmp_path / "seq", tmp_path / "inter"
    run_bench(_cfg(seq, plots=False), backend=FakeBackend())
    with pytest.raises(RuntimeError, match="simulated kill"):
        run_bench(_cfg(inter, plots=False, interleave=True), backend=FakeBackend(fail_after=23))
    run_bench(_cfg(inter, plots=False, interleave=True), backend=FakeBackend())
    a, b = read_results(seq), read_results(inter)
    key = lambda r: (r["key"], r["question_id"])   # noqa: E731
    assert sorted(map(key, a)) == sorted(map(key, b)) and len(b) == len(set(map(key, b))) == 60
    assert {key(r): r["outputs"][0]["token_ids"] for r in a} == {key(r): r["outputs"][0]["token_ids"] for r in b}
    # bs=1: the first request went through all 5 configurations before the second one started
    first = [r for r in b if r["batch_size"] == 1][:5]
    assert len({r["key"] for r in first}) == 5 and len({r["question_id"] for r in first}) == 1
    assert [r["key"] for r in a[:2]] == [a[0]["key"]] * 2                      # sequential: by configuration


def test_interleaved_batches_give_each_configuration_other_neighbours(tmp_path):
    """In a group of two batches every configuration runs after a different one in each batch (a
    rotation by one place left each behind the same configuration both times), and first in at most
    one batch."""
    out = tmp_path / "run"
    run_bench(_cfg(out, plots=False, interleave=True, batch_sizes=[3], warmup=False), backend=FakeBackend())
    # with two configurations, too (rotated by one, then run backwards, would be the same order twice)
    two = tmp_path / "two"
    run_bench(_cfg(two, plots=False, interleave=True, batch_sizes=[3], warmup=False, drafters=["ngram"],
                   draft_lengths=[2]), backend=FakeBackend())
    keys = [r["key"] for r in read_results(two)]
    assert keys[:6:3] != keys[6::3], keys
    recs = read_results(out)
    batches: dict = {}
    for r in recs:                    # results are appended in the order they ran
        b = batches.setdefault(r["question_id"] in {x["question_id"] for x in recs[:3]}, [])
        if r["key"] not in b:
            b.append(r["key"])
    first, second = batches[True], batches[False]
    assert len(first) == len(second) == 5 and set(first) == set(second)
    before = lambda order: {k: order[i - 1] if i else None for i, k in enumerate(order)}   # noqa: E731
    a, b = before(first), before(second)
    assert all(a[k] != b[k] for k in first), (first, second)


def test_before_group_runs_ahead_of_each_group_left(tmp_path):
    """The hook (the planner validation times the machine in it) runs once before each (dataset,
    batch size) group of an interleaved sweep, and on resume only before groups with work left."""
    out, seen = tmp_path / "hook", []
    hook = lambda ds, bs: seen.append((ds, bs))   # noqa: E731
    with pytest.raises(RuntimeError, match="simulated kill"):   # bs=1 takes 35 calls (warm-ups too)
        run_bench(_cfg(out, plots=False, interleave=True), backend=FakeBackend(fail_after=40), before_group=hook)
    assert seen == [("qualitative", 1), ("qualitative", 2)]
    seen.clear()
    run_bench(_cfg(out, plots=False, interleave=True), backend=FakeBackend(), before_group=hook)
    assert seen == [("qualitative", 2)]
    seen.clear()
    run_bench(_cfg(out, plots=False, interleave=True), backend=FakeBackend(), before_group=hook)
    assert seen == []


def test_min_batches_adds_requests_at_large_batch_sizes(tmp_path):
    """--min-batches 3 with 4 requests: batch 1 keeps its 4 requests (4 batches), batch 2 gets 6
    (3 batches), batch 4 gets 12; each smaller set is a prefix of the larger ones, and resuming
    with another --min-batches is refused."""
    out = tmp_path / "mb"
    run_bench(_cfg(out, drafters=["ngram"], draft_lengths=[2], batch_sizes=[1, 2, 4], num_requests=4,
                   min_batches=3, warmup=False, plots=False, interleave=True), backend=FakeBackend())
    per_bs: dict[int, set] = {}
    for r in read_results(out):
        if r["drafter"] == "ngram":
            per_bs.setdefault(r["batch_size"], set()).add(r["question_id"])
    assert {bs: len(q) for bs, q in per_bs.items()} == {1: 4, 2: 6, 4: 12}
    assert per_bs[1] < per_bs[2] < per_bs[4]
    with pytest.raises(ValueError, match="min_batches"):
        run_bench(_cfg(out, drafters=["ngram"], draft_lengths=[2], batch_sizes=[1, 2, 4], num_requests=4,
                       min_batches=2, warmup=False, plots=False), backend=FakeBackend())


def test_throughput_set(tmp_path):
    out = tmp_path / "tp"
    be = FakeBackend()
    run_bench(_cfg(out, drafters=["ngram"], draft_lengths=[2], batch_sizes=[3], datasets=["throughput-256"],
                   num_requests=3, warmup=False, plots=False), backend=be)
    assert {len(p) for p in be.prompts_seen} == {256}
    header = (out / "acceptance_length.csv").read_text().splitlines()[0]
    assert header == "Model,low_entropy,mixed,high_entropy,Overall"


def test_cli_real_engine_tiny_model(tmp_path):
    import torch

    from draftwise.bench._testing import make_tiny_target
    from draftwise.cli import main

    torch.set_num_threads(1)
    target = make_tiny_target(tmp_path / "tiny")
    out = tmp_path / "run"
    rc = main(["bench", "--target", str(target), "--drafter", "ngram", "-D", "2", "-D", "3",
               "--batch-sizes", "1,2", "--dataset", "qualitative", "--num-requests", "4",
               "--max-new-tokens", "10", "--out", str(out), "--no-progress", "--no-plots", "--adaptive",
               "--interleave"])
    assert rc == 0
    timing = json.loads((out / "timing.json").read_text())
    for dr, d in (("ngram", "D=2"), ("ngram", "D=3"), ("ngram+adaptive", "D=3")):
        for bs in ("bs=1", "bs=2"):
            ll = timing["results"]["qualitative"][dr][d][bs]["lossless"]
            assert ll["share"] == 1.0, ll  # fp32 greedy: token for token the baseline
    conf = json.loads((out / "configuration.json").read_text())
    assert any(name.endswith(".safetensors") for name in conf["models"]["target"]["files"])
    assert len(read_results(out)) == 4 * 2 * 4     # baseline, D=2, D=3, adaptive × 2 batch sizes
    # each batch's steps, once, on its first row: rows active and the widest draft verified per step
    windows: dict = {}
    for r in read_results(out):
        for o in r["outputs"]:
            windows.setdefault(o["window"], []).append(o)
    for outs in windows.values():
        (steps,) = [o["batch_steps"] for o in outs if "batch_steps" in o]
        assert "batch_steps" in outs[0]
        for i, (rows, width, t_target, t_drafter, t_other) in enumerate(steps):
            live = [o for o in outs if len(o["step_lengths"]) > i]
            assert rows == len(live) and width == max(o["drafted"][i] for o in live)
            assert t_target > 0 and t_drafter >= 0
        assert len(steps) == max(len(o["step_lengths"]) for o in outs)
