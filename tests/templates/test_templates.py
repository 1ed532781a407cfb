"""grimoire's Jinja interpreter renders every shared chat template byte-identically to Python jinja2.

For each template in ../shared/data/templates (and the Qwen3 tokenizer_config.json one) and each request in
cases.json, the expected text comes from jinja2 configured as transformers configures it
(tools/render_template_reference.py) and the actual text from tests/templates/render_template (the C++
ChatTemplate), path in $GRIMOIRE_RENDER_TEMPLATE. A case that raises in Python must raise in C++ too.
"""
import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import render_template_reference as ref  # noqa: E402

SHARED = os.environ.get("GRIMOIRE_SHARED", os.path.join(ROOT, "..", "shared"))
RENDERER = os.environ.get("GRIMOIRE_RENDER_TEMPLATE", os.path.join(ROOT, "build", "tests", "render_template"))
HERE = os.path.dirname(os.path.abspath(__file__))

TEMPLATES = sorted(glob.glob(os.path.join(SHARED, "data", "templates", "*.jinja"))) + [
    os.path.join(SHARED, "data", "tokenizers", "qwen3", "tokenizer_config.json")
]


def load_contexts():
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    names, contexts = [], []
    for case in cases:
        ctx = {k: v for k, v in case.items() if k != "name"}
        ctx.setdefault("bos_token", "<s>")
        ctx.setdefault("eos_token", "</s>")
        names.append(case["name"])
        contexts.append(ctx)
    return names, contexts


def run_cpp(template, contexts, tmp_path):
    ctx_file = tmp_path / "contexts.json"
    ctx_file.write_text(json.dumps(contexts, ensure_ascii=False), encoding="utf-8")
    args = ["--snippets", str(ctx_file)] if template is None else [template, str(ctx_file)]
    proc = subprocess.run([RENDERER, *args], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout.decode("utf-8"))


def test_shared_data_present():
    assert len(TEMPLATES) == 17, TEMPLATES
    for t in TEMPLATES:
        assert os.path.exists(t), t
    assert os.path.exists(RENDERER), f"build render_template first ({RENDERER})"


def test_enough_cases():
    names, _ = load_contexts()
    assert len(names) >= 40 and len(set(names)) == len(names)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: os.path.basename(p))
def test_template_matches_jinja2(template, tmp_path):
    names, contexts = load_contexts()
    expected = ref.render_all(ref.load_template(template), contexts)
    actual = run_cpp(template, contexts, tmp_path)
    assert "load_error" not in expected, expected
    assert "load_error" not in actual, actual["load_error"]
    assert len(actual) == len(expected)
    failures = []
    rendered = 0
    for name, exp, act in zip(names, expected, actual):
        if exp["ok"] != act["ok"]:
            failures.append(f"{name}: python {'rendered' if exp['ok'] else 'raised ' + exp['error']!r}, "
                            f"C++ {'rendered' if act['ok'] else 'raised ' + act['error']!r}")
        elif exp["ok"] and exp["text"] != act["text"]:
            e, a = exp["text"], act["text"]
            i = next((k for k in range(min(len(e), len(a))) if e[k] != a[k]), min(len(e), len(a)))
            failures.append(f"{name}: differs at char {i}: python {e[max(0, i - 40):i + 40]!r} "
                            f"vs C++ {a[max(0, i - 40):i + 40]!r}")
        rendered += exp["ok"]
    assert not failures, "\n".join(failures)
    # Cases must actually render (a template that raises on everything would prove nothing). The lowest is
    # Hermes-3 tool_use, which iterates `tools` unconditionally and so raises whenever a request has none.
    assert rendered >= 15, f"only {rendered} of {len(names)} cases rendered"


def test_snippets_match_jinja2(tmp_path):
    """Small templates, one per feature (whitespace control, operators, filters, tests, methods, scoping,
    macros, errors), rendered by both sides: same text, or both raise."""
    with open(os.path.join(HERE, "snippets.json"), encoding="utf-8") as f:
        snippets = json.load(f)
    expected = ref.render_snippets(snippets)
    actual = run_cpp(None, snippets, tmp_path)
    assert len(actual) == len(expected)
    failures = []
    for sn, exp, act in zip(snippets, expected, actual):
        if exp["ok"] != act["ok"]:
            failures.append(f"{sn['template']!r}: python {exp.get('text', exp.get('error'))!r}, "
                            f"C++ {act.get('text', act.get('error'))!r}")
        elif exp["ok"] and exp["text"] != act["text"]:
            failures.append(f"{sn['template']!r}: python {exp['text']!r} vs C++ {act['text']!r}")
    assert not failures, f"{len(failures)} of {len(snippets)} snippets differ:\n" + "\n".join(failures)
    # both outcomes are exercised
    assert sum(e["ok"] for e in expected) > 80 and sum(not e["ok"] for e in expected) > 20


def test_reference_matches_transformers():
    """tools/render_template_reference.py renders exactly as the installed transformers does (skipped where
    transformers is absent, as in CI, which does not install it)."""
    cct = pytest.importorskip("transformers.utils.chat_template_utils")
    names, contexts = load_contexts()
    for template in TEMPLATES:
        source = ref.load_template(template)
        compiled = ref.make_environment().from_string(source)
        for name, ctx in zip(names, contexts):
            try:
                mine = ("ok", ref.render(source, ctx, compiled))
            except Exception:  # noqa: BLE001
                mine = ("error",)
            kw = dict(ctx)
            msgs, tools, docs = kw.pop("messages"), kw.pop("tools", None), kw.pop("documents", None)
            agp = kw.pop("add_generation_prompt", False)
            try:
                out, _ = cct.render_jinja_template(conversations=[msgs], tools=tools, documents=docs,
                                                   chat_template=source, add_generation_prompt=agp, **kw)
                theirs = ("ok", out[0])
            except Exception:  # noqa: BLE001
                theirs = ("error",)
            assert mine == theirs, (os.path.basename(template), name)
