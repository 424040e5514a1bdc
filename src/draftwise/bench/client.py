"""Server mode of `draftwise bench`: drive an OpenAI-compatible ``/v1/completions`` endpoint.

``draftwise bench --server URL --model NAME --dataset … --batch-sizes 1,8 --out DIR`` sends each
conversation (turn by turn) as a streaming completion request, with at most *concurrency*
conversations in flight (asyncio + httpx), per concurrency level. With ``--tokenizer PATH`` (or
``--target``) prompts are rendered and tokenised locally and sent as token ids (vLLM, SGLang,
llama.cpp accept them); otherwise as text ("User: …\\nAssistant:").

Timing per (request, turn): t0 = request sent, t1 … tn = SSE chunk arrivals; tokens = the usage
``completion_tokens`` of the last chunk, else the ``token_ids`` streamed, else the number of
non-empty chunks. One concurrency level is one timing window (system tokens/s).

Acceptance, first match wins:

1. per-request ``metrics.speculative_decoding`` (top level or in the choice; the shape
   ``draftwise serve`` returns, after vLLM): ``acceptance_lengths`` (exact per-step L), else
   ``num_drafts`` + ``num_accepted_tokens_per_pos`` (the step histogram is rebuilt exactly for chain
   drafting: N(L >= i + 2) = per_pos[i]), else ``num_drafts`` + ``num_accepted_tokens`` (totals only);
2. SGLang ``meta_info``: ``spec_accept_histogram`` (index i = steps with i accepted drafts), else
   ``spec_verify_ct`` + ``spec_accept_length`` (totals only);
3. otherwise the Prometheus counters of ``/metrics`` scraped before and after each concurrency level:
   ``vllm:spec_decode_num_drafts``, ``…_num_draft_tokens``, ``…_num_accepted_tokens``,
   ``…_num_accepted_tokens_per_pos`` (with or without ``_total``), or ``sglang:spec_accept_length`` /
   ``trtllm:spec_accept_length`` gauges; reported per configuration as ``server_acceptance``.

Timeouts (``--timeout``, per request), connection errors and HTTP 5xx are retried ``--retries`` times
with exponential back-off; HTTP 4xx are not retried. A request that still fails is written with an
``error`` and counted in ``num_failed``; the run goes on.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from draftwise.bench.datasets import Request, first_messages, load_dataset, render_conversation
from draftwise.bench.metrics import length_counts_from_per_position, rates_from_histogram


@dataclass
class ClientConfig:
    server: str
    out: str
    model: Optional[str] = None
    tokenizer: Optional[str] = None
    text_prompts: bool = False
    concurrency: list[int] = field(default_factory=lambda: [1])
    datasets: list[str] = field(default_factory=lambda: ["qualitative"])
    num_requests: Optional[int] = None
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    seed: Optional[int] = 0
    timeout: float = 300.0
    retries: int = 2
    api_key: Optional[str] = None
    label: str = "server"
    D: int = 0
    prompt_format: str = "auto"
    per_tier: Optional[int] = None
    ignore_eos: bool = False
    progress: bool = True
    plots: bool = True
    backoff: float = 0.2


# ------------------------------------------------------------------------------- prometheus

_PROM_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFNa]+)")


def parse_prometheus(text: str) -> dict[str, Any]:
    """Sum the speculative-decoding series of a Prometheus exposition over their labels."""
    out: dict[str, Any] = {"per_pos": {}}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line.strip())
        if not m:
            continue
        name, labels, val = m.group(1), m.group(2) or "", float(m.group(3))
        if name.endswith("_created"):
            continue
        base = name[:-6] if name.endswith("_total") else name
        if base == "vllm:spec_decode_num_accepted_tokens_per_pos":
            pm = re.search(r'position="(\d+)"', labels)
            if pm:
                pos = int(pm.group(1))
                out["per_pos"][pos] = out["per_pos"].get(pos, 0.0) + val
            continue
        if base in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                    "vllm:spec_decode_num_accepted_tokens", "vllm:generation_tokens"):
            out[base] = out.get(base, 0.0) + val
        elif base in ("sglang:spec_accept_length", "trtllm:spec_accept_length"):
            out[base] = val
    return out


def prometheus_delta(before: dict, after: dict) -> Optional[dict[str, Any]]:
    """Acceptance over a window from two scrapes (None when the server exports no spec counters)."""
    if not after:
        return None
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after if k != "per_pos" and k.startswith("vllm:")}
    res: dict[str, Any] = {"source": "prometheus"}
    drafts = d.get("vllm:spec_decode_num_drafts")
    acc = d.get("vllm:spec_decode_num_accepted_tokens")
    if drafts:
        res["num_drafts"] = drafts
        res["num_accepted_tokens"] = acc
        res["Average_AL"] = 1.0 + (acc or 0.0) / drafts
        dt = d.get("vllm:spec_decode_num_draft_tokens")
        res["num_draft_tokens"] = dt
        res["Draft_Acceptance_Rate"] = (acc or 0.0) / dt if dt else None
        pp_after = after.get("per_pos") or {}
        if pp_after:
            pp = [pp_after.get(i, 0.0) - (before.get("per_pos") or {}).get(i, 0.0) for i in range(max(pp_after) + 1)]
            try:
                hist = length_counts_from_per_position(int(round(drafts)), [int(round(x)) for x in pp])
                cond, joint = rates_from_histogram(hist)
                res.update({"Acceptance_Length_Histogram": hist, "Conditional_Acceptance_Rate": cond,
                            "Joint_Acceptance_Rate": joint})
            except ValueError:
                pass
        return res
    for g in ("sglang:spec_accept_length", "trtllm:spec_accept_length"):
        if g in after:
            res["Average_AL"] = after[g]
            res["note"] = f"{g} gauge at the end of the window"
            return res
    return None


# ----------------------------------------------------------------------------- per-request acc.

def acceptance_from_response(obj: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Per-request acceptance fields of a (final) response object, normalised."""
    cands = [obj.get("metrics")]
    for ch in obj.get("choices") or []:
        cands.append(ch.get("metrics"))
    for m in cands:
        if not isinstance(m, dict):
            continue
        sd = m.get("speculative_decoding", m.get("spec_decode"))
        if not isinstance(sd, dict):
            continue
        if sd.get("acceptance_lengths") is not None:
            out = {"step_lengths": [int(x) for x in sd["acceptance_lengths"]]}
        elif sd.get("num_drafts") is not None and sd.get("num_accepted_tokens_per_pos") is not None:
            out = {"length_counts": length_counts_from_per_position(
                int(sd["num_drafts"]), [int(x) for x in sd["num_accepted_tokens_per_pos"]])}
        elif sd.get("num_drafts") is not None and sd.get("num_accepted_tokens") is not None:
            out = {"totals": {"num_drafts": int(sd["num_drafts"]), "num_accepted": int(sd["num_accepted_tokens"])}}
        else:
            continue
        if sd.get("num_draft_tokens") is not None:
            out["drafted"] = int(sd["num_draft_tokens"])
        return out
    mi = obj.get("meta_info")
    if isinstance(mi, dict):
        hist = mi.get("spec_accept_histogram")
        if isinstance(hist, list) and hist:
            return {"length_counts": {i + 1: int(n) for i, n in enumerate(hist) if int(n) > 0}}
        if mi.get("spec_verify_ct") is not None and mi.get("spec_accept_length") is not None:
            n = int(mi["spec_verify_ct"])
            return {"totals": {"num_drafts": n, "num_accepted": round((float(mi["spec_accept_length"]) - 1.0) * n)}}
    return None


