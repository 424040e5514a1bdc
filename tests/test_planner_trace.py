"""One greedy run traced stands for every draft length: walked at D, it gives the engine's own steps."""
import pytest
import torch

import draftwise
from draftwise.planner import Acceptance, load_acceptance, predict
from draftwise.planner.trace import acceptance_by_draft_length, trace_request, walk
from tiny_models import build, noisy_copy

N_NEW = 40
PROMPTS = [[5, 17, 33, 2, 90, 5, 17, 33], [44, 9, 12, 44, 9], [7, 7, 61, 100, 3, 8, 21, 55, 19], [64, 3, 64, 3, 64]]


@pytest.fixture(scope="module")
def models():
    model = build("llama")
    model.generation_config.eos_token_id = None
    return model, noisy_copy(model, 0.05)


def drafter(name, models):
    model, draft = models
    return draftwise.build_drafter("ngram" if name == "ngram" else draft, draftwise.load_target(model))


@pytest.mark.parametrize("name", ["ngram", "draft-model"])
def test_walked_trace_is_the_engines_steps_at_every_d(name, models):
    model, _ = models
    base = draftwise.generate(model, PROMPTS, drafter=drafter(name, models), num_draft_tokens=8, max_new_tokens=N_NEW,
                              ignore_eos=True)
    traces = [trace_request(drafter(name, models), p, o.token_ids, 8) for p, o in zip(PROMPTS, base)]
    assert any(a > 0 for t in traces for _, a in t), "no draft ever accepted: the test would prove nothing"
    seen = set()
    for D in (1, 2, 3, 5, 8):
        out = draftwise.generate(model, PROMPTS, drafter=drafter(name, models), num_draft_tokens=D,
                                 max_new_tokens=N_NEW, ignore_eos=True)
        for i, (o, t) in enumerate(zip(out, traces)):
            assert o.token_ids == base[i].token_ids
            lengths, drafted = walk(t, D, N_NEW)
            assert lengths == o.accept_lengths, f"{name} D={D} prompt {i}"
            assert drafted == o.num_drafted, f"{name} D={D} prompt {i}"
            seen.add(tuple(lengths))
    assert len(seen) > len(PROMPTS), "every D took the same steps: the test would prove nothing"


def test_acceptance_per_draft_length_is_what_that_d_delivers(models):
    model, _ = models
    out = draftwise.generate(model, PROMPTS, drafter="ngram", num_draft_tokens=4, max_new_tokens=N_NEW, ignore_eos=True)
    traces = [trace_request(drafter("ngram", models), p, o.token_ids, 8) for p, o in zip(PROMPTS, out)]
    acc = acceptance_by_draft_length(traces, 8, N_NEW, name="ngram", shrink=False)
    assert sorted(acc.by_draft_length) == list(range(1, 9)) and acc.at(8).conditional == acc.conditional
    for D in (1, 4, 8):
        # E[τ(D)] from the α_k of D's own steps is their mean length (steps with the full D available)
        full = []
        for t in traces:
            lengths = walk(t, D, N_NEW)[0]
            full += [L for j, L in enumerate(lengths) if sum(lengths[:j]) <= N_NEW - 1 - D]
        assert acc.at(D).expected_tokens(D) == pytest.approx(sum(full) / len(full))
        assert len(acc.at(D).per_request) == len(PROMPTS)
    assert acc.at(0) is acc and acc.at(12) is acc      # no measurement at that D: the run's own
    # the planner prices each D with that D's steps
    pred = predict("llama-3.1-8b", "h100-sxm", acceptance={"ngram": acc}, batch_sizes=[1], draft_tokens=[1, 8],
                   context_lengths=[512])
    for p in pred:
        assert p["expected_tokens_per_step"] == pytest.approx(acc.at(p["num_draft_tokens"]).expected_tokens(p["num_draft_tokens"]))
    # and what it saves, it reads back
    back = load_acceptance({"ngram": acc.to_dict()})["ngram"]
    assert {D: a.conditional for D, a in back.by_draft_length.items()} == {D: a.conditional for D, a in acc.by_draft_length.items()}
    assert back.at(1).proposal_rate == pytest.approx(acc.at(1).proposal_rate)


