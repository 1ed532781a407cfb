"""Every bad input gets its status and an OpenAI error body, and the server keeps serving."""
import pytest
import requests

from conftest import MAX_BODY, MODEL_NAME, Server

OK = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def check_error(resp, status, param=None):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err


def chat(server, body=None, raw=None, headers=None):
    kw = {"data": raw, "headers": {"Content-Type": "application/json", **(headers or {})}} if raw is not None \
        else {"json": body, "headers": headers}
    return requests.post(server.base + "/v1/chat/completions", timeout=30, **kw)


@pytest.mark.parametrize("extra,param", [
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"max_tokens": 10**12}, "max_tokens"),       # far beyond the context
    ({"max_tokens": 1020}, "max_tokens"),         # prompt + 1020 > --ctx 1024
    ({"temperature": "warm"}, "temperature"),
    ({"top_p": 7}, "top_p"),
    ({"n": 3}, "n"),
    ({"stop": 12}, "stop"),
    ({"stream": "yes"}, "stream"),
    ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0].type"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_bad_fields_are_400(server, extra, param):
    check_error(chat(server, {**OK, **extra}), 400, param)


def test_malformed_json_and_wrong_shapes(server):
    check_error(chat(server, raw="{\"messages\": [}"), 400)
    check_error(chat(server, raw="[1, 2, 3]"), 400)
    check_error(chat(server, raw=""), 400)
    check_error(requests.post(server.base + "/v1/completions", json={"prompt": 42}, timeout=10), 400, "prompt")
    check_error(requests.post(server.base + "/v1/completions", json={"prompt": [1, 10**6]}, timeout=10), 400,
                "prompt")
    check_error(requests.post(server.base + "/detokenize", json={"tokens": "x"}, timeout=10), 400, "tokens")


def test_prompt_longer_than_context(server):
    long = {**OK, "messages": [{"role": "user", "content": "tell me a story " * 600}]}
    err = check_error(chat(server, long), 400, "messages")
    assert "context" in err["message"]
    check_error(requests.post(server.base + "/v1/completions", json={"prompt": "word " * 4000}, timeout=10), 400)


def test_unknown_model_is_404(server):
    err = check_error(chat(server, {**OK, "model": "gpt-17"}), 404, "model")
    assert err["code"] == "model_not_found"


def test_body_over_limit_is_413(server):
    big = {**OK, "messages": [{"role": "user", "content": "x" * (MAX_BODY + 1000)}]}
    check_error(chat(server, big), 413)


def test_unknown_route_is_404(server):
    check_error(requests.get(server.base + "/v1/nothing", timeout=5), 404)
    check_error(requests.post(server.base + "/v1/embeddings", json={}, timeout=5), 404)


def test_server_still_serves_after_bad_input(server):
    assert requests.get(server.base + "/health", timeout=5).status_code == 200
    r = chat(server, OK)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"


@pytest.fixture(scope="module")
def auth_server(checkpoint):
    s = Server(checkpoint, env={"GRIMOIRE_API_KEY": "sekrit"})
    yield s
    assert s.terminate() == 0


def test_api_key(auth_server):
    err = check_error(chat(auth_server, OK), 401)
    assert err["code"] == "invalid_api_key"
    check_error(chat(auth_server, OK, headers={"Authorization": "Bearer wrong"}), 401)
    check_error(requests.get(auth_server.base + "/v1/models", timeout=5), 401)
    check_error(requests.post(auth_server.base + "/tokenize", json={"prompt": "x"}, timeout=5), 401)
    assert chat(auth_server, OK, headers={"Authorization": "Bearer sekrit"}).status_code == 200
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=auth_server.base + "/v1", api_key="sekrit", max_retries=0)
    assert c.models.list().data[0].id == MODEL_NAME
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=auth_server.base + "/v1", api_key="nope", max_retries=0).models.list()
    # Health and metrics stay open for probes.
    assert requests.get(auth_server.base + "/health", timeout=5).status_code == 200