# ------------------------------------------------------------------------------------ requests

class RequestFailed(Exception):
    def __init__(self, msg: str, retryable: bool):
        super().__init__(msg)
        self.retryable = retryable


async def _one_attempt(client, url: str, payload: dict, timeout: float) -> dict[str, Any]:
    import httpx

    t0 = time.time()
    chunk_times: list[float] = []
    text_parts: list[str] = []
    token_ids: list[int] = []
    saw_ids = False
    final: dict[str, Any] = {}
    usage = None
    finish = None

    async def run():
        nonlocal usage, finish, saw_ids
        async with client.stream("POST", url, json=payload) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")[:500]
                raise RequestFailed(f"HTTP {resp.status_code}: {body}", retryable=resp.status_code >= 500
                                    or resp.status_code == 429)
            async for line in resp.aiter_lines():
                line = line.strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.time()
                try:
                    obj = json.loads(data)
                except json.JSONDecodeError:
                    continue
                if "error" in obj and not obj.get("choices"):
                    raise RequestFailed(f"stream error: {obj['error']}", retryable=True)
                choices = obj.get("choices") or []
                new = False
                for ch in choices:
                    if ch.get("text"):
                        text_parts.append(ch["text"])
                        new = True
                    if ch.get("token_ids"):
                        saw_ids = True
                        token_ids.extend(int(t) for t in ch["token_ids"])
                        new = True
                    if ch.get("finish_reason"):
                        finish = ch["finish_reason"]
                if new:
                    chunk_times.append(now)
                if obj.get("usage"):
                    usage = obj["usage"]
                if obj.get("metrics") or obj.get("meta_info") or any(ch.get("metrics") for ch in choices):
                    final.update({k: obj[k] for k in ("metrics", "meta_info", "choices") if k in obj})

    try:
        await asyncio.wait_for(run(), timeout=timeout)
    except asyncio.TimeoutError:
        raise RequestFailed(f"timed out after {timeout:g}s", retryable=True) from None
    except (httpx.TimeoutException,) as exc:
        raise RequestFailed(f"timed out: {type(exc).__name__}", retryable=True) from None
    except httpx.TransportError as exc:
        raise RequestFailed(f"connection error: {type(exc).__name__}: {exc}", retryable=True) from None
    if usage and usage.get("completion_tokens") is not None:
        n = int(usage["completion_tokens"])
    elif saw_ids:
        n = len(token_ids)
    else:
        n = len(chunk_times)
    out = {"t0": t0, "chunk_times": chunk_times, "num_tokens": n, "text": "".join(text_parts),
           "token_ids": token_ids if saw_ids else None, "finish_reason": finish, "usage": usage}
    acc = acceptance_from_response(final) if final else None
    if acc:
        out.update(acc)
    return out