def test_walk_caps_by_draft_length_and_tokens_left():
    trace = [(3, 3), (3, 3), (3, 0), (3, 3), (0, 0), (2, 1), (1, 1), (0, 0)]
    assert walk(trace, 8, 8) == ([4, 1, 2, 1], [3, 0, 2, 0])   # at t = 5 two tokens are left: one draft
    assert walk(trace, 2, 8) == ([3, 3, 2], [2, 2, 1])
    assert walk(trace, 1, 8) == ([2, 1, 2, 2, 1], [1, 1, 1, 1, 0])


def test_a_drafter_that_depends_on_more_than_the_row_is_refused(models):
    with pytest.raises(ValueError, match="measure each D"):
        trace_request(draftwise.build_drafter("suffix", draftwise.load_target(models[0])), [1, 2, 3], [4, 5], 4)


def test_a_bench_sweep_over_d_prices_each_d_with_its_own_run(tmp_path):
    rates = {1: {"1": 1.0, "2": 0.5}, 2: {"1": 1.0, "2": 0.45, "3": 0.7}, 4: {"1": 1.0, "2": 0.3, "3": 0.6, "4": 0.8, "5": 0.8}}
    sb = {"throughput-256": {"none": {"D=0": {"bs=1": {"Conditional_Acceptance_Rate": {"1": 1.0}}}},
                             "ngram": {f"D={D}": {"bs=1": {"Conditional_Acceptance_Rate": r},
                                                  "bs=4": {"Conditional_Acceptance_Rate": {"1": 1.0, "2": 0.1}}}
                                       for D, r in rates.items()}},
          "throughput-1k": {"ngram": {"D=1": {"bs=1": {"Conditional_Acceptance_Rate": {"1": 1.0, "2": 0.9}}}}}}
    (tmp_path / "specbench_results.json").write_text(__import__("json").dumps(sb))
    assert set(load_acceptance(tmp_path)) == {"ngram"}      # the baseline ("none", D = 0) is no drafter
    acc = load_acceptance(tmp_path)["ngram"]
    assert acc.conditional == [0.3, 0.6, 0.8, 0.8]                   # the largest D's
    assert {D: a.conditional for D, a in acc.by_draft_length.items()} == {1: [0.5], 2: [0.45, 0.7], 4: [0.3, 0.6, 0.8, 0.8]}
    assert acc.at(3) is acc and acc.at(2).expected_tokens(2) == pytest.approx(1 + 0.45 + 0.45 * 0.7)


@pytest.fixture(scope="module")
def greedy_run(tmp_path_factory):
    """A greedy `draftwise bench` run on a tiny target: prompt lookup and a draft model at D = 2
    and 4, multi-turn conversations, run-time D alongside."""
    import shutil

    from safetensors.torch import load_file, save_file

    from draftwise.bench._testing import make_tiny_target
    from draftwise.cli import main

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("traced_run")
    target = make_tiny_target(root / "target")
    draft = root / "draft"       # the target, perturbed: it agrees with the target often, not always
    shutil.copytree(target, draft)
    weights = load_file(draft / "model.safetensors")
    gen = torch.Generator().manual_seed(3)
    save_file({k: v + 0.03 * torch.randn(v.shape, generator=gen) for k, v in weights.items()},
              draft / "model.safetensors", metadata={"format": "pt"})
    out = root / "run"
    convs = [{"question_id": "q1", "category": "writing", "turns": ["Tell a story about a cat.", "Now about a dog."]},
             {"question_id": "q2", "category": "math", "turns": ["What is two plus two? Two plus two is"]},
             {"question_id": "q3", "category": "coding", "turns": ["def add(a, b):", "Now subtract.", "And multiply."]}]
    data = root / "question.jsonl"
    data.write_text("".join(__import__("json").dumps(c) + "\n" for c in convs))
    assert main(["bench", "--target", str(target), "--drafter", "ngram", "--drafter", f"draft-model:{draft}",
                 "-D", "2", "-D", "4", "--batch-sizes", "1", "--dataset", str(data),
                 "--max-new-tokens", "14", "--ignore-eos", "--out", str(out), "--no-progress", "--no-plots",
                 "--adaptive"]) == 0
    return out, target, draft


