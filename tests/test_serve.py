"""`draftwise serve` on loopback, benchmarked end to end by the server-mode client."""
import json
import socket
import threading
import time

import httpx
import pytest

from draftwise.bench._testing import FakeBackend
from draftwise.bench.client import ClientConfig, parse_prometheus, prometheus_delta, run_client
from draftwise.bench.runner import read_results
from draftwise.serve import start_server


def _engine_available():
    try:
        import draftwise

        return hasattr(draftwise, "generate")
    except Exception:  # noqa: BLE001
        return False


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(backend, tokenizer dir or None): the real engine on a tiny random Llama when it is built."""
    if not _engine_available():
        return FakeBackend(max_positions=1024), None
    import torch

    from draftwise.bench._testing import make_tiny_target
    from draftwise.bench.runner import EngineBackend

    torch.set_num_threads(1)
    path = make_tiny_target(tmp_path_factory.mktemp("tiny") / "target")
    return EngineBackend(str(path)), str(path)


@pytest.fixture
def server(tiny):
    started = []

    def start(drafter="ngram", D=3, backend=None):
        srv, svc = start_server(backend or tiny[0], drafter, D, port=0, model_name="tiny", batch_wait_ms=2)
        started.append((srv, svc))
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv, svc in started:
        srv.shutdown()
        svc.close()


def _sse(resp_text):
    out = []
    for line in resp_text.splitlines():
        if line.startswith("data: ") and line[6:] != "[DONE]":
            out.append(json.loads(line[6:]))
    return out


def test_endpoints_stream_and_errors(server, tiny):
    url = server()
    with httpx.Client(timeout=60) as c:
        models = c.get(url + "/v1/models").json()
        assert models["data"][0]["id"] == "tiny"
        assert c.get(url + "/health").status_code == 200
        body = {"model": "tiny", "prompt": [5, 6, 7, 8, 9], "max_tokens": 12, "temperature": 0, "ignore_eos": True}
        r = c.post(url + "/v1/completions", json=body)
        assert r.status_code == 200
        full = r.json()
        ids = full["choices"][0]["token_ids"]
        assert len(ids) == 12 and full["usage"]["completion_tokens"] == 12
        sd = full["metrics"]["speculative_decoding"]
        assert sd["num_drafts"] == len(sd["acceptance_lengths"])
        assert sd["num_accepted_tokens"] == sum(L - 1 for L in sd["acceptance_lengths"])
        assert sd["num_accepted_tokens_per_pos"][0] == sum(1 for L in sd["acceptance_lengths"] if L >= 2)
        r = c.post(url + "/v1/completions", json={**body, "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chunks = _sse(r.text)
        assert r.text.rstrip().endswith("data: [DONE]")
        assert [t for ch in chunks for t in ch["choices"][0]["token_ids"]] == ids  # greedy: same tokens
        assert "".join(ch["choices"][0]["text"] for ch in chunks) == full["choices"][0]["text"]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length" and "metrics" in chunks[-1]
        # errors: bad JSON, too long a prompt, bad max_tokens -> 400
        assert c.post(url + "/v1/completions", content=b"{nope").status_code == 400
        r = c.post(url + "/v1/completions", json={"prompt": [5] * 1020, "max_tokens": 10})
        assert r.status_code == 400 and "positions" in r.json()["error"]["message"]
        assert c.post(url + "/v1/completions", json={"prompt": [5], "max_tokens": 0}).status_code == 400
        prom = parse_prometheus(c.get(url + "/metrics").text)
    assert prom["vllm:spec_decode_num_drafts"] == 2 * sd["num_drafts"]
    assert prom["vllm:spec_decode_num_accepted_tokens"] == 2 * sd["num_accepted_tokens"]
    d = prometheus_delta({}, prom)
    assert d["Average_AL"] == pytest.approx(1 + sd["num_accepted_tokens"] / sd["num_drafts"])


def _dataset(tmp_path):
    p = tmp_path / "ds.jsonl"
    rows = [{"question_id": f"q{i}", "category": c, "turns": [t]} for i, (c, t) in enumerate([
        ("coding", "def add(a, b):\n    return"), ("writing", "Write a poem about the sea."),
        ("qa", "What does the with statement do in Python?"),
        ("roleplay", "KING. Come hither, fool.\nFOOL.")])]
    rows.append({"question_id": "long", "category": "rag", "turns": ["word " * 3000]})  # > 1024 positions
    rows.append({"question_id": "mt", "category": "writing", "turns": ["Write a line.", "Another one."]})
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_client_end_to_end(server, tiny, tmp_path):
    ds = _dataset(tmp_path)
    out = tmp_path / "run"
    common = dict(out=str(out), model="tiny", tokenizer=tiny[1], datasets=[str(ds)], concurrency=[1, 3],
                  max_new_tokens=8, temperature=0.0, timeout=60, retries=1, progress=False, backoff=0.01,
                  ignore_eos=True)
    base = run_client(ClientConfig(server=server(None, 0), label="none", plots=False, **common))
    spec = run_client(ClientConfig(server=server("ngram", 3), label="ngram", D=3, plots=False, **common))
    for s in (base, spec):
        assert s["ok"] == 10 and s["failed"] == 2  # the too-long prompt -> HTTP 400 at each level
    recs = [r for r in read_results(out) if r["drafter"] == "ngram"]
    failed = [r for r in recs if r.get("error")]
    assert {r["question_id"] for r in failed} == {"long"} and "HTTP 400" in failed[0]["error"]
    assert all(len(r["outputs"]) == 2 for r in recs if r["question_id"] == "mt")
    res = json.loads((out / "specbench_results.json").read_text())
    entry = res[str(ds)]["ngram"]["D=3"]["bs=3"]
    assert len(entry["Request_AL"]) == 5 and entry["Average_AL"] >= 1.0
    timing = json.loads((out / "timing.json").read_text())
    t = timing["results"][str(ds)]["ngram"]["D=3"]["bs=3"]
    assert t["num_failed"] == 1 and t["num_requests"] == 6
    assert t["timing"]["system_tps"] > 0 and t["timing"]["ttft"]["mean"] > 0
    assert t["speedup"]["system"] > 0
    if tiny[1] is not None:  # the real engine: lossless against the plain server
        assert t["lossless"]["share"] == 1.0
    # per-request acceptance agrees with the Prometheus counters of the same window
    sa = t["server_acceptance"]
    assert sa["source"] == "prometheus"
    assert sa["Average_AL"] == pytest.approx(t["aiperf"]["Token_Weighted_AL"])
    header = (out / "acceptance_length.csv").read_text().splitlines()[0]
    assert header == "Model,coding,qa,rag,roleplay,writing,Overall" or header.startswith("Model,coding")


class _Hang:
    """A TCP server that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.conns = []
        self.accepts = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepts += 1
            self.conns.append(c)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def test_client_timeout_and_server_error(server, tmp_path):
    ds = tmp_path / "d.jsonl"
    ds.write_text("".join(json.dumps({"question_id": f"q{i}", "category": "qa", "turns": ["hi"]}) + "\n"
                          for i in range(2)))
    hang = _Hang()
    try:
        t = time.time()
        s = run_client(ClientConfig(server=hang.url, out=str(tmp_path / "t"), datasets=[str(ds)], concurrency=[2],
                                    max_new_tokens=4, timeout=0.3, retries=1, backoff=0.01, progress=False,
                                    plots=False))
        assert time.time() - t < 10
    finally:
        hang.close()
    assert s == {"ok": 0, "failed": 2, "server_acceptance": {}}
    recs = read_results(tmp_path / "t")
    assert all("timed out" in r["error"] and r["error"].count(";") == 1 for r in recs)  # 2 attempts each
    # an engine failure -> HTTP 500 (retried, then counted)
    url = server("ngram", 3, backend=FakeBackend(fail_after=0))
    s = run_client(ClientConfig(server=url, out=str(tmp_path / "e"), datasets=[str(ds)], concurrency=[1],
                                max_new_tokens=4, timeout=10, retries=1, backoff=0.01, progress=False,
                                plots=False))
    assert s["failed"] == 2 and s["ok"] == 0
    assert all("HTTP 500" in r["error"] for r in read_results(tmp_path / "e"))
    timing = json.loads((tmp_path / "e" / "timing.json").read_text())
    assert timing["results"][str(ds)]["server"]["D=0"]["bs=1"]["num_failed"] == 2


