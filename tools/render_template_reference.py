#!/usr/bin/env python3
"""Reference rendering of a chat template, as transformers' apply_chat_template renders it.

Builds the same jinja2 environment transformers builds (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, the loopcontrols extension and a pass-through {% generation %} tag; a tojson filter that is
json.dumps with ensure_ascii=False and keys unsorted; raise_exception, strftime_now, dict and a namespace that
refuses underscore names) and passes the same variables (tools / documents default to None, reasoning aliased
to reasoning_content and thinking). Needs only jinja2, so CI can run it without transformers.

    python3 tools/render_template_reference.py TEMPLATE CONTEXTS.json   # prints results as JSON
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: transformers uses it to mark assistant tokens; renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class TemplateNamespace(jinja2.utils.Namespace):
    """namespace() that refuses underscore-prefixed attributes, like transformers' sandboxed one."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"underscore-prefixed namespace attribute {name!r}")


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = TemplateNamespace
    return env


def alias_reasoning(messages):
    out = []
    for message in messages:
        if isinstance(message, dict):
            reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def render(source, context, template=None):
    """Renders `source` with a request context (messages, tools, add_generation_prompt, kwargs...)."""
    if template is None:
        template = make_environment().from_string(source)
    variables = dict(context)
    variables.setdefault("tools", None)
    variables.setdefault("documents", None)
    variables.setdefault("add_generation_prompt", False)
    if isinstance(variables.get("messages"), list):
        variables["messages"] = alias_reasoning(variables["messages"])
    return template.render(**variables)


def load_template(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)["chat_template"]
    return text


def render_all(source, contexts):
    """Same output shape as tests/templates/render_template.cpp."""
    try:
        template = make_environment().from_string(source)
    except Exception as e:  # noqa: BLE001 - any load failure is reported, as the C++ side does
        return {"load_error": f"{type(e).__name__}: {e}"}
    results = []
    for ctx in contexts:
        try:
            results.append({"ok": True, "text": render(source, ctx, template)})
        except Exception as e:  # noqa: BLE001
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    return results


def render_snippets(snippets):
    """Same output shape as `render_template --snippets`: one result per {"template", "context"}."""
    results = []
    for snippet in snippets:
        try:
            results.append({"ok": True, "text": render(snippet["template"], snippet["context"])})
        except Exception as e:  # noqa: BLE001
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    return results


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: render_template_reference.py TEMPLATE CONTEXTS.json")
    with open(sys.argv[2], encoding="utf-8") as f:
        contexts = json.load(f)
    print(json.dumps(render_all(load_template(sys.argv[1]), contexts), ensure_ascii=False))


if __name__ == "__main__":
    main()
