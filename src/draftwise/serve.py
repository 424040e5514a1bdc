"""`draftwise serve`: a small OpenAI-compatible completions server on the draftwise engine.

Endpoints (stdlib ``http.server``, one thread per connection, requests batched into engine calls):

* ``POST /v1/completions`` – ``prompt`` as text or token ids (a list of ints, or a one-element list of
  either), ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``, ``stop``, ``stream``,
  ``ignore_eos``. Streaming answers are Server-Sent Events (``data: {json}`` … ``data: [DONE]``), one
  chunk per engine step, each choice carrying ``text`` (the delta) and ``token_ids`` (the new ids).
  A prompt that does not fit the target (prompt + max_tokens > its positions), malformed JSON or bad
  parameters → HTTP 400 ``{"error": {"message", "type": "invalid_request_error", "code": 400}}``;
  an engine failure → HTTP 500.
* ``GET /v1/models``, ``GET /health``.
* ``GET /metrics`` – Prometheus text format with vLLM's counter names:
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``,
  ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:request_success_total``
  and ``draftwise:request_failure_total``.

Per-request acceptance (the shape :mod:`draftwise.bench.client` reads, after vLLM's per-request spec
metrics): the non-streaming response and the last streamed chunk carry ::

    "metrics": {"speculative_decoding": {
        "num_drafts": S,                       # verification steps (each emits L = accepted + 1 tokens)
        "num_draft_tokens": sum of drafted tokens,
        "num_accepted_tokens": sum of (L - 1),
        "num_accepted_tokens_per_pos": [steps whose draft i was accepted, i = 0 … D-1],
        "acceptance_lengths": [L per step]}}   # draftwise extension: the exact per-step lengths

plus ``usage`` {prompt_tokens, completion_tokens, total_tokens}. Every verification step counts as a
draft (a step where the drafter proposed nothing has L = 1), so AL = 1 + accepted / drafts is exactly
specdec_bench's mean L.
"""
from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


class RequestError(ValueError):
    """A client error (HTTP 400)."""


class _Job:
    def __init__(self, prompt: list[int], params: dict[str, Any], stream: bool):
        self.prompt = prompt
        self.params = params
        self.stream = stream
        self.events: "queue.Queue[tuple[str, Any]]" = queue.Queue()

    def key(self):
        p = self.params
        return (p["max_tokens"], p["temperature"], p["top_p"], p["top_k"], p["seed"],
                json.dumps(p["stop"]), p["ignore_eos"])


class Metrics:
    def __init__(self, num_positions: int):
        self.lock = threading.Lock()
        self.c: dict[str, float] = defaultdict(float)
        self.per_pos = [0] * max(0, num_positions)

    def add_request(self, spec: dict, prompt_tokens: int, completion_tokens: int):
        with self.lock:
            self.c["vllm:spec_decode_num_drafts_total"] += spec["num_drafts"]
            self.c["vllm:spec_decode_num_draft_tokens_total"] += spec["num_draft_tokens"]
            self.c["vllm:spec_decode_num_accepted_tokens_total"] += spec["num_accepted_tokens"]
            for i, n in enumerate(spec["num_accepted_tokens_per_pos"]):
                if i >= len(self.per_pos):
                    self.per_pos.extend([0] * (i + 1 - len(self.per_pos)))
                self.per_pos[i] += n
            self.c["vllm:prompt_tokens_total"] += prompt_tokens
            self.c["vllm:generation_tokens_total"] += completion_tokens
            self.c["vllm:request_success_total"] += 1

    def add_failure(self):
        with self.lock:
            self.c["draftwise:request_failure_total"] += 1

    def render(self, model: str) -> str:
        names = ["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:request_success_total", "draftwise:request_failure_total"]
        lines = []
        with self.lock:
            for n in names:
                base = n[:-len("_total")]
                lines += [f"# TYPE {base} counter", f'{n}{{model_name="{model}"}} {self.c[n]:.1f}']
            base = "vllm:spec_decode_num_accepted_tokens_per_pos"
            lines.append(f"# TYPE {base} counter")
            for i, n in enumerate(self.per_pos):
                lines.append(f'{base}_total{{model_name="{model}",position="{i}"}} {float(n):.1f}')
        return "\n".join(lines) + "\n"


def spec_fields(accept_lengths: list[int], drafted: list[int], D: int) -> dict[str, Any]:
    per_pos = [sum(1 for L in accept_lengths if L - 1 > i) for i in range(max(D, max(accept_lengths, default=1) - 1))]
    return {"num_drafts": len(accept_lengths), "num_draft_tokens": int(sum(drafted)),
            "num_accepted_tokens": int(sum(L - 1 for L in accept_lengths)),
            "num_accepted_tokens_per_pos": per_pos, "acceptance_lengths": [int(L) for L in accept_lengths]}


