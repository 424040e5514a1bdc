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
    acc = load_acceptance(tmp_path)["ngram"]
    assert acc.conditional == [0.3, 0.6, 0.8, 0.8]                   # the largest D's
    assert {D: a.conditional for D, a in acc.by_draft_length.items()} == {1: [0.5], 2: [0.45, 0.7], 4: [0.3, 0.6, 0.8, 0.8]}
    assert acc.at(3) is acc and acc.at(2).expected_tokens(2) == pytest.approx(1 + 0.45 + 0.45 * 0.7)
