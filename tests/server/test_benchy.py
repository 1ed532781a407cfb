"""llama-benchy (pinned in tests/requirements.txt) runs a short sweep against the server, offline: the
tokenizer is the checkpoint's tokenizer.json and the "book" is pre-seeded in llama-benchy's cache (it would
otherwise download one), so no network is touched.

The server here runs the bundled demo model (models/demo, 12.8M parameters), not the session's stories260K: tg is a
rate between chunk arrival times, and stories260K writes its 200 tokens in a few milliseconds, so on a loaded
2-core CI machine the HTTP thread could wake once after the engine had finished and send the whole stream in one
write, leaving llama-benchy no decode time to divide by (CI failed on it twice). The demo model takes a few
milliseconds per token, so the stream arrives over time as it does from a real model."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from conftest import MODEL_NAME, ROOT, SHARED, Server

BOOK_URL = "http://offline.invalid/book.txt"


def book_text():
    # Real prose: the first part of the Gutenberg corpus in ../shared (zstd), else the stories model's own text.
    corpus = SHARED / "data/corpus/gutenberg-150M.txt.zst"
    try:
        out = subprocess.run(f"zstd -dc '{corpus}' | head -c 400000", shell=True, check=True,
                             capture_output=True).stdout.decode("utf-8", "ignore")
        if len(out) > 100000:
            return out
    except (subprocess.CalledProcessError, FileNotFoundError):
        pass
    return " ".join(f"Once upon a time there was a little cat number {i} who liked to play." for i in range(5000))


DEMO = ROOT / "models/demo"


@pytest.fixture(scope="module")
def demo_server():
    s = Server(DEMO)
    yield s
    assert s.terminate() == 0, s.output()


def test_llama_benchy_sweep(demo_server, tmp_path):
    pytest.importorskip("llama_benchy")
    home = tmp_path / "home"
    cache = home / ".cache/llama-benchy"
    cache.mkdir(parents=True)
    (cache / (hashlib.md5(BOOK_URL.encode()).hexdigest() + ".txt")).write_text(book_text())
    out = tmp_path / "bench.json"
    env = {**os.environ, "HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "llama_benchy", "--base-url", demo_server.base + "/v1", "--model", MODEL_NAME,
           "--tokenizer", str(DEMO / "tokenizer.json"), "--book-url", BOOK_URL, "--pp", "64", "128",
           "--tg", "200", "--runs", "2", "--skip-coherence", "--exact-tg",
           # Loopback: no network latency to subtract. Its estimate (a /v1/models round trip) can exceed the tiny
           # model's whole prefill on a loaded machine, which leaves pp unreported.
           "--latency-mode", "none", "--format", "json", "--save-result", str(out),
           "--exit-on-first-fail"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Error" not in r.stdout, r.stdout
    data = json.loads(out.read_text())
    runs = data["benchmarks"]
    assert {(r["prompt_size"], r["response_size"]) for r in runs} == {(64, 200), (128, 200)}
    for r in runs:
        # pp and tg are both reported, as positive rates.
        assert r["pp_throughput"] and r["tg_throughput"], r
        assert r["pp_throughput"]["mean"] > 0 and r["tg_throughput"]["mean"] > 0, r
        assert r["e2e_ttft"]["mean"] > 0