def test_a_greedy_bench_run_keeps_each_prompt_once_and_its_outputs_trace_to_its_steps(greedy_run):
    """The bench keeps every prompt a greedy turn was given (prompts.jsonl, by hash); traced from
    them, each drafter's outputs walked at D are exactly the steps the run took at D — later turns,
    whose prompts hold the earlier replies, included."""
    from draftwise.bench.runner import read_prompts, read_results

    out, target, draft = greedy_run
    prompts = read_prompts(out)
    recs = read_results(out)
    shas = [o["prompt_sha"] for r in recs for o in r["outputs"]]
    assert set(shas) == set(prompts) and len(prompts) < len(shas)       # each distinct prompt once
    assert any(len(r["outputs"]) > 1 for r in recs)
    tgt = draftwise.load_target(str(target))
    for spec in ("ngram", f"draft-model:{draft}"):
        dr = draftwise.build_drafter(spec, tgt)
        for r in (r for r in recs if r["drafter"] == spec):
            for o in r["outputs"]:
                steps = walk(trace_request(dr, prompts[o["prompt_sha"]], o["token_ids"], 8), r["D"], 14)
                assert steps == (o["step_lengths"], o["drafted"]), (spec, r["D"], r["question_id"])


def test_plan_prices_every_d_from_a_greedy_run(greedy_run):
    """`draftwise plan --acceptance RUN` traces the run's prefix drafters up to --max-draft: every D
    priced by the steps it takes, D = 2 and 4 as measured, D = 6 though the run never drafted 6;
    --no-trace keeps the measured D = 2 and 4 only. The run-time D runs and the baseline are not
    drafters to plan with."""
    from draftwise.bench.runner import read_results
    from draftwise.planner import plan
    from draftwise.planner.trace import acceptance_from_run

    out, target, draft = greedy_run
    traced = acceptance_from_run(out, 6)
    assert set(traced) == {"ngram", f"draft-model:{draft}"}
    recs = read_results(out)
    for spec, acc in traced.items():
        assert sorted(acc.by_draft_length) == [1, 2, 3, 4, 5, 6]
        for D in (2, 4):
            own = [r for r in recs if r["drafter"] == spec and r["D"] == D]
            measured = Acceptance.from_records(own, D, 14)
            assert acc.at(D).conditional == pytest.approx(measured.conditional)
            assert acc.at(D).proposal_rate == pytest.approx(measured.proposal_rate)
    res = plan(str(target), "cpu", acceptance=str(out), max_draft=6, batch_sizes=[1], context_lengths=[128])
    assert set(res["drafters"]) == {"ngram", f"draft-model:{draft}"}
    for d in res["drafters"].values():
        assert d["acceptance"]["source"].startswith("traced") and len(d["acceptance"]["by_draft_length"]) == 6
    res = plan(str(target), "cpu", acceptance=str(out), max_draft=6, batch_sizes=[1], context_lengths=[128], trace=False)
    for d in res["drafters"].values():
        assert sorted(d["acceptance"]["by_draft_length"]) == ["2", "4"]


def test_a_run_that_cannot_be_traced_says_why(greedy_run, tmp_path):
    import json
    import shutil

    from draftwise.planner.trace import acceptance_from_run

    out, _, draft = greedy_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (copy / "prompts.jsonl").unlink()
    with pytest.raises(ValueError, match="no prompt token ids"):
        acceptance_from_run(copy, 4)
    conf = json.loads((copy / "configuration.json").read_text())
    conf["settings"]["temperature"] = 0.7
    (copy / "configuration.json").write_text(json.dumps(conf))
    with pytest.raises(ValueError, match="sampled"):
        acceptance_from_run(copy, 4)
    with pytest.raises(FileNotFoundError, match="not a `draftwise bench` run"):
        acceptance_from_run(tmp_path, 4)


