"""`draftwise plan` and `draftwise profile`."""
from __future__ import annotations

import json
import math
import sys


def _floats(s):
    return [float(x) for x in s.split(",") if x.strip()]


def _ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def add_cli(sub) -> None:
    p = sub.add_parser("plan", help="choose the drafter and number of drafted tokens per batch size and context",
                       description="Plan speculative decoding. With only --alpha and --cost-ratio: Leviathan's "
                                   "closed form. With --target and --hardware: a schedule per batch size and context.")
    p.add_argument("--alpha", type=float, help="constant per-position acceptance α (for every drafter)")
    p.add_argument("--cost-ratio", type=float, help="draft step cost / target step cost c (Leviathan mode; with "
                                                     "--target: a generic drafter costing c × a decode step per token)")
    p.add_argument("--target", help="target model: folder, config.json, or bundled name "
                                    "(llama-3.1-8b, llama-3.1-70b, deepseek-v3, qwen3-next-80b-a3b)")
    p.add_argument("--hardware", default=None, help="datasheet name (h100-sxm, h200, b200, a100-80gb, l40s, "
                                                    "mi300x, cpu) or a profile JSON from `draftwise profile` (default h100-sxm)")
    p.add_argument("--acceptance", help="bench run directory / specbench_results.json / "
                                        "{drafter: {conditional: [α1, …]}} JSON")
    p.add_argument("--no-trace", dest="trace", action="store_false",
                   help="with a greedy bench run as --acceptance, price each D by the runs measured at it, not "
                        "by the run's outputs traced at every D (prompt lookup and draft models)")
    p.add_argument("--dataset", help="with a bench run over several datasets as --acceptance, use this one's "
                                     "acceptance for every context (default: each context length gets the "
                                     "dataset whose mean context is nearest)")
    p.add_argument("--category", help="use the acceptance of one benchmark category")
    p.add_argument("--drafter", help="drafters to consider, comma-separated (eagle3, mtp, dflash, dspark, "
                                     "draft_model, ngram, suffix)")
    p.add_argument("--draft-model", help="config / folder of the draft model (drafter draft_model)")
    p.add_argument("--batch-sizes", help="comma-separated (default 1,2,4,…,512)")
    p.add_argument("--context-lengths", help="comma-separated (default 1024,8192)")
    p.add_argument("--max-draft", type=int, default=16, help="largest D considered (default 16)")
    p.add_argument("--min-gain", type=float, default=None,
                   help="least predicted speedup over plain decoding worth speculating for, as a share "
                        "(default 0.02; 0: the plain argmax; Leviathan mode is always the exact argmax)")
    p.add_argument("--latency-target-ms", type=float, help="per-user ms per output token to meet (operating point)")
    p.add_argument("--num-devices", type=int, default=1, help="tensor-parallel devices")
    p.add_argument("--weight-dtype", help="override the config's weight dtype (bfloat16, fp8, float32 …)")
    p.add_argument("--kv-dtype", help="override the KV cache dtype")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--output", help="also write the JSON to this file")
    p.set_defaults(func=_plan_cmd)

    q = sub.add_parser("profile", help="measure this machine (and a target's step times) for the planner")
    q.add_argument("--target", help="model folder, config.json or bundled config name (config only: random weights)")
    q.add_argument("--draft-model", help="also time one token of this draft model (folder) per batch size and context")
    q.add_argument("--output", "-o", default="profile.json")
    q.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    q.add_argument("--dtype", help="default float32 on CPU, bfloat16 on GPU")
    q.add_argument("--hidden", type=int, help="GEMM width without a target (default 1024)")
    q.add_argument("--rows", default="1,2,4,8,16,32,64,128,256,512")
    q.add_argument("--batch-sizes", default="1,4")
    q.add_argument("--draft-tokens", default="0,1,2,3,4,5,6,7,8",
                   help="every D the plan may pick: a CPU's step time is not smooth in its width")
    q.add_argument("--context-lengths", default="128,512")
    q.add_argument("--repeats", type=int, default=3,
                   help="rounds per (B, L) and pass, each timing every D once in a random order")
    q.add_argument("--passes", type=int, default=6,
                   help="passes over the target's step grid; a point is the median of its passes × repeats timings; "
                        "with 4 or more, passes that met two prices of width are told apart (planner.levels)")
    q.add_argument("--name", help="name for this machine in the profile")
    q.add_argument("--threads", type=int, help="torch threads (default: torch's choice; 1 is steadier on a busy machine)")
    q.set_defaults(func=_profile_cmd)


def _plan_cmd(args) -> int:
    from .schedule import plan
    res = plan(args.target, args.hardware, alpha=args.alpha, cost_ratio=args.cost_ratio,
               acceptance=args.acceptance, drafters=args.drafter, draft_model=args.draft_model,
               batch_sizes=args.batch_sizes, context_lengths=args.context_lengths, max_draft=args.max_draft,
               latency_target_ms=args.latency_target_ms, num_devices=args.num_devices, category=args.category,
               weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, trace=args.trace, dataset=args.dataset,
               **({} if args.min_gain is None else {"min_gain": args.min_gain}))
    text = json.dumps(_finite(res), indent=1, default=str, allow_nan=False)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    if args.json:
        print(text)
    else:
        print(format_plan(res))
    return 0