async def send_request(client, cfg: ClientConfig, prompt) -> dict[str, Any]:
    url = cfg.server.rstrip("/") + "/v1/completions"
    payload = {"prompt": prompt, "max_tokens": cfg.max_new_tokens, "temperature": cfg.temperature,
               "stream": True, "stream_options": {"include_usage": True}}
    if cfg.model:
        payload["model"] = cfg.model
    if cfg.top_p is not None:
        payload["top_p"] = cfg.top_p
    if cfg.top_k is not None:
        payload["top_k"] = cfg.top_k
    if cfg.seed is not None:
        payload["seed"] = cfg.seed
    if cfg.ignore_eos:
        payload["ignore_eos"] = True
    attempts = []
    for attempt in range(cfg.retries + 1):
        try:
            res = await _one_attempt(client, url, payload, cfg.timeout)
            res["attempts"] = attempt + 1
            return res
        except RequestFailed as exc:
            attempts.append(str(exc))
            if not exc.retryable or attempt == cfg.retries:
                raise RequestFailed("; ".join(attempts), False) from None
            await asyncio.sleep(cfg.backoff * 2 ** attempt)
    raise AssertionError("unreachable")


def _plain_text(messages: list[dict[str, str]], prompt_format: str) -> str:
    if prompt_format == "raw":
        return "\n\n".join(m["content"] for m in messages if m["role"] != "system")
    parts = []
    for m in messages:
        role = {"user": "User", "assistant": "Assistant"}.get(m["role"])
        parts.append(f"{role}: {m['content']}\n" if role else m["content"] + "\n")
    return "".join(parts) + "Assistant:"


async def run_conversation(client, cfg: ClientConfig, tokenizer, req: Request, window: str) -> dict[str, Any]:
    replies: list[str] = []
    outs = []
    for t in range(len(req.turns)):
        if req.prompt_token_ids is not None and t == 0 and not cfg.text_prompts:
            prompt: Any = list(req.prompt_token_ids)
        else:
            msgs = first_messages(req, t, replies)
            if tokenizer is not None and not cfg.text_prompts:
                prompt = render_conversation(tokenizer, msgs, cfg.prompt_format)
            elif req.prompt_token_ids is not None:
                prompt = req.turns[0]
            else:
                prompt = _plain_text(msgs, cfg.prompt_format)
        res = await send_request(client, cfg, prompt)
        res["window"] = window
        res["prompt_tokens"] = len(prompt) if isinstance(prompt, list) else None
        replies.append(res["text"])
        outs.append(res)
    return {"outputs": outs}


# ------------------------------------------------------------------------------------------ run

def _prepare_dir(cfg: ClientConfig) -> None:
    from draftwise.bench.runner import CONFIG_FILE, package_versions, write_json_atomic

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in asdict(cfg).items()
                if k in ("max_new_tokens", "temperature", "top_p", "top_k", "seed", "num_requests",
                         "prompt_format", "per_tier", "ignore_eos", "text_prompts")}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = out / CONFIG_FILE
    if path.is_file():
        conf = json.loads(path.read_text(encoding="utf-8"))
        old = conf.get("settings", {})
        diff = {k: (old.get(k), v) for k, v in settings.items() if old.get(k) != v}
        if diff:
            raise ValueError(f"{out} holds a run with different settings {diff} (old, new); use another --out")
        conf.setdefault("servers", {})[cfg.label] = {"url": cfg.server, "model": cfg.model, "tokenizer": cfg.tokenizer}
        conf["updated"] = now
    else:
        conf = {"format": "draftwise-bench/1", "mode": "server", "settings": settings,
                "servers": {cfg.label: {"url": cfg.server, "model": cfg.model, "tokenizer": cfg.tokenizer}},
                "sweep": {"concurrency": cfg.concurrency, "datasets": cfg.datasets},
                "versions": package_versions(), "created": now, "updated": now}
    write_json_atomic(path, conf)