@pytest.fixture(scope="module")
def two_context_run(tmp_path_factory):
    """A greedy bench run of prompt lookup over two datasets: short prompts, and long ones that
    repeat themselves (so that prompt lookup finds more to copy)."""
    import json

    from draftwise.bench._testing import make_tiny_target
    from draftwise.cli import main

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("two_contexts")
    target = make_tiny_target(root / "target")
    short, long = root / "short.jsonl", root / "long.jsonl"
    short.write_text("".join(json.dumps({"question_id": f"s{i}", "category": "qa", "turns": [t]}) + "\n"
                             for i, t in enumerate(["Hi there.", "What is a cat?", "Name a color."])))
    verse = "the quick brown fox jumps over the lazy dog and then the fox sleeps; "
    long.write_text("".join(json.dumps({"question_id": f"l{i}", "category": "summarization",
                                        "turns": [verse * (6 + i) + "Summarize:"]}) + "\n" for i in range(3)))
    out = root / "run"
    assert main(["bench", "--target", str(target), "--drafter", "ngram", "-D", "3", "--batch-sizes", "1",
                 "--dataset", str(short), "--dataset", str(long), "--max-new-tokens", "16", "--ignore-eos",
                 "--out", str(out), "--no-progress", "--no-plots"]) == 0
    return out, target


def test_plan_prices_each_context_with_the_dataset_measured_nearest_it(two_context_run):
    """A run over a short and a long dataset: each context length of the plan is priced with the
    acceptance of the dataset whose mean context is nearest (traced from that dataset's outputs),
    not with the first dataset's for both; --dataset fixes one for all."""
    import math

    from draftwise.cli import main
    from draftwise.planner import plan
    from draftwise.planner.acceptance import load_acceptance, run_contexts
    from draftwise.planner.trace import acceptance_from_run

    out, target = two_context_run
    ctx = run_contexts(out)
    (short, c_short), (long, c_long) = sorted(ctx.items(), key=lambda kv: kv[1])
    assert len(ctx) == 2 and c_long > 3 * c_short
    own = {ds: acceptance_from_run(out, 5, dataset=ds)["ngram"] for ds in ctx}
    assert own[short].conditional != own[long].conditional      # else the test could not tell them apart
    Ls = [round(c_short), round(c_long)]
    res = plan(str(target), "cpu", acceptance=str(out), max_draft=5, batch_sizes=[1, 4], context_lengths=Ls)
    for L, ds in zip(Ls, (short, long)):
        by = res["acceptance_by_context"][str(L)]
        assert by["dataset"] == ds and math.isclose(by["mean_context"], ctx[ds])
        assert by["drafters"]["ngram"]["conditional"] == pytest.approx(own[ds].conditional)
        for cell in (c for c in res["schedule"] if c["context_length"] == L):
            assert cell["acceptance_dataset"] == ds
            D = cell["per_drafter"]["ngram"]["num_draft_tokens"]
            assert cell["per_drafter"]["ngram"]["expected_tokens_per_step"] == pytest.approx(
                own[ds].at(D).expected_tokens(D))
    fixed = plan(str(target), "cpu", acceptance=str(out), max_draft=5, batch_sizes=[1], context_lengths=Ls,
                 dataset=long)
    assert "acceptance_by_context" not in fixed
    assert fixed["drafters"]["ngram"]["acceptance"]["conditional"] == pytest.approx(own[long].conditional)
    untraced = load_acceptance(out, dataset=long)["ngram"]
    assert untraced.at(3).conditional == pytest.approx(own[long].at(3).conditional)
    with pytest.raises(ValueError, match="no dataset 'nope'.*" + short.replace("\\", "\\\\")[-10:]):
        load_acceptance(out, dataset="nope")
    assert main(["plan", "--target", str(target), "--hardware", "cpu", "--acceptance", str(out), "--max-draft", "5",
                 "--batch-sizes", "1", "--context-lengths", ",".join(map(str, Ls))]) == 0
