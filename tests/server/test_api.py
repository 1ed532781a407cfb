"""The OpenAI API through the official client and raw HTTP: every field, streaming vs non-streaming equality at
temperature 0, stop strings, logprobs, seeds, token ids, and the tokenizer routes."""
import json

import pytest
import requests

from conftest import ALIAS, MODEL_NAME, sse_events

STORY = [{"role": "user", "content": "Tell me a story about a cat."}]


def post(server, path, body, stream=False):
    return requests.post(server.base + path, json=body, stream=stream, timeout=60)


def test_health_and_models(server, client):
    assert requests.get(server.base + "/health", timeout=5).json() == {"status": "ok"}
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == MODEL_NAME and ALIAS in ids
    raw = requests.get(server.base + "/v1/models", timeout=5).json()
    assert raw["object"] == "list"
    assert raw["data"][0]["max_model_len"] == 1024 and raw["data"][0]["object"] == "model"


def test_chat_fields(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=STORY, max_tokens=12, temperature=0)
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion"
    assert r.model == MODEL_NAME and r.system_fingerprint and r.created > 1_600_000_000
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 10 and 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    # The alias is accepted and echoed.
    assert client.chat.completions.create(model=ALIAS, messages=STORY, max_tokens=2).model == ALIAS


def test_completion_fields(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=10, temperature=0)
    assert r.id.startswith("cmpl-") and r.object == "text_completion"
    assert r.choices[0].text and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 10 and r.usage.prompt_tokens >= 4


def test_max_tokens_length_and_min_tokens(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=25, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 25 and r.choices[0].finish_reason == "length"
    r = client.chat.completions.create(model=MODEL_NAME, messages=STORY, max_completion_tokens=7,
                                       extra_body={"min_tokens": 7})
    assert r.usage.completion_tokens == 7 and r.choices[0].finish_reason == "length"


@pytest.mark.parametrize("chat", [True, False])
def test_stream_equals_non_stream_at_temperature_0(server, chat):
    body = {"model": MODEL_NAME, "max_tokens": 60, "temperature": 0, "return_token_ids": True}
    if chat:
        body["messages"] = STORY
    else:
        body["prompt"] = "Once upon a time, there was a"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    full = post(server, path, body).json()
    events = sse_events(post(server, path, {**body, "stream": True, "stream_options": {"include_usage": True}},
                             stream=True))
    *chunks, last = events
    assert last["choices"] == [] and last["usage"] == full["usage"]
    text, ids, finish = "", [], None
    for i, ch in enumerate(chunks):
        assert ch["id"] == chunks[0]["id"] and ch["model"] == MODEL_NAME and "usage" in ch
        choice = ch["choices"][0]
        if chat:
            assert ch["object"] == "chat.completion.chunk"
            delta = choice["delta"]
            if i == 0:
                # The first chunk already carries the first token: no empty chunk before prefill ends.
                assert delta["role"] == "assistant" and delta.get("content")
            text += delta.get("content") or ""
        else:
            assert ch["object"] == "text_completion"
            if i == 0:
                assert choice["text"]
            text += choice["text"]
        ids += choice.get("token_ids") or []
        if choice["finish_reason"]:
            finish = choice["finish_reason"]
    want = full["choices"][0]["message"]["content"] if chat else full["choices"][0]["text"]
    assert text == want
    assert finish == full["choices"][0]["finish_reason"]
    assert ids == full["choices"][0]["token_ids"]
    assert len(ids) == full["usage"]["completion_tokens"]


def test_openai_client_stream(client):
    stream = client.chat.completions.create(model=MODEL_NAME, messages=STORY, max_tokens=20, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        if ch.choices:
            text += ch.choices[0].delta.content or ""
    full = client.chat.completions.create(model=MODEL_NAME, messages=STORY, max_tokens=20, temperature=0)
    assert text == full.choices[0].message.content
    assert usage.completion_tokens == full.usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_across_tokens(server, stream):
    base = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 60, "temperature": 0,
            "ignore_eos": True}
    text = post(server, "/v1/completions", base).json()["choices"][0]["text"]
    assert len(text) > 30
    # A stop string spanning several tokens, starting mid-text: the answer ends right before it.
    stop = text[15:24]
    cut = text[:text.index(stop)]
    body = {**base, "stop": ["@@never@@", stop]}
    if stream:
        events = sse_events(post(server, "/v1/completions", {**body, "stream": True}, stream=True))
        got = "".join(e["choices"][0]["text"] for e in events)
        finish = events[-1]["choices"][0]["finish_reason"]
    else:
        r = post(server, "/v1/completions", body).json()
        got, finish = r["choices"][0]["text"], r["choices"][0]["finish_reason"]
    assert got == cut and finish == "stop"
    assert stop not in got


def test_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=STORY, max_tokens=8, temperature=0,
                                       logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    for e in content:
        assert len(e.top_logprobs) == 3
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
        # Greedy picks the most likely token.
        assert e.logprob == pytest.approx(lps[0], abs=1e-5)
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token
    r = client.completions.create(model=MODEL_NAME, prompt="Once", max_tokens=5, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert "".join(lp.tokens) == r.choices[0].text


def test_seeded_sampling_is_reproducible(client):
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=40, temperature=1.0, top_p=0.95,
              extra_body={"ignore_eos": True, "top_k": 40, "min_p": 0.01, "repetition_penalty": 1.1})
    a = client.completions.create(seed=1234, **kw).choices[0].text
    b = client.completions.create(seed=1234, **kw).choices[0].text
    c = client.completions.create(seed=99, **kw).choices[0].text
    assert a == b
    assert a != c
    # Penalties change the greedy text.
    g = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=60, temperature=0,
                                  extra_body={"ignore_eos": True}).choices[0].text
    p = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=60, temperature=0,
                                  frequency_penalty=2.0, presence_penalty=2.0,
                                  extra_body={"ignore_eos": True}).choices[0].text
    assert g != p


