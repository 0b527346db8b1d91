#!/usr/bin/env python3
"""Record real request/response exchanges of a running server as test fixtures.

usage: scripts/record-fixtures.py FAMILY PORT OUTDIR [--api-key-port PORT2]
  FAMILY  sglang | vllm | vllm-ngram | llama-cpp-python | llama-server | transformers | litellm | dynamo
  PORT2   the same server family started with `--api-key secret`, for the 401 answer
  litellm: the proxy's master key is read from LITELLM_MASTER_KEY (sent as a Bearer token)

Writes one JSON file per exchange: {"request": {...}, "response": {"status", "headers",
"body" (JSON) or "body_text" (raw, e.g. an SSE stream cut to its first events and its end)}}.
Long token-id prompts are stored as {"ids_len": N, "first": [...]} so fixtures stay small.
Standard library only; talks to 127.0.0.1 only.
"""
import http.client
import json
import os
import sys
import threading
import time

KEEP_HEADERS = ("content-type", "www-authenticate", "transfer-encoding", "content-length", "x-litellm-version")


def request(port, method, path, body=None, headers=None, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
    r = c.getresponse()
    raw = r.read().decode("utf-8", "replace")
    hdrs = {k.lower(): v for k, v in r.getheaders() if k.lower() in KEEP_HEADERS}
    c.close()
    return r.status, hdrs, raw


def shrink(body):
    """Token-id lists longer than 64 become a length and their first ids."""
    if isinstance(body, dict):
        return {k: shrink(v) for k, v in body.items()}
    if isinstance(body, list) and len(body) > 64 and all(isinstance(x, int) for x in body):
        return {"ids_len": len(body), "first": body[:16]}
    return body


def cut_sse(raw, head=4, tail=3):
    """The first `head` events and the last `tail` (the final record, usage, [DONE])."""
    events = [e for e in raw.split("\n\n") if e.strip()]
    if len(events) <= head + tail:
        return raw
    kept = events[:head] + [f": ctxbench fixture: {len(events) - head - tail} events cut"] + events[-tail:]
    return "\n\n".join(kept) + "\n\n"


class Recorder:
    def __init__(self, port, outdir):
        self.port, self.outdir = port, outdir
        # Sent with every request unless a request names its own (LiteLLM's Bearer key).
        self.headers = {}
        os.makedirs(outdir, exist_ok=True)

    def save(self, name, method, path, body, status, hdrs, raw, stream=False, note=None, sent_headers=None):
        rec = {"request": {"method": method, "path": path}}
        if sent_headers:
            rec["request"]["headers"] = sent_headers
        if body is not None:
            rec["request"]["body"] = shrink(body)
        resp = {"status": status, "headers": hdrs}
        if stream:
            resp["body_text"] = cut_sse(raw)
        else:
            try:
                resp["body"] = shrink(json.loads(raw))
            except ValueError:
                resp["body_text"] = raw[:4000]
        rec["response"] = resp
        if note:
            rec["note"] = note
        with open(os.path.join(self.outdir, name + ".json"), "w") as f:
            json.dump(rec, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"{name}: {method} {path} -> {status}", file=sys.stderr)
        return status, raw

    def x(self, name, method, path, body=None, stream=False, headers=None, port=None, note=None):
        if headers is None:
            headers = self.headers
        status, hdrs, raw = request(port or self.port, method, path, body, headers)
        return self.save(name, method, path, body, status, hdrs, raw, stream, note, headers)

    def metrics(self, name, prefixes, limit=80):
        status, hdrs, raw = request(self.port, "GET", "/metrics", headers=self.headers)
        lines = [l for l in raw.splitlines() if any(l.startswith(p) or l.startswith("# HELP " + p) or l.startswith("# TYPE " + p) for p in prefixes)]
        rec = {"request": {"method": "GET", "path": "/metrics"},
               "response": {"status": status, "headers": hdrs, "body_text": "\n".join(lines[:limit]) + "\n"},
               "note": f"excerpt: lines of {prefixes}, at most {limit}"}
        with open(os.path.join(self.outdir, name + ".json"), "w") as f:
            json.dump(rec, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"{name}: GET /metrics -> {status}", file=sys.stderr)

    def busy(self, name, method, path, body, long_req, note):
        """Sends `long_req` (method, path, body) in a thread, then the request under test while
        the first is running."""
        done = threading.Event()

        def run():
            try:
                request(self.port, *long_req)
            finally:
                done.set()

        t = threading.Thread(target=run)
        t.start()
        time.sleep(1.0)
        assert not done.is_set(), "the long request ended before the busy request was sent"
        out = self.x(name, method, path, body, note=note)
        t.join()
        return out


def ids(n, start=100):
    """A token-id prompt of n ids cycling through a small range (BOS left to the server)."""
    return [start + (i * 7) % 200 for i in range(n)]


def sglang(r, key_port):
    r.x("models", "GET", "/v1/models")
    r.x("version", "GET", "/version")
    r.x("server_info", "GET", "/server_info")
    r.x("get_server_info", "GET", "/get_server_info")
    r.x("model_info", "GET", "/model_info")
    r.x("tokenize", "POST", "/tokenize", {"prompt": "The license is granted."})
    gen = {"input_ids": ids(32), "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    r.x("generate", "POST", "/generate", gen)
    r.x("generate_stream", "POST", "/generate", dict(gen, stream=True), stream=True)
    r.x("generate_stream_repeat", "POST", "/generate", dict(gen, stream=True), stream=True,
        note="the same prompt again: meta_info.cached_tokens counts the radix-cache hit")
    comp = {"model": "tiny-llama", "prompt": ids(32), "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    r.x("completions", "POST", "/v1/completions", comp)
    r.x("completions_stream", "POST", "/v1/completions",
        dict(comp, stream=True, stream_options={"include_usage": True}), stream=True)
    r.x("completions_wrong_model", "POST", "/v1/completions", dict(comp, model="no-such-model"))
    r.x("flush_cache_idle", "POST", "/flush_cache")
    long_req = ("POST", "/generate", {"input_ids": ids(4000), "sampling_params": {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True}})
    r.busy("flush_cache_busy", "POST", "/flush_cache", None, long_req,
           "sent while a 4000-token /generate with 400 new tokens was running")
    r.x("generate_context_exceeded", "POST", "/generate",
        {"input_ids": ids(70000), "sampling_params": {"max_new_tokens": 8}})
    r.x("completions_context_exceeded", "POST", "/v1/completions", dict(comp, prompt=ids(70000)))
    r.metrics("metrics", ["sglang:prompt_tokens_total", "sglang:generation_tokens_total",
                          "sglang:cached_tokens_total", "sglang:num_requests_total",
                          "sglang:prefill_effective_tokens_total", "sglang:cache_hit_rate",
                          "sglang:num_running_reqs", "sglang:token_usage", "sglang:max_total_num_tokens",
                          "sglang:gen_throughput", "sglang:spec_"])
    if key_port:
        r.x("unauthorized_models", "GET", "/v1/models", port=key_port, note="server started with --api-key; no key sent")
        r.x("unauthorized_generate", "POST", "/generate", gen, port=key_port, note="server started with --api-key; no key sent")
        r.x("unauthorized_server_info", "GET", "/server_info", port=key_port, note="server started with --api-key; no key sent")


def vllm(r, key_port, ngram=False):
    comp = {"model": "tiny-llama", "prompt": ids(32), "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    if ngram:
        # Repetitive prompt: the n-gram proposer finds drafts in it.
        rep = {"model": "tiny-llama", "prompt": [100, 101, 102, 103] * 8, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        r.x("completions_ngram", "POST", "/v1/completions", rep)
        r.x("completions_ngram_stream", "POST", "/v1/completions", dict(rep, stream=True, stream_options={"include_usage": True}), stream=True)
        r.metrics("metrics_ngram", ["vllm:spec_decode", "vllm:generation_tokens", "vllm:prompt_tokens"])
        return
    r.x("models", "GET", "/v1/models")
    r.x("version", "GET", "/version")
    r.x("server_info", "GET", "/server_info", note="vLLM answers this too (dev mode)")
    r.x("tokenize", "POST", "/tokenize", {"model": "tiny-llama", "prompt": "The license is granted."})
    r.x("completions", "POST", "/v1/completions", comp)
    r.x("completions_stream", "POST", "/v1/completions",
        dict(comp, stream=True, stream_options={"include_usage": True}), stream=True)
    r.x("completions_stream_repeat", "POST", "/v1/completions",
        dict(comp, stream=True, stream_options={"include_usage": True}), stream=True,
        note="the same prompt again (prefix-cache hit, if the server reports it)")
    r.x("completions_wrong_model", "POST", "/v1/completions", dict(comp, model="no-such-model"))
    r.x("reset_prefix_cache_idle", "POST", "/reset_prefix_cache")
    long_req = ("POST", "/v1/completions", dict(comp, prompt=ids(4000), max_tokens=3000))
    r.busy("reset_prefix_cache_busy", "POST", "/reset_prefix_cache", None, long_req,
           "sent while a 4000-token completion with 3000 new tokens was running")
    r.x("completions_context_exceeded", "POST", "/v1/completions", dict(comp, prompt=ids(17000)))
    r.metrics("metrics", ["vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache",
                          "vllm:num_requests", "vllm:cache_config_info", "vllm:spec_decode"])
    if key_port:
        r.x("unauthorized_models", "GET", "/v1/models", port=key_port, note="server started with --api-key; no key sent")
        r.x("unauthorized_completions", "POST", "/v1/completions", comp, port=key_port, note="server started with --api-key; no key sent")


def llama_cpp_python(r, key_port):
    r.x("models", "GET", "/v1/models")
    for p in ("/props", "/metrics", "/tokenize", "/version"):
        r.x("absent" + p.replace("/", "_"), "GET", p)
    r.x("extras_tokenize", "POST", "/extras/tokenize", {"input": "The license is granted."})
    r.x("extras_detokenize", "POST", "/extras/detokenize", {"tokens": [1, 450, 19405, 338, 16896, 29889]})
    comp = {"prompt": "The license is granted to all who ask. " * 3, "max_tokens": 8, "temperature": 0}
    r.x("completions", "POST", "/v1/completions", comp)
    r.x("completions_stream", "POST", "/v1/completions",
        dict(comp, stream=True, stream_options={"include_usage": True}), stream=True)
    r.x("completions_token_ids", "POST", "/v1/completions", dict(comp, prompt=ids(32)))
    r.x("completions_context_exceeded", "POST", "/v1/completions", dict(comp, prompt="word " * 17000))
    if key_port:
        r.x("unauthorized_completions", "POST", "/v1/completions", comp, port=key_port, note="server started with --api_key; no key sent")


def llama_server(r, key_port):
    r.x("health", "GET", "/health")
    r.x("props", "GET", "/props")
    r.x("models", "GET", "/v1/models")
    r.x("tokenize", "POST", "/tokenize", {"content": "The license is granted.", "add_special": True})
    body = {"prompt": ids(32), "n_predict": 8, "temperature": 0, "ignore_eos": True, "cache_prompt": False, "stream": True}
    r.x("completion_stream", "POST", "/completion", body, stream=True)
    r.x("completion", "POST", "/completion", dict(body, stream=False))
    comp = {"prompt": ids(32), "max_tokens": 8, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    r.x("v1_completions_stream", "POST", "/v1/completions", comp, stream=True)
    r.x("slots_erase", "POST", "/slots/0?action=erase")
    r.x("completion_context_exceeded", "POST", "/completion", {"prompt": ids(40000), "n_predict": 8})
    r.metrics("metrics", ["llamacpp:"], limit=120)
    if key_port:
        r.x("unauthorized_props", "GET", "/props", port=key_port, note="server started with --api-key; no key sent")
        r.x("unauthorized_completion", "POST", "/completion", dict(body, stream=False), port=key_port,
            note="server started with --api-key; no key sent")


# Optional request fields ctxbench may send, each tried alone on top of a plain request: does
# the server take it, ignore it, or refuse it?
OPTIONAL_FIELDS = [
    ("ignore_eos", True),
    ("stream_options", {"include_usage": True}),
    ("seed", 1),
    ("min_tokens", 2),
    ("max_completion_tokens", 8),
    ("cache_prompt", False),
]


# New tokens of the short streams recorded whole (no events cut).
SHORT = 3


def transformers(r, key_port):
    status, raw = r.x("models", "GET", "/v1/models")
    model = json.loads(raw)["data"][0]["id"]
    r.x("health", "GET", "/health")
    for p in ("/props", "/metrics", "/tokenize", "/v1/tokenize", "/extras/tokenize", "/version", "/server_info"):
        r.x("absent" + p.replace("/", "_"), "GET" if p in ("/props", "/metrics", "/version", "/server_info") else "POST", p,
            None if p in ("/props", "/metrics", "/version", "/server_info") else {"prompt": "The license"})
    text = "The license is granted to all who ask. " * 3
    comp = {"model": model, "prompt": text, "max_tokens": 8, "temperature": 0}
    chat = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 8, "temperature": 0}
    r.x("completions", "POST", "/v1/completions", comp)
    # Short streams (SHORT tokens) are kept whole.
    r.x("completions_stream", "POST", "/v1/completions", dict(comp, max_tokens=SHORT, stream=True), stream=True,
        note="no stream_options: usage comes on the last chunk anyway; the stream ends without data: [DONE]")
    r.x("completions_stream_include_usage", "POST", "/v1/completions",
        dict(comp, max_tokens=SHORT, stream=True, stream_options={"include_usage": True}), stream=True)
    r.x("chat_completions", "POST", "/v1/chat/completions", chat,
        note="the tiny model's chat template: '{{ bos_token }}' + 'role: content\\n' per message + 'assistant:'")
    r.x("chat_completions_stream", "POST", "/v1/chat/completions", dict(chat, max_tokens=SHORT, stream=True),
        stream=True, note="no stream_options: usage comes on the last chunk anyway; the stream ends without data: [DONE]")
    r.x("chat_completions_stream_include_usage", "POST", "/v1/chat/completions",
        dict(chat, max_tokens=SHORT, stream=True, stream_options={"include_usage": True}), stream=True)
    r.x("completions_token_ids", "POST", "/v1/completions", dict(comp, prompt=ids(32)))
    r.x("completions_no_model", "POST", "/v1/completions", {k: v for k, v in comp.items() if k != "model"},
        note="no model field: the pinned model answers")
    r.x("completions_wrong_model", "POST", "/v1/completions", dict(comp, model="no-such-model"))
    for field, value in OPTIONAL_FIELDS:
        r.x("completions_field_" + field, "POST", "/v1/completions", dict(comp, **{field: value}),
            note=f"a plain request plus {field} alone")
        r.x("chat_completions_field_" + field, "POST", "/v1/chat/completions", dict(chat, **{field: value}),
            note=f"a plain request plus {field} alone")
    r.x("completions_fields_refused_together", "POST", "/v1/completions",
        dict(comp, ignore_eos=True, cache_prompt=False, min_tokens=1, stream=True,
             stream_options={"include_usage": True}),
        note="the 422 names every refused field as a Python set: their order varies from run to run")
    chat_mct = {k: v for k, v in chat.items() if k != "max_tokens"}
    r.x("chat_completions_max_completion_tokens_only", "POST", "/v1/chat/completions",
        dict(chat_mct, max_completion_tokens=3), note="max_completion_tokens without max_tokens: does it limit the output?")


def litellm(r, key_port):
    key = os.environ.get("LITELLM_MASTER_KEY", "sk-ctxbench")
    r.headers = {"Authorization": "Bearer " + key}
    r.x("health_liveliness", "GET", "/health/liveliness", headers={})
    r.x("models", "GET", "/v1/models")
    r.x("model_info", "GET", "/v1/model/info", note="LiteLLM's own model listing (max_input_tokens, if it knows any)")
    for p in ("/props", "/metrics", "/version", "/server_info"):
        r.x("absent" + p.replace("/", "_"), "GET", p)
    for p in ("/tokenize", "/v1/tokenize", "/extras/tokenize"):
        r.x("absent" + p.replace("/", "_"), "POST", p, {"prompt": "The license", "content": "The license"})
    r.x("utils_token_counter", "POST", "/utils/token_counter", {"model": "tiny", "prompt": "The license is granted."},
        note="a local estimate, not the upstream's tokenizer (llama-server counts 8 with BOS)")
    comp = {"model": "tiny", "prompt": ids(32), "max_tokens": 8, "temperature": 0}
    r.x("completions_token_ids", "POST", "/v1/completions", comp,
        note="token ids passed through to llama-server; its timings are kept when not streamed")
    r.x("completions_token_ids_repeat", "POST", "/v1/completions", comp,
        note="the same prompt again: llama-server's prompt cache; cached_tokens passed through")
    r.x("completions_token_ids_other_start", "POST", "/v1/completions", dict(comp, prompt=ids(32, start=300)),
        note="a prompt that shares no token with the one before (llama-server adds no BOS to token ids): cached_tokens 0")
    r.x("completions_token_ids_bos_a", "POST", "/v1/completions", dict(comp, prompt=[1] + ids(31, start=1100)),
        note="BOS (id 1) sent as the first id")
    r.x("completions_token_ids_bos_b", "POST", "/v1/completions", dict(comp, prompt=[1] + ids(31, start=1400)),
        note="shares only the BOS with the prompt before: the cached_tokens of a cold prompt")
    r.x("completions_stream", "POST", "/v1/completions",
        dict(comp, prompt=ids(32, start=500), max_tokens=SHORT, stream=True), stream=True, note="no stream_options")
    r.x("completions_stream_include_usage", "POST", "/v1/completions",
        dict(comp, prompt=ids(32, start=700), max_tokens=SHORT, stream=True, stream_options={"include_usage": True}),
        stream=True)
    text = "The license is granted to all who ask. " * 3
    r.x("completions_text", "POST", "/v1/completions", dict(comp, prompt=text))
    chat = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 8, "temperature": 0}
    r.x("chat_completions_stream", "POST", "/v1/chat/completions", dict(chat, max_tokens=SHORT, stream=True),
        stream=True, note="no stream_options")
    r.x("chat_completions_stream_include_usage", "POST", "/v1/chat/completions",
        dict(chat, max_tokens=SHORT, stream=True, stream_options={"include_usage": True}), stream=True)
    for field, value in OPTIONAL_FIELDS:
        r.x("completions_field_" + field, "POST", "/v1/completions",
            dict(comp, prompt=ids(32, start=900), **{field: value}), note=f"a plain request plus {field} alone")
    r.x("completions_wrong_model", "POST", "/v1/completions", dict(comp, model="no-such-model"))
    r.x("completions_context_exceeded", "POST", "/v1/completions", dict(comp, prompt=ids(17000)),
        note="the upstream llama-server runs with -c 16384")
    r.x("unauthorized_wrong_key", "POST", "/v1/completions", comp, headers={"Authorization": "Bearer sk-wrong-key"},
        note="a wrong key: no database, so never 401")
    r.x("unauthorized_no_key", "POST", "/v1/completions", comp, headers={}, note="no Authorization header")
    r.x("unauthorized_models_wrong_key", "GET", "/v1/models", headers={"Authorization": "Bearer sk-wrong-key"})


def dynamo(r, key_port):
    # No API key option. The mocker engine generates random tokens; its context is 8192
    # (scripts/real-server dynamo: --max-model-len 8192) and it caches whole 64-token blocks.
    r.x("health", "GET", "/health", note="lists the worker instances (device_type cuda even for the mocker on CPU)")
    r.x("models", "GET", "/v1/models", note="context_window: the engine's --max-model-len (0 when it states none)")
    for p in ("/props", "/version", "/server_info", "/slots", "/get_server_info", "/info", "/api/version"):
        r.x("absent" + p.replace("/", "_"), "GET", p, note="not this server's path: 404 Route not found")
    for p in ("/tokenize", "/v1/tokenize", "/extras/tokenize", "/flush_cache", "/reset_prefix_cache"):
        r.x("absent" + p.replace("/", "_"), "POST", p, {"prompt": "The license", "content": "The license"},
            note="not this server's path: 404 Route not found")
    comp = {"model": "smollm2", "prompt": ids(32), "max_tokens": 8, "temperature": 0}
    r.x("completions_token_ids", "POST", "/v1/completions", comp, note="token ids taken as ids: prompt_tokens 32")
    text = "The license is granted to all who ask. " * 20
    r.x("completions_text", "POST", "/v1/completions", dict(comp, prompt=text))
    r.x("completions_text_repeat", "POST", "/v1/completions", dict(comp, prompt=text),
        note="the same prompt again: cached_tokens in whole 64-token blocks")
    r.x("completions_stream", "POST", "/v1/completions",
        dict(comp, prompt=ids(32, start=500), max_tokens=SHORT, stream=True), stream=True,
        note="no stream_options: usage null in every chunk")
    r.x("completions_stream_include_usage", "POST", "/v1/completions",
        dict(comp, prompt=ids(32, start=700), max_tokens=SHORT, stream=True, stream_options={"include_usage": True}),
        stream=True, note="a last chunk with choices [] and usage")
    chat = {"model": "smollm2", "messages": [{"role": "user", "content": text}], "max_tokens": 8, "temperature": 0}
    r.x("chat_completions_stream", "POST", "/v1/chat/completions", dict(chat, max_tokens=SHORT, stream=True),
        stream=True, note="no stream_options")
    r.x("chat_completions_stream_include_usage", "POST", "/v1/chat/completions",
        dict(chat, max_tokens=SHORT, stream=True, stream_options={"include_usage": True}), stream=True)
    r.x("completions_no_model", "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 4},
        note="model is required")
    r.x("completions_wrong_model", "POST", "/v1/completions", dict(comp, model="no-such-model"))
    r.x("completions_context_exceeded", "POST", "/v1/completions", dict(comp, prompt=ids(9001)),
        note="the mocker runs with --max-model-len 8192: the engine's refusal becomes a 500 without its reason")
    r.x("completions_stream_context_exceeded", "POST", "/v1/completions",
        dict(comp, prompt=ids(9001), stream=True, stream_options={"include_usage": True}), stream=True,
        note="streamed: a 200, then an error event")
    # After the requests: the counters have moved. Gauges and counters only (no histogram
    # buckets), which is what ctxbench reads.
    r.metrics("metrics", tuple(f"dynamo_frontend_{n}" for n in (
        "model_", "inflight_requests", "queued_requests", "active_requests", "requests_total",
        "requests_started_total", "output_tokens_total", "cached_tokens_sum", "cached_tokens_count",
        "input_sequence_tokens_sum", "input_sequence_tokens_count")), limit=200)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    family, port, outdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    key_port = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--api-key-port" else None
    r = Recorder(port, outdir)
    {"sglang": sglang, "vllm": vllm, "llama-cpp-python": llama_cpp_python, "llama-server": llama_server,
     "vllm-ngram": lambda r, k: vllm(r, k, ngram=True), "transformers": transformers,
     "litellm": litellm, "dynamo": dynamo}[family](r, key_port)


if __name__ == "__main__":
    main()
