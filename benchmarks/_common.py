"""What the benchmark scripts share: a steady allocator, and the adaptive-D scripts' workload."""
import argparse
import os
import sys

TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"


def steady_malloc() -> None:
    """Re-exec under GLIBC_TUNABLES that keep large tensors off mmap: steadier timings (see
    BENCHMARKS.md). glibc reads the variable at start-up only, so setting it in-process does nothing."""
    if os.environ.get("GLIBC_TUNABLES") != TUNABLES:
        os.environ["GLIBC_TUNABLES"] = TUNABLES
        os.execv(sys.executable, [sys.executable] + sys.argv)


def adaptive_parser(doc: str, requests: int) -> argparse.ArgumentParser:
    """Options of the scripts that decode a throughput set with adaptive D."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--drafter", default="ngram")
    ap.add_argument("--dataset", default="throughput-256")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--requests", type=int, default=requests)
    ap.add_argument("-D", type=int, default=8, help="adaptive D's largest draft")
    ap.add_argument("--adaptive", default="true", help="a profile JSON or datasheet name; 'true' measures at start")
    ap.add_argument("--threads", type=int, default=2)
    return ap


def adaptive_workload(args):
    """(target, prompt token ids, the `adaptive=` argument of `draftwise.generate`) for `args`."""
    import torch

    import draftwise as dw
    from draftwise.bench.datasets import load_dataset

    torch.set_num_threads(args.threads)
    tgt = dw.load_target(args.target)
    prompts = [tgt.tokenizer.encode(r.turns[0])
               for r in load_dataset(args.dataset, tgt.tokenizer, num_requests=max(args.requests, 16))]
    return tgt, prompts, True if args.adaptive.lower() == "true" else args.adaptive
