#!/usr/bin/env python3
"""Anchor for bench_chat_template: Python jinja2 (configured as transformers configures it) rendering every
shared template over tests/templates/cases.json. Prints mean microseconds per render (template compiled once).

    python3 bench/bench_chat_template.py [REPS [TEMPLATES_DIR CASES_JSON]]
"""
import glob
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import render_template_reference as ref  # noqa: E402


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    tdir = sys.argv[2] if len(sys.argv) > 3 else os.path.join(ROOT, "..", "shared", "data", "templates")
    cases_path = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "tests", "templates", "cases.json")
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    contexts = []
    for c in cases:
        ctx = {k: v for k, v in c.items() if k != "name"}
        ctx.setdefault("bos_token", "<s>")
        ctx.setdefault("eos_token", "</s>")
        contexts.append(ctx)
    files = sorted(glob.glob(os.path.join(tdir, "*.jinja")))
    total, n = 0.0, 0
    for path in files:
        source = ref.load_template(path)
        compiled = ref.make_environment().from_string(source)
        t0 = time.perf_counter()
        for _ in range(reps):
            for ctx in contexts:
                try:
                    ref.render(source, ctx, compiled)
                except Exception:  # noqa: BLE001 - some cases raise by design, timed all the same
                    pass
                n += 1
        total += time.perf_counter() - t0
    print(json.dumps({"templates": len(files), "cases": len(contexts), "reps": reps,
                      "mean_us_per_render": total / n * 1e6}))


if __name__ == "__main__":
    main()