def test_token_ids_prompt_and_unknown_fields(server):
    ids = post(server, "/tokenize", {"prompt": "Once upon a time"}).json()["tokens"]
    a = post(server, "/v1/completions", {"prompt": ids, "max_tokens": 10, "temperature": 0}).json()
    b = post(server, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0,
                                         "cache_prompt": False, "some_new_field": {"x": 1}}).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert a["usage"]["prompt_tokens"] == len(ids)


def test_tokenize_detokenize(server):
    t = post(server, "/tokenize", {"prompt": "Once upon a time", "return_token_strs": True}).json()
    assert t["count"] == len(t["tokens"]) == len(t["token_strs"]) and t["max_model_len"] == 1024
    assert t["tokens"][0] == 1  # the Llama tokenizer's BOS
    assert post(server, "/tokenize", {"prompt": "Once", "add_special_tokens": False}).json()["tokens"][0] != 1
    d = post(server, "/detokenize", {"tokens": t["tokens"]}).json()
    assert d["prompt"].endswith("Once upon a time")
    # Messages are rendered with the chat template and its options, exactly as a chat request is.
    msgs = {"messages": STORY}
    on = post(server, "/tokenize", msgs).json()
    off = post(server, "/tokenize", {**msgs, "chat_template_kwargs": {"enable_thinking": False}}).json()
    assert off["count"] > on["count"]
    text = post(server, "/detokenize", {"tokens": off["tokens"]}).json()["prompt"]
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    chat = post(server, "/v1/chat/completions", {**msgs, "max_tokens": 1}).json()
    assert chat["usage"]["prompt_tokens"] == on["count"]


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def test_tools_are_rendered_and_answers_parse(server, client):
    msgs = {"messages": STORY, "tools": TOOLS}
    text = post(server, "/detokenize", {"tokens": post(server, "/tokenize", msgs).json()["tokens"]}).json()["prompt"]
    assert '"name": "get_weather"' in text and "<tool_call>" in text
    r = client.chat.completions.create(model=MODEL_NAME, messages=STORY, tools=TOOLS, max_tokens=10)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # A forced call: the answer starts inside <tool_call>; this tiny model writes no valid call JSON, so what
    # it wrote comes back as text, starting with the opened tag, and never as a broken tool call.
    r = client.chat.completions.create(model=MODEL_NAME, messages=STORY, tools=TOOLS, max_tokens=10,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    msg = r.choices[0].message
    if msg.tool_calls:
        assert msg.tool_calls[0].function.name == "get_weather"
        json.loads(msg.tool_calls[0].function.arguments)
    else:
        assert msg.content.startswith("<tool_call>")
    # History with tool calls and results renders (arguments given as the OpenAI JSON string).
    history = STORY + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    text = post(server, "/detokenize", {"tokens": post(server, "/tokenize", {"messages": history, "tools": TOOLS})
                                        .json()["tokens"]}).json()["prompt"]
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text
    r = client.chat.completions.create(model=MODEL_NAME, messages=history, tools=TOOLS, max_tokens=5)
    assert r.choices[0].message.role == "assistant"