async def _scrape(client, cfg: ClientConfig) -> dict:
    try:
        r = await client.get(cfg.server.rstrip("/") + "/metrics", timeout=min(cfg.timeout, 10.0))
        if r.status_code == 200:
            return parse_prometheus(r.text)
    except Exception:  # noqa: BLE001 - the counters are optional
        pass
    return {}


async def _run_async(cfg: ClientConfig, datasets: dict[str, list[Request]], tokenizer, done: set) -> dict[str, Any]:
    import httpx

    from draftwise.bench.runner import ResultWriter, config_key

    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    limits = httpx.Limits(max_connections=max(cfg.concurrency) + 4, max_keepalive_connections=max(cfg.concurrency) + 4)
    writer = ResultWriter(cfg.out)
    stats = {"ok": 0, "failed": 0, "server_acceptance": {}}
    D = 0 if cfg.label == "none" else cfg.D
    todo = []
    for ds, reqs in datasets.items():
        for conc in cfg.concurrency:
            key = config_key(ds, cfg.label, D, conc)
            rest = [r for r in reqs if (key, r.question_id) not in done]
            if rest:
                todo.append((ds, conc, key, rest))
    bar = None
    if cfg.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(len(t[3]) for t in todo), desc="bench (server)", unit="req", dynamic_ncols=True)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(cfg.timeout), headers=headers, limits=limits) as client:
            for ds, conc, key, reqs in todo:
                window = f"c{conc}-{uuid.uuid4().hex[:8]}"
                before = await _scrape(client, cfg)
                sem = asyncio.Semaphore(conc)

                async def one(req: Request):
                    async with sem:
                        try:
                            res = await run_conversation(client, cfg, tokenizer, req, window)
                            err = None
                        except RequestFailed as exc:
                            res, err = {"outputs": []}, str(exc)
                        rec = {"key": key, "dataset": ds, "drafter": cfg.label, "D": D, "batch_size": conc,
                               "question_id": req.question_id, "category": req.category,
                               "sub_category": req.sub_category,
                               "turns": req.turns if req.prompt_token_ids is None else
                               [f"<{req.category} prompt of exactly {len(req.prompt_token_ids)} tokens>"],
                               "outputs": res["outputs"]}
                        if err:
                            rec["error"] = err
                            stats["failed"] += 1
                        else:
                            stats["ok"] += 1
                        writer.write(rec)
                        if bar is not None:
                            bar.update(1)

                await asyncio.gather(*(one(r) for r in reqs))
                after = await _scrape(client, cfg)
                delta = prometheus_delta(before, after)
                if delta:
                    stats["server_acceptance"][key] = delta
    finally:
        writer.close()
        if bar is not None:
            bar.close()
    return stats


def run_client(cfg: ClientConfig) -> dict[str, Any]:
    """Run (or resume) the server benchmark into ``cfg.out`` and write the reports."""
    from draftwise.bench import report
    from draftwise.bench.runner import read_results

    tokenizer = None
    if cfg.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
    _prepare_dir(cfg)
    done = {(r["key"], r["question_id"]) for r in read_results(cfg.out) if not r.get("error")}
    datasets = {ds: load_dataset(ds, tokenizer=tokenizer, num_requests=cfg.num_requests, per_tier=cfg.per_tier)
                for ds in cfg.datasets}
    stats = asyncio.run(_run_async(cfg, datasets, tokenizer, done))
    # keep the Prometheus windows next to the results
    sa_path = Path(cfg.out) / "server_acceptance.json"
    old = json.loads(sa_path.read_text()) if sa_path.is_file() else {}
    old.update({k: {str(kk): vv for kk, vv in v.items()} for k, v in stats["server_acceptance"].items()})
    sa_path.write_text(json.dumps(old, indent=2, default=str) + "\n")
    # failed attempts are superseded by a later success of the same request
    records = read_results(cfg.out)
    ok = {(r["key"], r["question_id"]) for r in records if not r.get("error")}
    records = [r for r in records if not r.get("error") or (r["key"], r["question_id"]) not in ok]
    report.write_reports(cfg.out, records=records, plots=cfg.plots)
    return stats