def test_response_field_shapes():
    from draftwise.bench.client import acceptance_from_response

    vllm_like = {"metrics": {"speculative_decoding": {"num_drafts": 7, "num_draft_tokens": 21,
                                                       "num_accepted_tokens": 8,
                                                       "num_accepted_tokens_per_pos": [4, 3, 1]}}}
    assert acceptance_from_response(vllm_like) == {"length_counts": {1: 3, 2: 1, 3: 2, 4: 1}, "drafted": 21}
    exact = {"choices": [{"metrics": {"speculative_decoding": {"acceptance_lengths": [1, 3], "num_drafts": 2}}}]}
    assert acceptance_from_response(exact) == {"step_lengths": [1, 3]}
    sgl = {"meta_info": {"spec_accept_histogram": [3, 1, 2, 1], "spec_verify_ct": 7}}
    assert acceptance_from_response(sgl) == {"length_counts": {1: 3, 2: 1, 3: 2, 4: 1}}
    assert acceptance_from_response({"meta_info": {"spec_verify_ct": 4, "spec_accept_length": 2.5}}) == \
        {"totals": {"num_drafts": 4, "num_accepted": 6}}
    assert acceptance_from_response({"choices": [{"text": "x"}]}) is None
    text = ('# TYPE vllm:spec_decode_num_drafts counter\n'
            'vllm:spec_decode_num_drafts_total{model_name="m",engine="0"} 10.0\n'
            'vllm:spec_decode_num_drafts_total{model_name="m",engine="1"} 4.0\n'
            'vllm:spec_decode_num_drafts_created{model_name="m"} 1.7e9\n'
            'vllm:spec_decode_num_draft_tokens{model_name="m"} 42\n'
            'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 21\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 10\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 7\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"} 4\n')
    after = parse_prometheus(text)
    assert after["vllm:spec_decode_num_drafts"] == 14 and after["per_pos"] == {0: 10, 1: 7, 2: 4}
    d = prometheus_delta({"vllm:spec_decode_num_drafts": 4, "vllm:spec_decode_num_accepted_tokens": 1,
                          "vllm:spec_decode_num_draft_tokens": 12, "per_pos": {0: 1}}, after)
    assert d["Average_AL"] == pytest.approx(1 + 20 / 10) and d["Draft_Acceptance_Rate"] == pytest.approx(20 / 30)
    assert d["Acceptance_Length_Histogram"] == {1: 1, 2: 2, 3: 3, 4: 4}
    assert prometheus_delta({}, parse_prometheus("other_metric 1\n")) is None