class CompletionService:
    """Queues requests and runs them in batches (same sampling parameters) through the backend."""

    def __init__(self, backend, drafter: Optional[str], D: int, model_name: str,
                 max_batch_size: int = 8, batch_wait_ms: float = 5.0):
        self.backend = backend
        self.drafter = drafter or "none"
        self.D = int(D) if self.drafter != "none" else 0
        self.model_name = model_name
        self.max_batch_size = max(1, int(max_batch_size))
        self.batch_wait = batch_wait_ms / 1000.0
        self.tokenizer = backend.tokenizer
        self.max_positions = getattr(backend, "max_positions", None)
        self.metrics = Metrics(self.D)
        self.q: "queue.Queue[_Job]" = queue.Queue()
        self._pending: list[_Job] = []
        self._stop = threading.Event()
        self.worker = threading.Thread(target=self._loop, name="draftwise-serve-engine", daemon=True)
        self.worker.start()

    # -------------------------------------------------------------------------- validation
    def parse(self, body: dict[str, Any]) -> _Job:
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("this server has no tokenizer; send token ids")
            ids = list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = [int(t) for t in prompt]
        else:
            raise RequestError("'prompt' must be a non-empty string or list of token ids (one prompt per request)")
        if not ids:
            raise RequestError("the prompt is empty")
        max_tokens = body.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise RequestError("'max_tokens' must be a positive integer")
        if self.max_positions is not None and len(ids) + max_tokens > self.max_positions:
            raise RequestError(f"the prompt has {len(ids)} tokens; with max_tokens={max_tokens} it needs "
                               f"{len(ids) + max_tokens} positions but the model has {self.max_positions}")
        vocab = getattr(getattr(self.backend, "target", None), "vocab_size", None)
        if vocab is not None and (max(ids) >= vocab or min(ids) < 0):
            raise RequestError(f"prompt token id out of the vocabulary (size {vocab})")
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        if temperature < 0:
            raise RequestError("'temperature' must be >= 0")
        top_p = body.get("top_p")
        top_p = None if top_p is None or float(top_p) >= 1.0 else float(top_p)
        top_k = body.get("top_k")
        top_k = None if top_k is None or int(top_k) <= 0 else int(top_k)
        stop = body.get("stop")
        if stop is not None and not isinstance(stop, (str, list)):
            raise RequestError("'stop' must be a string or a list of strings")
        params = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "top_k": top_k,
                  "seed": body.get("seed"), "stop": stop, "ignore_eos": bool(body.get("ignore_eos", False))}
        return _Job(ids, params, bool(body.get("stream", False)))

    # ------------------------------------------------------------------------------ engine
    def submit(self, job: _Job) -> None:
        self.q.put(job)

    def close(self) -> None:
        self._stop.set()

    def _next_batch(self) -> list[_Job]:
        first = self._pending.pop(0) if self._pending else self.q.get(timeout=0.1)
        batch = [first]
        deadline = time.monotonic() + self.batch_wait
        while len(batch) < self.max_batch_size:
            # take compatible pending jobs first
            for j in list(self._pending):
                if j.key() == first.key() and len(batch) < self.max_batch_size:
                    self._pending.remove(j)
                    batch.append(j)
            left = deadline - time.monotonic()
            if left <= 0 or len(batch) >= self.max_batch_size:
                break
            try:
                j = self.q.get(timeout=left)
            except queue.Empty:
                break
            if j.key() == first.key():
                batch.append(j)
            else:
                self._pending.append(j)
        return batch

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._next_batch()
            except queue.Empty:
                continue
            p = batch[0].params

            def stream(row, new_ids, _batch=batch):
                _batch[row].events.put(("tokens", [int(t) for t in new_ids]))

            try:
                outs = self.backend.generate([j.prompt for j in batch], self.drafter, self.D, p["max_tokens"],
                                             temperature=p["temperature"], top_k=p["top_k"], top_p=p["top_p"],
                                             seed=p["seed"], ignore_eos=p["ignore_eos"], stop=p["stop"],
                                             stream=stream)
            except Exception as exc:  # noqa: BLE001 - reported to the clients as HTTP 500
                for j in batch:
                    self.metrics.add_failure()
                    j.events.put(("error", f"{type(exc).__name__}: {exc}"))
                continue
            for j, o in zip(batch, outs):
                spec = spec_fields(o["accept_lengths"], o["num_drafted"], self.D)
                self.metrics.add_request(spec, len(j.prompt), len(o["token_ids"]))
                j.events.put(("done", {**o, "spec": spec}))


# ------------------------------------------------------------------------------------ http layer

def _decode(tok, ids) -> str:
    if tok is None:
        return ""
    return tok.decode(ids, skip_special_tokens=True)