def _finite(x):
    """inf / nan → None, so the output is strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def format_plan(res: dict) -> str:
    lines = []
    if res["mode"] == "leviathan":
        lines.append(f"Leviathan closed form: α = {res['alpha']:g}, c = {res['cost_ratio']:g}")
        lines.append(f"{'D':>3} {'E[τ]':>8} {'speedup':>8}")
        for r in res["table"]:
            star = " *" if r["num_draft_tokens"] == res["best_num_draft_tokens"] else ""
            lines.append(f"{r['num_draft_tokens']:>3} {r['expected_tokens_per_step']:>8.3f} {r['speedup']:>8.3f}{star}")
        lines.append(f"best D = {res['best_num_draft_tokens']}: E[τ] = {res['expected_tokens_per_step']:.3f}, "
                     f"speedup {res['speedup']:.3f}×")
        for r in res["reasons"]:
            lines.append(f"  - {r['text']}")
        return "\n".join(lines)
    t, hw = res["target"], res["hardware"]
    lines.append(f"target {t['name']}: {t['total_params'] / 1e9:.2f} B params ({t['active_params'] / 1e9:.2f} B active), "
                 f"{t['kv_bytes_per_token'] / 1024:.1f} KiB KV/token, layers {t['layer_kinds']}")
    lines.append(f"hardware {hw['name']} ({hw['source']}): {hw['flops'] / 1e12:.3g} TFLOP/s, "
                 f"{hw['bandwidth'] / 1e9:.0f} GB/s, {hw['memory'] / 1e9:.0f} GB")
    cal = res["calibration"]
    if cal["points"]:
        lines.append(f"calibrated on {cal['points']} measured steps (mean error {cal['mean_abs_rel_error']:.1%})")
    if res.get("price_levels"):
        from .levels import describe_levels
        lines.append("the profile met two prices of width; D loses least at either, [cheap/dear] is each "
                     "level's own best where they differ:")
        lines += [f"  {line}" for line in describe_levels(res["price_levels"])]
    for L in res["context_lengths"]:
        lines.append("")
        by_ctx = (res.get("acceptance_by_context") or {}).get(str(L))
        src = f"; acceptance of {by_ctx['dataset']} (mean context {by_ctx['mean_context']:.0f})" if by_ctx else ""
        lines.append(f"context {L}: break-even batch size {res['break_even_by_context'][str(L)]}{src}")
        lines.append(f"{'B':>5} {'drafter':>10} {'D':>3} {'E[τ]':>6} {'speedup':>8} {'tok/s':>10} {'ms/tok':>8}  why")
        for c in res["schedule"]:
            if c["context_length"] != L:
                continue
            why = next((r["text"] for rule in ("price-levels", "4-marginal") for r in c["reasons"]
                        if r["rule"] == rule), "")
            mem = "" if c["fits_in_memory"] else " [does not fit]"
            own = [v["num_draft_tokens"] for v in (c.get("price_levels") or {}).values()]
            if len(set(own)) > 1:
                why = f"[{'/'.join(map(str, own))}] {why}"
            lines.append(f"{c['batch_size']:>5} {c['drafter']:>10} {c['num_draft_tokens']:>3} "
                         f"{c['expected_tokens_per_step']:>6.2f} {c['speedup']:>7.2f}× {c['throughput_tok_s']:>10.0f} "
                         f"{c['ms_per_token']:>8.2f}  {why}{mem}")
    if res.get("operating_points"):
        lines.append("")
        for L, op in res["operating_points"].items():
            head = f"at ≤ {res['latency_target_ms']:g} ms/token per user, context {L}: "
            if op["batch_size"] is None:
                lines.append(head + "no batch size in the grid meets the target")
                continue
            base = (f"without speculation batch {op['baseline_batch_size']}, "
                    f"{op['baseline_throughput_tok_s']:.0f} tok/s" if op["baseline_batch_size"] else
                    "without speculation no batch size meets it")
            gain = f" ({op['throughput_gain']:.2f}×)" if op.get("throughput_gain") else ""
            lines.append(head + f"batch {op['batch_size']} with {op['drafter']} D = {op['num_draft_tokens']}, "
                         f"{op['throughput_tok_s']:.0f} tok/s; {base}{gain}")
    ec = res.get("engine_configs") or {}
    if ec.get("vllm"):
        lines.append("")
        lines.append(f"vLLM:   {ec['vllm']['cli']}")
    if ec.get("sglang"):
        lines.append(f"SGLang: {ec['sglang']['cli']}")
    if ec.get("tensorrt_llm"):
        lines.append(f"TensorRT-LLM: speculative_config: {json.dumps(ec['tensorrt_llm']['speculative_config'])}")
    return "\n".join(lines)


def _profile_cmd(args) -> int:
    from .profile import profile, save_profile
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    hw = profile(args.target, hidden=args.hidden, device=args.device, dtype=args.dtype, rows=_ints(args.rows),
                 batch_sizes=_ints(args.batch_sizes), draft_tokens=_ints(args.draft_tokens),
                 context_lengths=_ints(args.context_lengths), repeats=args.repeats, passes=args.passes,
                 name=args.name, draft_model=args.draft_model, log=lambda s: print(s, file=sys.stderr))
    save_profile(hw, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
