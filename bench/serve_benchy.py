#!/usr/bin/env python3
"""Served throughput with llama-benchy 0.4.0 against `grimoire serve`, offline.

Starts the server on a checkpoint (default: stories260K converted into a temp dir with the Qwen3 chat template,
as the pytest suite does), seeds llama-benchy's book cache with real prose from ../shared (so it downloads
nothing) and points --tokenizer at the checkpoint's tokenizer.json. Writes bench/results/<name>.json in the
project's format. The anchor is the engine's own decode rate from the server's /metrics (1 / mean inter-token
latency) during the same run: served tg / engine tg shows what HTTP + SSE + parsing cost.

  python3 bench/serve_benchy.py [--bin build/cpu/grimoire] [--model DIR] [--pp 128 512] [--tg 32] [--runs 3]
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/server"))
import conftest  # noqa: E402  (the suite's checkpoint and server helpers)
from test_benchy import BOOK_URL, book_text  # noqa: E402


def metric_means(server):
    m = server.metrics()
    itl = m["grimoire_inter_token_latency_seconds_sum"] / max(1, m["grimoire_inter_token_latency_seconds_count"])
    ttft = m["grimoire_time_to_first_token_seconds_sum"] / max(1, m["grimoire_time_to_first_token_seconds_count"])
    return itl, ttft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build/cpu/grimoire"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--pp", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--tg", type=int, nargs="+", default=[32])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--name", default="server_benchy_cpu")
    a = ap.parse_args()
    os.environ["GRIMOIRE_BIN"] = a.bin
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = Path(a.model) if a.model else None
        if model is None:
            model = tmp / "stories260K"
            model.mkdir()
            conftest.make_checkpoint(model)
        cache = tmp / "home/.cache/llama-benchy"
        cache.mkdir(parents=True)
        (cache / (hashlib.md5(BOOK_URL.encode()).hexdigest() + ".txt")).write_text(book_text())
        server = conftest.Server(model)
        try:
            out = tmp / "bench.json"
            cmd = [sys.executable, "-m", "llama_benchy", "--base-url", server.base + "/v1", "--model",
                   conftest.MODEL_NAME, "--tokenizer", str(model / "tokenizer.json"), "--book-url", BOOK_URL,
                   "--pp", *map(str, a.pp), "--tg", *map(str, a.tg), "--runs", str(a.runs), "--skip-coherence",
                   "--exact-tg", "--format", "json", "--save-result", str(out)]
            subprocess.run(cmd, check=True, env={**os.environ, "HOME": str(tmp / "home"), "HF_HUB_OFFLINE": "1"})
            itl, ttft = metric_means(server)
            report = json.loads(out.read_text())
        finally:
            server.terminate()
    metrics, ratios = {}, {}
    engine_tg = 1.0 / itl if itl > 0 else 0.0
    metrics["engine_decode_tok_per_s"] = round(engine_tg, 2)
    metrics["server_mean_ttft_ms"] = round(ttft * 1000, 3)
    for r in report["benchmarks"]:
        key = f"pp{r['prompt_size']}_tg{r['response_size']}"
        metrics[key + "_pp_tok_per_s"] = round(r["pp_throughput"]["mean"], 2)
        metrics[key + "_tg_tok_per_s"] = round(r["tg_throughput"]["mean"], 2)
        metrics[key + "_e2e_ttft_ms"] = round(r["e2e_ttft"]["mean"], 3)
        if engine_tg:
            ratios[key + "_served_tg_over_engine_tg"] = round(r["tg_throughput"]["mean"] / engine_tg, 3)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"date": datetime.date.today().isoformat(), "commit": commit,
              "card": platform.processor() or platform.machine(), "command": " ".join(sys.argv),
              "metrics": metrics, "ratios": ratios}
    dest = ROOT / "bench/results" / f"{a.name}.json"
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
