"""The app's request handling with an injected upstream transport (no sockets)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.helpers import Recorder, make_settings

CHAT = {"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "deepseek-flash",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
}
DEEPSEEK_400 = (
    b'{"error":{"message":"Invalid reasoning_effort value","type":"invalid_request_error",'
    b'"param":null,"code":"invalid_request_error"}}'
)


def ok_json(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=COMPLETION)


async def test_healthz(proxy_client) -> None:
    client = proxy_client(ok_json)
    r = await client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


async def test_passthrough_other_paths_keeps_path_query_auth_and_drops_hop_by_hop(proxy_client) -> None:
    rec = Recorder(lambda req: httpx.Response(200, json={"data": []}, headers={"x-request-id": "r1"}))
    client = proxy_client(rec, upstream_base_url="https://dashscope.aliyuncs.com/compatible-mode/v1")
    r = await client.get(
        "/v1/models?limit=5",
        headers={
            "authorization": "Bearer sk-client",
            "connection": "keep-alive, x-hop",
            "x-hop": "1",
            "te": "trailers",
        },
    )
    assert r.status_code == 200 and r.json() == {"data": []}
    assert r.headers["x-upstream-request-id"] == "r1"  # the upstream's id; X-Request-Id is the proxy's
    sent = rec.requests[0]
    assert str(sent.url) == "https://dashscope.aliyuncs.com/compatible-mode/v1/models?limit=5"
    assert sent.headers["authorization"] == "Bearer sk-client"
    assert sent.headers["host"] == "dashscope.aliyuncs.com"
    assert "x-hop" not in sent.headers and "te" not in sent.headers


async def test_no_level_forwards_body_byte_identical_and_strips_control_headers(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    raw = (
        b'{"model": "deepseek-flash",  "messages": [{"role":"user","content":"hi"}], '
        b'"thinking": {"type": "x"}}'
    )
    r = await client.post(
        "/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "x-trace": "off", "x-reasoning": "show"},
    )
    assert r.status_code == 200
    assert rec.requests[0].content == raw
    assert not any(h.startswith(("x-trace", "x-reasoning", "x-thinking")) for h in rec.requests[0].headers)
    assert r.headers["x-thinking-level-applied"] == "none"
    assert r.headers["x-thinking-provider"] == "deepseek"


async def test_level_rewrites_body_and_reports_it(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"x-thinking-level": " DEEP "})
    assert r.status_code == 200
    sent = orjson.loads(rec.requests[0].content)
    assert sent["thinking"] == {"type": "enabled"}
    assert sent["reasoning_effort"] == "max"
    assert r.headers["x-thinking-level-applied"] == "deep"
    assert r.headers["x-thinking-method"] == "params"


@pytest.mark.parametrize(
    ("header", "value"),
    [("x-thinking-level", "max"), ("x-trace", "verbose"), ("x-trace-format", "json"), ("x-reasoning", "no")],
)
async def test_bad_control_header_is_400_and_nothing_forwarded(proxy_client, header: str, value: str) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", json=CHAT, headers={header: value})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert value in err["message"] and err["param"].lower() == header
    assert rec.requests == []


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]"])
async def test_invalid_json_is_400_and_nothing_forwarded(proxy_client, raw: bytes) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    assert rec.requests == []


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_error_comes_back_byte_for_byte_with_headers(proxy_client, stream: bool) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            400, content=DEEPSEEK_400, headers={"content-type": "application/json", "x-request-id": "req-9"}
        )

    rec = Recorder(fail)
    client = proxy_client(rec)
    r = await client.post(
        "/v1/chat/completions", json={**CHAT, "stream": stream}, headers={"x-thinking-level": "deep"}
    )
    assert r.status_code == 400
    assert r.content == DEEPSEEK_400
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-upstream-request-id"] == "req-9"
    assert r.headers["x-thinking-level-applied"] == "deep"
    assert r.headers["x-thinking-provider"] == "deepseek"
    assert len(rec.requests) == 1  # no retry


async def test_rate_limit_headers_pass_through(proxy_client) -> None:
    body = b'{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}'
    rec = Recorder(
        lambda req: httpx.Response(
            429,
            content=body,
            headers={
                "content-type": "application/json",
                "retry-after": "7",
                "x-ratelimit-remaining-requests": "0",
            },
        )
    )
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert (r.status_code, r.content) == (429, body)
    assert r.headers["retry-after"] == "7" and r.headers["x-ratelimit-remaining-requests"] == "0"
    assert len(rec.requests) == 1


async def test_unreachable_upstream_is_502_naming_it(proxy_client) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = proxy_client(refuse)
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 502
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "code"}
    assert "api.deepseek.com" in err["message"] and "refused" in err["message"]
    assert err["code"] == "upstream_unreachable"


async def test_upstream_timeout_is_504(proxy_client) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client = proxy_client(slow)
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 504
    err = r.json()["error"]
    assert err["code"] == "upstream_timeout" and "api.deepseek.com" in err["message"]


async def test_body_over_limit_is_413_and_nothing_forwarded(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec, max_body_bytes=100)
    r = await client.post("/v1/chat/completions", json={**CHAT, "pad": "x" * 200})
    assert r.status_code == 413
    assert "THINKPROXY_MAX_BODY_BYTES" in r.json()["error"]["message"]
    assert rec.requests == []


async def test_stream_headers_and_mid_stream_failure_framing(proxy_client) -> None:
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[override]
            yield (
                b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
            )
            raise httpx.ReadError("connection reset by peer")

    rec = Recorder(
        lambda req: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Broken())
    )
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.status_code == 200
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-accel-buffering"] == "no"
    assert "content-encoding" not in r.headers
    events = [e for e in r.content.split(b"\n\n") if e]
    assert events[0].startswith(b'data: {"id":"c"')
    error = orjson.loads(events[-2].removeprefix(b"data: "))
    assert error["error"]["code"] == "upstream_protocol_error" or error["error"]["type"] == "upstream_error"
    assert "closed the connection before the response was complete" in error["error"]["message"]
    assert events[-1] == b"data: [DONE]"


async def test_upstream_header_refused_unless_allowed(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    r = await client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-upstream-base-url": "http://169.254.169.254/latest"}
    )
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "permission_error"
    assert rec.requests == []


async def test_upstream_header_allowed_by_pattern(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec, allowed_upstreams="*.moonshot.cn,api.moonshot.ai")
    r = await client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-upstream-base-url": "https://api.moonshot.cn/v1"}
    )
    assert r.status_code == 200
    assert str(rec.requests[0].url) == "https://api.moonshot.cn/v1/chat/completions"
    assert r.headers["x-thinking-provider"] == "kimi"


async def test_client_gone_while_sending_its_body_forwards_nothing() -> None:
    from proxy.server.app import create_app
    from tests.helpers import chat_scope, make_settings

    rec = Recorder(ok_json)
    app = create_app(make_settings(), transport=httpx.MockTransport(rec))
    sent: list[dict[str, object]] = []
    messages = [
        {"type": "http.request", "body": b'{"model": "m", ', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, object]:
        return messages.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = chat_scope([(b"content-type", b"application/json")])
    await app(scope, receive, send)
    assert rec.requests == []
    assert sent[0]["status"] == 499


def deep_chat(depth: int) -> bytes:
    """A chat body nested `depth` levels deep in all (the body object is level 1)."""
    return b'{"model":"deepseek-flash","messages":[],"x":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize("depth", [255, 300, 1100])
@pytest.mark.parametrize("level", [None, "deep"])
async def test_body_nested_deeper_than_the_encoder_writes_is_400(
    proxy_client, depth: int, level: str | None
) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    headers = {"content-type": "application/json"} | ({"x-thinking-level": level} if level else {})
    r = await client.post("/v1/chat/completions", content=deep_chat(depth), headers=headers)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "json_too_deep"
    assert rec.requests == []


async def test_body_at_the_depth_limit_is_rewritten(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    headers = {"content-type": "application/json", "x-thinking-level": "deep"}
    r = await client.post("/v1/chat/completions", content=deep_chat(254), headers=headers)
    assert r.status_code == 200
    assert orjson.loads(rec.requests[0].content)["x"] == orjson.loads(b"[" * 253 + b"]" * 253)


async def test_integers_above_64_bits_survive_a_rewrite(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    raw = (
        b'{"model":"deepseek-flash","messages":[{"role":"user","content":"hi"}],'
        b'"seed":1180591620717411303424}'
    )
    headers = {"content-type": "application/json", "x-thinking-level": "deep"}
    r = await client.post("/v1/chat/completions", content=raw, headers=headers)
    assert r.status_code == 200
    assert b'"seed":1180591620717411303424' in rec.requests[0].content


@pytest.mark.parametrize("header", ["x-thinking-level", "x-trace", "x-reasoning", "x-trace-format"])
async def test_a_control_header_sent_twice_is_400(proxy_client, header: str) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    value = {"x-thinking-level": "deep", "x-trace": "off", "x-reasoning": "hide", "x-trace-format": "event"}[
        header
    ]
    headers = [("content-type", "application/json"), (header, value), (header, value)]
    r = await client.post("/v1/chat/completions", content=orjson.dumps(CHAT), headers=headers)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"].lower() == header and "more than once" in err["message"]
    assert rec.requests == []


async def test_a_level_with_a_trailing_nbsp_is_400(proxy_client) -> None:
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    headers = [(b"content-type", b"application/json"), (b"x-thinking-level", b"deep\xa0")]
    r = await client.post("/v1/chat/completions", content=orjson.dumps(CHAT), headers=headers)
    assert r.status_code == 400 and r.json()["error"]["param"] == "X-Thinking-Level"
    assert rec.requests == []


# ---- the upstream URL is built from the raw request path -----------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/..%2F..%2Fsecret%2Fmodels",
        "/v1/%2e%2e/%2E%2e/secret/models",
        "/v1/models/%2e%2e%2f%2e%2e%2fsecret",
        "/v1/models/..%5c..%5csecret",
        "/v1/%2e/models",
    ],
)
async def test_a_path_that_would_leave_the_base_path_is_400_and_nothing_forwarded(
    proxy_client, path: str
) -> None:
    rec = Recorder(lambda req: httpx.Response(200, json={"data": []}))
    client = proxy_client(rec, upstream_base_url="https://host.example/tenant-a/v1")
    r = await client.get(path)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_path" and "dot-segment" in err["message"]
    assert rec.requests == []


async def test_raw_path_and_query_are_forwarded_byte_for_byte(proxy_client) -> None:
    rec = Recorder(lambda req: httpx.Response(200, json={"data": []}))
    client = proxy_client(rec, upstream_base_url="https://host.example/tenant-a/v1")
    r = await client.get("/v1/files/a%252Fb/%ff%c3/meta-llama%2FLlama-3?q=%7e&x=1+2&y=%ff")
    assert r.status_code == 200
    sent = rec.requests[0].url
    assert sent.raw_path == b"/tenant-a/v1/files/a%252Fb/%ff%c3/meta-llama%2FLlama-3?q=%7e&x=1+2&y=%ff"


async def _echo_raw_target(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    """A loopback upstream that answers with the request target exactly as it arrived."""
    if scope["type"] != "http":
        return
    target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": target})


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_both_upstream_clients_send_the_raw_path_and_query_unchanged(transport: str) -> None:
    from proxy.server.app import create_app
    from proxy.server.serving import BackgroundServer

    with BackgroundServer(_echo_raw_target) as upstream:
        app = create_app(
            make_settings(upstream_base_url=f"{upstream.url}/tenant-a/v1", http_transport=transport)
        )
        with BackgroundServer(app) as proxy:
            r = httpx.get(f"{proxy.url}/v1/files/a%252Fb/%ff%c3/x%2Fy?q=%7e&x=1+2&y=%ff", timeout=10)
            assert r.status_code == 200
            assert r.content == b"/tenant-a/v1/files/a%252Fb/%ff%c3/x%2Fy?q=%7e&x=1+2&y=%ff"
            r = httpx.get(f"{proxy.url}/v1/..%2F..%2Fsecret", timeout=10)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_path"


# ---- client-chosen names are vetted where the connection is made ---------------------------------


class CountingUpstream:
    """A loopback upstream that counts the requests it received."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        self.paths.append(scope["path"])
        body = orjson.dumps(COMPLETION)
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class FakeDns:
    """An injected resolver: names map to addresses, anything else does not resolve."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = names
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        import socket

        self.calls.append(host)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.names[host]


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_chosen_names_are_vetted_at_connect_with_the_injected_resolver(transport: str) -> None:
    from proxy.server.app import create_app
    from proxy.server.serving import BackgroundServer

    upstream = CountingUpstream()
    with BackgroundServer(upstream) as server:
        port = server.port
        dns = FakeDns(
            {
                "upstream.test": ["127.0.0.1"],  # the operator's own upstream may be on loopback
                "shared.example.com": ["127.0.0.1"],
                "rebind.example.com": ["93.184.216.34", "127.0.0.1"],
                "local.test": ["127.0.0.1"],
            }
        )
        settings = make_settings(
            upstream_base_url=f"http://shared.example.com:{port}/v1",
            allowed_upstreams=f"*.example.com:{port},local.test:{port}",
            http_transport=transport,
        )
        with BackgroundServer(create_app(settings, resolve=dns)) as proxy:

            def ask(base: str | None) -> httpx.Response:
                headers = {"x-upstream-base-url": base} if base else {}
                return httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=headers, timeout=10)

            # The configured upstream: its name resolves through the injected resolver, loopback is fine.
            assert ask(None).status_code == 200 and upstream.paths == ["/v1/chat/completions"]
            # The same name, chosen by a client through a wildcard: the pooled connection the
            # operator's request left behind is not reused, and the fresh lookup is refused.
            r = ask(f"http://shared.example.com:{port}/admin")
            assert r.status_code == 403 and "resolves to a loopback" in r.json()["error"]["message"]
            # One answer of several is sensitive: refused (no racing between addresses).
            r = ask(f"http://rebind.example.com:{port}/v1")
            assert r.status_code == 403 and r.json()["error"]["param"] == "X-Upstream-Base-URL"
            # A name that does not resolve is a refusal, not a pass.
            r = ask(f"http://nxdomain.example.com:{port}/v1")
            assert r.status_code == 403 and "could not be resolved" in r.json()["error"]["message"]
            assert upstream.paths == ["/v1/chat/completions"]
            # A name the allow-list names exactly is the operator's choice: loopback allowed.
            r = ask(f"http://local.test:{port}/v1")
            assert r.status_code == 200 and upstream.paths[-1] == "/v1/chat/completions"
            # No separate lookup before the connection: one resolution per connection made.
            assert dns.calls.count("rebind.example.com") == 1
            assert dns.calls.count("nxdomain.example.com") == 1


async def test_an_upstream_error_never_quotes_a_query_or_credentials(proxy_client) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        # HTTP clients like to quote the URL they failed on, query and all.
        raise httpx.ConnectError(f"cannot reach http://user:pw@proxy.corp:3128 for {request.url}")

    client = proxy_client(refuse)
    r = await client.get("/v1/models?api_key=sk-client-secret")
    assert r.status_code == 502
    message = r.json()["error"]["message"]
    assert "sk-client-secret" not in message and "user:pw" not in message
    assert "https://api.deepseek.com" in message


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/completions", "/v1/models"])
@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("x-thinking-level", "bogus"),
        ("x-trace", "verbose"),
        ("x-trace-format", "json"),
        ("x-reasoning", "no"),
    ],
)
async def test_control_headers_are_checked_on_every_route(
    proxy_client, path: str, header: str, value: str
) -> None:
    """The same 400 as on chat completions: a bad control header is never silently dropped."""
    rec = Recorder(ok_json)
    client = proxy_client(rec)
    method = "GET" if path == "/v1/models" else "POST"
    body = None if method == "GET" else b'{"model": "m", "input": "x"}'
    r = await client.request(method, path, content=body, headers={header: value})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and value in err["message"]
    assert err["param"].lower() == header
    assert rec.requests == []
    twice = await client.request(method, path, content=body, headers=[(header, "off"), (header, "off")])
    assert twice.status_code == 400 and rec.requests == []


@pytest.mark.parametrize("path", ["/v1/chat/completions/", "/v1/completions"])
async def test_with_review_on_a_call_cannot_go_around_the_gate(proxy_client, path: str) -> None:
    """The gate reviews chat completions; a request that could make calls elsewhere is refused
    rather than forwarded unreviewed."""
    rec = Recorder(ok_json)
    client = proxy_client(rec, review_tools=["send_email"], reviewer_keys=["r:rk-1"])
    r = await client.post(
        path, json={**CHAT, "tools": [{"type": "function", "function": {"name": "send_email"}}]}
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "review_not_available"
    assert rec.requests == []
    ok = await client.post("/v1/embeddings", json={"model": "m", "input": "x"})
    assert ok.status_code == 200 and len(rec.requests) == 1


async def test_an_observer_failing_at_the_end_is_logged_and_costs_the_request_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from proxy.core.events import AccessRecord, RequestObserver
    from proxy.server.app import create_app

    class Broken(RequestObserver):
        def on_end(self, record: AccessRecord, duration_ms: float) -> None:
            raise RuntimeError("observer bug")

    class Listener:
        def start(self, record: AccessRecord, headers: object) -> RequestObserver:
            return Broken()

    app = create_app(make_settings(), transport=httpx.MockTransport(ok_json), listeners=[Listener()])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    assert "An observer failed at the end of a request (Broken)" in caplog.text
    assert "observer bug" in caplog.text


@pytest.mark.parametrize(
    ("overrides", "described"),
    [
        ({}, False),
        ({"ui": True}, True),
        ({"admin_keys": ["ops:ak-1"]}, True),
        ({"ui": True, "sessions": False}, True),
    ],
)
def test_the_body_changes_are_described_only_where_the_sessions_or_the_console_read_them(
    overrides: dict[str, object], described: bool
) -> None:
    from proxy.server.app import create_app

    app = create_app(make_settings(**overrides))
    assert app.state.proxy.setup.describe_changes is described


@pytest.mark.parametrize(
    ("overrides", "priced"), [({}, False), ({"ui": True}, True), ({"admin_keys": ["ops:ak-1"]}, True)]
)
def test_answers_are_priced_only_where_a_listener_reads_the_cost(
    overrides: dict[str, object], priced: bool
) -> None:
    from proxy.server.app import create_app
    from proxy.sessions.pricing import CostListener

    app = create_app(make_settings(**overrides))
    listeners = app.state.services.listeners
    assert any(isinstance(listener, CostListener) for listener in listeners) is priced


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models",
        "/v1/models?key=x",
        "/v1/a#b",
        "/v1/a\\b",
        "//v1/models",
        "/v1/x\ty",
        "/v1/caf\u00e9",
        "/v1/\u2028",
    ],
)
def test_the_record_names_a_path_as_starlettes_url_reads_it(path: str) -> None:
    """The access record takes the scope's path where Starlette's URL reads it the same, and the
    URL's reading where it differs (a `?` in a path must never read as a query)."""
    from starlette.requests import Request

    from proxy.server.app import create_app

    app = create_app(make_settings())
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [],
        "root_path": "",
    }
    record, _ = app.state.proxy._record(Request(scope), "passthrough")
    assert record.path == Request(scope).url.path
