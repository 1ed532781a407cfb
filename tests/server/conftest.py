"""Fixtures for the server suite: a test checkpoint, and the real `grimoire serve` binary on a free port.

The checkpoint is stories260K (../shared/data/models/stories260K, a real trained tiny Llama) converted with
tools/convert_llama2c.py into a temp dir, with the official Qwen3 chat template (from
../shared/data/tokenizers/qwen3) put in its tokenizer_config.json: the template renders tools, <think> and
<tool_call>, so every server path runs, while the 260K-parameter model keeps each request to milliseconds.
GRIMOIRE_TEST_MODEL=DIR serves another checkpoint instead.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GRIMOIRE_SHARED", ROOT.parent / "shared"))
MODEL_NAME = "test-model"
ALIAS = "test-alias"
CTX = 1024
MAX_BODY = 65536


def grimoire_bin():
    b = os.environ.get("GRIMOIRE_BIN")
    if b:
        return b
    for p in (ROOT / "build/cpu/grimoire", ROOT / "build/server/grimoire"):
        if p.exists():
            return str(p)
    pytest.fail("GRIMOIRE_BIN is not set and no built grimoire binary was found")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    if os.environ.get("GRIMOIRE_TEST_MODEL"):
        return Path(os.environ["GRIMOIRE_TEST_MODEL"])
    return make_checkpoint(tmp_path_factory.mktemp("stories260K"))


def make_checkpoint(out, template_file=None):
    """stories260K converted into `out`, with the Qwen3 template, or `template_file` as chat_template.jinja."""
    src = SHARED / "data/models/stories260K"
    subprocess.run([sys.executable, str(ROOT / "tools/convert_llama2c.py"), str(src / "stories260K.bin"),
                    str(src / "tok512.bin"), str(out)], check=True, capture_output=True)
    qwen3 = json.loads((SHARED / "data/tokenizers/qwen3/tokenizer_config.json").read_text())
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = qwen3["chat_template"]
    cfg_path.write_text(json.dumps(cfg))
    if template_file:
        shutil.copy(template_file, out / "chat_template.jinja")
    return out


class Server:
    def __init__(self, model_dir, extra_args=(), env=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [grimoire_bin(), "serve", "--model", str(model_dir), "--port", str(self.port), "--device", "cpu",
                "--served-model-name", MODEL_NAME, ALIAS, "--ctx", str(CTX), "--max-body-bytes", str(MAX_BODY),
                *extra_args]
        self.log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"grimoire-serve-{self.port}.log", "w+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"grimoire serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if requests.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("grimoire serve did not become healthy:\n" + self.output())

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def terminate(self, timeout=30):
        """SIGTERM; returns the exit code (the drain must finish within `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def metrics(self):
        """The /metrics text as {series: value}."""
        out = {}
        for line in requests.get(self.base + "/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out


@pytest.fixture(scope="session")
def server(checkpoint):
    s = Server(checkpoint)
    yield s
    code = s.terminate()
    assert code == 0, s.output()


@pytest.fixture(scope="session")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


def sse_events(resp):
    """The JSON payloads of an SSE response, checking the framing; the [DONE] marker must come last."""
    events, done = [], False
    for line in resp.iter_lines(decode_unicode=True):
        if not line or line.startswith(":"):
            continue
        assert line.startswith("data: "), line
        assert not done, "data after [DONE]"
        payload = line[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        events.append(json.loads(payload))
    assert done, "stream did not end with data: [DONE]"
    return events
