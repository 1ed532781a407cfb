"""Concurrency, cancellation on disconnect, metrics, and SIGTERM draining."""
import concurrent.futures as cf
import json
import socket
import threading
import time

import requests

from conftest import MODEL_NAME, Server

STORY = [{"role": "user", "content": "Tell me a story about a dog."}]


def wait_until(cond, timeout=20, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return False


def test_eight_concurrent_clients_all_complete(server):
    body = {"model": MODEL_NAME, "max_tokens": 40, "temperature": 0, "ignore_eos": True}

    def one(i):
        b = dict(body, messages=[{"role": "user", "content": f"Story number {i}."}])
        if i % 2:
            b["stream"] = True
            r = requests.post(server.base + "/v1/chat/completions", json=b, stream=True, timeout=120)
            text = ""
            for line in r.iter_lines(decode_unicode=True):
                if line.startswith("data: ") and line != "data: [DONE]":
                    text += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            return r.status_code, text
        r = requests.post(server.base + "/v1/chat/completions", json=b, timeout=120)
        return r.status_code, r.json()["choices"][0]["message"]["content"]

    with cf.ThreadPoolExecutor(8) as ex:
        futures = [ex.submit(one, i) for i in range(8)]
        # The server answers probes while the requests queue.
        assert requests.get(server.base + "/health", timeout=10).status_code == 200
        results = [f.result() for f in futures]
    assert all(status == 200 for status, _ in results)
    assert all(text for _, text in results)
    # Queued requests ran alone on the engine: each equals the same request made on its own.
    for i in (0, 1):
        alone = requests.post(server.base + "/v1/chat/completions", timeout=60, json=dict(
            body, messages=[{"role": "user", "content": f"Story number {i}."}])).json()
        assert alone["choices"][0]["message"]["content"] == results[i][1]


def read_first_event(sock):
    buf = b""
    while b"data: " not in buf:
        chunk = sock.recv(4096)
        assert chunk, "connection closed before the first event"
        buf += chunk
    return buf


def start_stream(server, max_tokens):
    body = json.dumps({"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def test_disconnect_cancels_generation(server):
    before = server.metrics()
    max_tokens = 1000
    s = start_stream(server, max_tokens)
    read_first_event(s)
    s.close()
    cancelled = before["grimoire_cancelled_requests_total"] + 1
    assert wait_until(lambda: server.metrics()["grimoire_cancelled_requests_total"] == cancelled)
    assert wait_until(lambda: server.metrics()["grimoire_requests_running"] == 0)
    after = server.metrics()
    sampled = after["grimoire_engine_tokens_total"] - before["grimoire_engine_tokens_total"]
    assert 1 <= sampled < max_tokens


def test_queued_client_can_leave(server):
    # One long request holds the engine; a second waits in the queue, then its client leaves: it is dropped
    # without being generated, and the first completes.
    before = server.metrics()
    first = start_stream(server, 1000)
    read_first_event(first)
    second = start_stream(server, 1000)
    assert wait_until(lambda: server.metrics()["grimoire_queue_depth"] == 1, 5)
    second.close()
    first_bytes = b""
    while b"[DONE]" not in first_bytes:
        chunk = first.recv(65536)
        if not chunk:
            break
        first_bytes += chunk
    first.close()
    assert b"[DONE]" in first_bytes
    cancelled = before["grimoire_cancelled_requests_total"] + 1
    assert wait_until(lambda: server.metrics()["grimoire_cancelled_requests_total"] == cancelled)
    assert wait_until(lambda: server.metrics()["grimoire_requests_running"] == 0)
    after = server.metrics()
    assert after["grimoire_queue_depth"] == 0
    # The second request was dropped (in the queue, or within its first steps if the first had finished).
    assert 1000 <= after["grimoire_engine_tokens_total"] - before["grimoire_engine_tokens_total"] < 2000


def test_metrics_move(server):
    before = server.metrics()
    key = 'grimoire_requests_total{route="chat_completions",status="200"}'
    bad = 'grimoire_requests_total{route="chat_completions",status="400"}'
    r = requests.post(server.base + "/v1/chat/completions", timeout=30,
                      json={"messages": STORY, "max_tokens": 5, "ignore_eos": True}).json()
    requests.post(server.base + "/v1/chat/completions", json={"messages": []}, timeout=30)
    after = server.metrics()
    assert after[key] == before.get(key, 0) + 1
    assert after[bad] == before.get(bad, 0) + 1
    assert after["grimoire_prompt_tokens_total"] - before["grimoire_prompt_tokens_total"] == r["usage"]["prompt_tokens"]
    assert after["grimoire_generation_tokens_total"] - before["grimoire_generation_tokens_total"] == 5
    ttft = "grimoire_time_to_first_token_seconds_count"
    itl = "grimoire_inter_token_latency_seconds_count"
    assert after[ttft] == before[ttft] + 1
    assert after[itl] == before[itl] + 4
    assert after['grimoire_time_to_first_token_seconds_bucket{le="+Inf"}'] == after[ttft]
    text = requests.get(server.base + "/metrics", timeout=5).text
    assert "# TYPE grimoire_time_to_first_token_seconds histogram" in text
    assert "# TYPE grimoire_queue_depth gauge" in text


def test_sigterm_drains_and_exits_0(checkpoint):
    s = Server(checkpoint)
    result = {}

    # The tiny test model writes these tokens in ~0.1-0.3 s: long enough to be caught running only when the
    # metrics are polled every few milliseconds (at 50 ms the request was sometimes over between two polls).
    def long_request():
        r = requests.post(s.base + "/v1/completions", timeout=60,
                          json={"prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": True})
        result["status"], result["body"] = r.status_code, r.json()

    t = threading.Thread(target=long_request)
    t.start()
    assert wait_until(lambda: s.metrics()["grimoire_requests_running"] == 1, 10, interval=0.002)
    t0 = time.time()
    code = s.terminate(timeout=30)
    t.join(30)
    assert code == 0, s.output()
    assert time.time() - t0 < 15
    # The in-flight request finished inside the drain window.
    assert result["status"] == 200 and result["body"]["usage"]["completion_tokens"] == 1000
    assert "draining" in s.output()
