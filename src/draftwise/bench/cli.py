"""`draftwise bench` and `draftwise serve` command lines."""
from __future__ import annotations

import argparse
import sys


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def add_cli(sub) -> None:
    p = sub.add_parser(
        "bench", help="SPEED-Bench-compatible benchmark: sweep drafters x D x batch sizes x datasets",
        description="Benchmark speculative decoding against plain decoding (always run at every batch size). "
                    "Rerunning into the same --out resumes. With --server URL, drive an OpenAI-compatible "
                    "/v1/completions endpoint instead of the built-in engine.")
    p.add_argument("--target", help="target model directory (built-in engine; also the tokenizer in server mode)")
    p.add_argument("--drafter", action="append", default=None, metavar="SPEC",
                   help="drafter spec (ngram, suffix, draft-model:PATH, eagle3:PATH, …); repeatable")
    p.add_argument("-D", "--num-draft-tokens", dest="D", action="append", type=int, default=None,
                   help="number of drafted tokens per step; repeatable (default 3)")
    p.add_argument("--batch-sizes", "--concurrency", dest="batch_sizes", type=_int_list, default=[1],
                   help="comma-separated batch sizes (server mode: concurrency levels), default 1")
    p.add_argument("--dataset", action="append", default=None,
                   help="qualitative | throughput-256 | throughput-1k … throughput-32k | PATH (test.parquet dir, "
                        ".parquet, .jsonl with turns or messages, Spec-Bench question.jsonl); repeatable")
    p.add_argument("--num-requests", type=int, default=None, help="requests per dataset (stratified by category)")
    p.add_argument("--min-batches", type=int, default=1,
                   help="with --num-requests: at least this many batches at every batch size (more requests "
                        "at large batch sizes, so a ratio there is not one batch's noise)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--out", required=True, help="run directory (created; rerunning into it resumes)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--prompt-format", default="auto", choices=["auto", "chat", "plain", "raw"],
                   help="auto: chat template when the tokenizer has one, else plain 'User: …\\nAssistant:'; "
                        "raw: the turns as plain text (base models)")
    p.add_argument("--per-tier", type=int, default=None,
                   help="throughput sets: prompts per entropy tier (default: enough for --num-requests, else 8)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens")
    p.add_argument("--adaptive", action="store_true",
                   help="also run each drafter with run-time adaptive D (up to the largest -D), "
                        "reported as '<drafter>+adaptive'")
    p.add_argument("--adaptive-hardware", default=None, metavar="PROFILE_OR_NAME",
                   help="adaptive D's steps/s curve from the planner's cost model on this hardware (a "
                        "'draftwise profile' JSON or a datasheet name) instead of a quick measurement at start")
    p.add_argument("--interleave", action="store_true",
                   help="run every configuration on each batch of requests in turn (per dataset and batch "
                        "size), so that ratios between configurations are measured side by side")
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="skip the PNG plots")
    p.add_argument("--report-only", action="store_true", help="only rewrite the reports of --out")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    srv = p.add_argument_group("server mode")
    srv.add_argument("--server", default=None, help="base URL of an OpenAI-compatible server, e.g. http://host:8000")
    srv.add_argument("--model", default=None, help="model name sent to the server")
    srv.add_argument("--tokenizer", default=None,
                     help="tokenizer directory: pre-tokenise prompts and send token ids (default: --target if given)")
    srv.add_argument("--text-prompts", action="store_true", help="send text prompts even when a tokenizer is given")
    srv.add_argument("--timeout", type=float, default=300.0, help="per-request timeout in seconds")
    srv.add_argument("--retries", type=int, default=2, help="retries of a request after a connection error/timeout/5xx")
    srv.add_argument("--api-key", default=None)
    srv.add_argument("--label", default=None, help="name of the server configuration in the reports (default: server)")
    p.set_defaults(func=run_bench_cli)

    s = sub.add_parser("serve", help="small OpenAI-compatible completions server on the draftwise engine",
                       description="Serve /v1/completions (streaming and not), /v1/models and Prometheus /metrics "
                                   "with per-request speculative-decoding acceptance in the response.")
    s.add_argument("--target", required=True)
    s.add_argument("--drafter", default=None, help="drafter spec (default: plain decoding)")
    s.add_argument("-D", "--num-draft-tokens", dest="D", type=int, default=3)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--model-name", default=None, help="name reported by /v1/models (default: target dir name)")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    s.add_argument("--max-batch-size", type=int, default=8, help="requests batched into one engine call")
    s.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long to wait to fill a batch")
    s.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    s.set_defaults(func=serve_cli)


def _threads(args) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def run_bench_cli(args) -> int:
    from draftwise.bench import report

    _threads(args)
    if args.report_only:
        report.write_reports(args.out, plots=args.plots)
        print(f"reports written to {args.out}")
        return 0
    datasets = args.dataset or ["qualitative"]
    if args.server:
        if args.adaptive:
            raise ValueError("--adaptive drives the built-in engine's scheduler; a server chooses its own D "
                             "(drop --adaptive with --server)")
        from draftwise.bench.client import ClientConfig, run_client

        cfg = ClientConfig(server=args.server, model=args.model, out=args.out,
                           tokenizer=args.tokenizer or args.target, text_prompts=args.text_prompts,
                           concurrency=args.batch_sizes, datasets=datasets, num_requests=args.num_requests,
                           max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                           top_k=args.top_k, seed=args.seed, timeout=args.timeout, retries=args.retries,
                           api_key=args.api_key, label=args.label or "server", prompt_format=args.prompt_format,
                           per_tier=args.per_tier, ignore_eos=args.ignore_eos, progress=args.progress,
                           plots=args.plots, D=(args.D or [0])[0])
        summary = run_client(cfg)
        print(f"{summary['ok']} requests ok, {summary['failed']} failed; reports in {args.out}")
        return 0
    if not args.target:
        raise ValueError("--target is required (or --server URL for server mode)")
    from draftwise.bench.runner import BenchConfig, run_bench

    cfg = BenchConfig(target=args.target, out=args.out, drafters=args.drafter or [], draft_lengths=args.D or [3],
                      batch_sizes=args.batch_sizes, datasets=datasets, num_requests=args.num_requests,
                      min_batches=args.min_batches,
                      max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                      top_p=args.top_p, seed=args.seed, dtype=args.dtype, prompt_format=args.prompt_format,
                      per_tier=args.per_tier, warmup=args.warmup, ignore_eos=args.ignore_eos,
                      adaptive=args.adaptive, interleave=args.interleave,
                      adaptive_hardware=args.adaptive_hardware, progress=args.progress,
                      plots=args.plots)
    try:
        out = run_bench(cfg)
    except KeyboardInterrupt:
        print(f"\ninterrupted; finished requests are kept in {args.out}/results.jsonl — rerun the same "
              "command to resume", file=sys.stderr)
        return 130
    print(f"results and reports in {out}")
    return 0


def serve_cli(args) -> int:
    from draftwise.serve import main_serve

    _threads(args)
    return main_serve(args)