class Handler(BaseHTTPRequestHandler):
    service: CompletionService = None  # set on the subclass
    server_version = "draftwise-serve/0.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _send_json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, msg: str) -> None:
        kind = "invalid_request_error" if code < 500 else "server_error"
        self._send_json(code, {"error": {"message": msg, "type": kind, "code": code}})

    def do_GET(self):  # noqa: N802
        svc = self.service
        path = self.path.split("?")[0]
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [
                {"id": svc.model_name, "object": "model", "created": 0, "owned_by": "draftwise",
                 "max_model_len": svc.max_positions}]})
        elif path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path == "/metrics":
            data = svc.metrics.render(svc.model_name).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._error(404, f"no route {path}")

    def do_POST(self):  # noqa: N802
        svc = self.service
        path = self.path.split("?")[0]
        if path != "/v1/completions":
            self._error(404, f"no route {path} (this server implements /v1/completions)")
            return
        try:
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            job = svc.parse(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            svc.metrics.add_failure()
            self._error(400, "the request body is not valid JSON")
            return
        except (RequestError, TypeError, ValueError) as exc:
            svc.metrics.add_failure()
            self._error(400, str(exc))
            return
        rid = "cmpl-" + uuid.uuid4().hex
        created = int(time.time())
        model = body.get("model") or svc.model_name
        svc.submit(job)
        if job.stream:
            self._stream(job, rid, created, model)
        else:
            self._complete(job, rid, created, model)

    def _final_fields(self, job, o):
        usage = {"prompt_tokens": len(job.prompt), "completion_tokens": len(o["token_ids"]),
                 "total_tokens": len(job.prompt) + len(o["token_ids"])}
        return usage, {"speculative_decoding": o["spec"]}

    def _complete(self, job, rid, created, model):
        kind, val = self._wait_done(job)
        if kind == "error":
            self._error(500, val)
            return
        usage, metrics = self._final_fields(job, val)
        self._send_json(200, {"id": rid, "object": "text_completion", "created": created, "model": model,
                              "choices": [{"index": 0, "text": val["text"], "token_ids": val["token_ids"],
                                           "logprobs": None, "finish_reason": _finish(val["finish_reason"])}],
                              "usage": usage, "metrics": metrics})

    @staticmethod
    def _wait_done(job):
        while True:
            kind, val = job.events.get()
            if kind in ("done", "error"):
                return kind, val

    def _stream(self, job, rid, created, model):
        # wait for the first event so that an engine error can still be a proper HTTP 500
        kind, val = job.events.get()
        if kind == "error":
            self._error(500, val)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        tok = self.service.tokenizer
        ids: list[int] = []
        sent_text = ""
        alive = True

        def send(obj) -> bool:
            nonlocal alive
            if not alive:
                return False
            try:
                self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, OSError):
                alive = False
            return alive

        def chunk(text, new_ids, finish=None, extra=None):
            obj = {"id": rid, "object": "text_completion", "created": created, "model": model,
                   "choices": [{"index": 0, "text": text, "token_ids": new_ids, "logprobs": None,
                                "finish_reason": finish}]}
            if extra:
                obj.update(extra)
            return send(obj)

        while True:
            if kind == "tokens":
                ids += val
                full = _decode(tok, ids)
                if full.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the rest
                    delta = ""
                else:
                    delta, sent_text = full[len(sent_text):], full
                chunk(delta, val)
            elif kind == "done":
                final = val["text"]
                tail = final[len(sent_text):] if final.startswith(sent_text) else ""
                usage, metrics = self._final_fields(job, val)
                chunk(tail, [], _finish(val["finish_reason"]), {"usage": usage, "metrics": metrics})
                send_done = alive
                if send_done:
                    try:
                        self.wfile.write(b"data: [DONE]\n\n")
                        self.wfile.flush()
                    except OSError:
                        pass
                return
            elif kind == "error":
                send({"error": {"message": val, "type": "server_error", "code": 500}})
                return
            kind, val = job.events.get()


def _finish(reason: str) -> str:
    return {"eos": "stop", "stop": "stop", "length": "length"}.get(reason, reason)


def start_server(backend, drafter: Optional[str] = None, D: int = 3, host: str = "127.0.0.1", port: int = 0,
                 model_name: str = "draftwise", max_batch_size: int = 8, batch_wait_ms: float = 5.0):
    """Start the server in a background thread; returns (server, service). ``port=0`` picks a free port
    (``server.server_address[1]``). Stop with ``server.shutdown(); service.close()``."""
    service = CompletionService(backend, drafter, D, model_name, max_batch_size, batch_wait_ms)
    handler = type("BoundHandler", (Handler,), {"service": service})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="draftwise-serve-http", daemon=True).start()
    return server, service


def main_serve(args) -> int:
    from pathlib import Path

    from draftwise.bench.runner import EngineBackend

    backend = EngineBackend(args.target, dtype=args.dtype)
    if args.drafter:
        backend.drafter(args.drafter, args.D)  # build now: fail before listening
    name = args.model_name or Path(args.target).name
    server, service = start_server(backend, args.drafter, args.D, args.host, args.port, name,
                                   args.max_batch_size, args.batch_wait_ms)
    host, port = server.server_address[:2]
    print(f"draftwise serve: model {name!r} (drafter {args.drafter or 'none'}, D={service.D}) on "
          f"http://{host}:{port}/v1/completions", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        service.close()
    return 0
