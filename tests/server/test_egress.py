"""proxy.server.egress: connect-time vetting of client-chosen names, and the egress proxy (through a real
forward / CONNECT proxy on loopback)."""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from collections.abc import Iterator

import httpcore
import httpx
import orjson
import pytest

from proxy.core.errors import Forbidden
from proxy.server.app import create_app
from proxy.server.egress import (
    ConnectGuard,
    EgressProxy,
    EgressRefused,
    GuardedAiohttpResolver,
    GuardedNetworkBackend,
    refusal,
)
from proxy.server.serving import BackgroundServer
from proxy.server.upstream.policy import UpstreamPolicy, parse_allowed
from tests.helpers import make_settings

CHAT = {"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "deepseek-flash",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
}


def dns(names: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> list[str]:
        if host not in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return names[host]

    return resolve


def guard(*patterns: str, names: dict[str, list[str]] | None = None) -> ConnectGuard:
    policy = UpstreamPolicy(None, tuple(parse_allowed(p) for p in patterns))
    return ConnectGuard(policy, dns(names or {}))


# ---- the guard -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        ["127.0.0.1"],
        ["169.254.169.254"],
        ["10.1.2.3"],
        ["172.20.0.5"],
        ["192.168.0.10"],
        ["100.64.1.1"],
        ["fd00::5"],
        ["::ffff:127.0.0.1"],
        ["93.184.216.34", "10.0.0.1"],  # one sensitive answer among public ones is enough
    ],
)
async def test_a_client_chosen_name_with_a_sensitive_answer_is_refused(answer: list[str]) -> None:
    g = guard("*.example.com", names={"api.example.com": answer})
    with pytest.raises(EgressRefused) as info:
        await g.addresses("api.example.com", 443, client_chosen=True)
    assert isinstance(info.value.error, Forbidden) and "resolves to" in info.value.error.message


async def test_public_answers_pass_and_the_operators_upstreams_are_not_vetted() -> None:
    g = guard("*.example.com", names={"api.example.com": ["93.184.216.34"], "ollama": ["172.18.0.3"]})
    assert await g.addresses("api.example.com", 443, client_chosen=True) == ["93.184.216.34"]
    assert await g.addresses("ollama", 11434, client_chosen=False) == ["172.18.0.3"]


async def test_a_name_the_allow_list_names_exactly_may_resolve_anywhere() -> None:
    g = guard("ollama:11434", names={"ollama": ["172.18.0.3"]})
    assert await g.addresses("ollama", 11434, client_chosen=True) == ["172.18.0.3"]
    with pytest.raises(EgressRefused):
        await g.addresses("ollama", 2375, client_chosen=True)


async def test_a_dns_failure_for_a_client_chosen_name_is_a_refusal() -> None:
    g = guard("*")
    with pytest.raises(EgressRefused, match="could not be resolved"):
        await g.addresses("nxdomain.example.com", 443, client_chosen=True)
    with pytest.raises(OSError):  # the operator's own upstream: an ordinary connect error (502)
        await g.addresses("nxdomain.example.com", 443, client_chosen=False)


async def test_the_aiohttp_resolver_returns_exactly_the_vetted_addresses() -> None:
    g = guard("*", names={"api.example.com": ["93.184.216.34", "2606:2800::1"]})
    resolver = GuardedAiohttpResolver(g, client_chosen=True)
    found = await resolver.resolve("api.example.com", 443, socket.AF_UNSPEC)
    assert [(r["host"], r["port"], r["family"]) for r in found] == [
        ("93.184.216.34", 443, socket.AF_INET),
        ("2606:2800::1", 443, socket.AF_INET6),
    ]
    bad = GuardedAiohttpResolver(guard("*", names={"x.example.com": ["127.0.0.1"]}), client_chosen=True)
    with pytest.raises(EgressRefused):
        await bad.resolve("x.example.com", 443, socket.AF_UNSPEC)


class RecordingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.hosts: list[str] = []

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]
        self.hosts.append(host)
        raise httpcore.ConnectError("recorded")


async def test_the_httpx_backend_connects_to_the_vetted_address_not_the_name() -> None:
    inner = RecordingBackend()
    backend = GuardedNetworkBackend(
        guard("*", names={"api.example.com": ["93.184.216.34", "93.184.216.35"]}),
        client_chosen=True,
        inner=inner,
    )
    with pytest.raises(httpcore.ConnectError):
        await backend.connect_tcp("api.example.com", 443)
    assert inner.hosts == ["93.184.216.34", "93.184.216.35"]  # each address tried, never the name again
    refused = GuardedNetworkBackend(
        guard("*", names={"x.example.com": ["::1"]}), client_chosen=True, inner=inner
    )
    with pytest.raises(EgressRefused):
        await refused.connect_tcp("x.example.com", 443)
    assert len(inner.hosts) == 2


def test_refusal_is_found_behind_the_clients_wrappers() -> None:
    import aiohttp
    from aiohttp.client_reqrep import ConnectionKey

    error = Forbidden("no", param="X-Upstream-Base-URL")
    key = ConnectionKey("h", 443, True, True, None, None, None)
    wrapped = aiohttp.ClientConnectorError(key, EgressRefused(error))
    assert refusal(wrapped) is error
    try:
        try:
            raise EgressRefused(error)
        except EgressRefused as exc:
            raise httpx.ConnectError("wrapped") from exc
    except httpx.ConnectError as outer:
        assert refusal(outer) is error
    assert refusal(OSError("plain")) is None


# ---- which requests go through the egress proxy --------------------------------------------------


def test_egress_proxy_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = EgressProxy.from_settings(make_settings(egress_proxy="http://proxy.corp:3128"))
    assert explicit.for_url("https://api.deepseek.com/v1/chat/completions") == "http://proxy.corp:3128"
    assert EgressProxy.from_settings(make_settings()).for_url("https://api.deepseek.com/v1") is None

    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy:3128")
    monkeypatch.setenv("NO_PROXY", "internal.corp,.svc")
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert EgressProxy.from_settings(make_settings()).for_url("https://api.deepseek.com/v1") is None
    env = EgressProxy.from_settings(make_settings(trust_env=True))
    assert env.for_url("https://api.deepseek.com/v1") == "http://env-proxy:3128"
    assert env.for_url("http://api.deepseek.com/v1") is None  # no HTTP_PROXY
    assert env.for_url("https://internal.corp/v1") is None
    assert env.for_url("https://models.svc/v1") is None


@pytest.mark.parametrize("value", ["proxy.internal:8080", "socks5://proxy:1080", "http://[::1"])
def test_a_bad_egress_proxy_is_a_settings_error_that_does_not_echo_it(value: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        make_settings(egress_proxy=value)
    assert all(value not in err["msg"] for err in info.value.errors())


# ---- through a real proxy on loopback ------------------------------------------------------------


class TinyProxy:
    """A forward (absolute-form) and CONNECT proxy on 127.0.0.1, on its own thread. It resolves
    target names itself from `names` (as a corporate proxy would) and records what it was asked."""

    def __init__(self, names: dict[str, str], *, require_auth: str | None = None) -> None:
        self.names = names
        self.require_auth = require_auth
        self.seen: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> TinyProxy:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self.server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
            self.seen.append(f"{method} {target}")
            if self.require_auth is not None:
                wanted = "Basic " + base64.b64encode(self.require_auth.encode()).decode()
                if not any(line.lower() == f"proxy-authorization: {wanted}".lower() for line in lines):
                    writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    return
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                up_reader, up_writer = await asyncio.open_connection(self.names.get(host, host), int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await self._pipe(reader, writer, up_reader, up_writer)
                return
            url = httpx.URL(target)
            host = url.host
            up_reader, up_writer = await asyncio.open_connection(self.names.get(host, host), url.port or 80)
            kept = [line for line in lines[1:] if line and not line.lower().startswith("proxy-")]
            request_line = f"{method} {url.raw_path.decode('ascii')} {version}"
            up_writer.write(("\r\n".join([request_line, *kept]) + "\r\n\r\n").encode("latin-1"))
            await self._pipe(reader, writer, up_reader, up_writer)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _pipe(
        a_reader: asyncio.StreamReader,
        a_writer: asyncio.StreamWriter,
        b_reader: asyncio.StreamReader,
        b_writer: asyncio.StreamWriter,
    ) -> None:
        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(copy(a_reader, b_writer), copy(b_reader, a_writer))


async def _completion(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": orjson.dumps(COMPLETION)})


@pytest.fixture(scope="module")
def upstream() -> Iterator[BackgroundServer]:
    with BackgroundServer(_completion) as server:
        yield server


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_requests_go_through_the_egress_proxy(upstream: BackgroundServer, transport: str) -> None:
    port = upstream.port
    # Only the egress proxy knows this name: a direct connection could not even resolve it.
    with TinyProxy({"upstream.corp": "127.0.0.1"}) as egress:
        settings = make_settings(
            upstream_base_url=f"http://upstream.corp:{port}/v1",
            egress_proxy=egress.url,
            http_transport=transport,
        )
        with BackgroundServer(create_app(settings, resolve=dns({}))) as proxy:
            r = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, timeout=10)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "hello"
            # https goes through a CONNECT tunnel (this upstream speaks plain HTTP, so TLS fails
            # after the tunnel is up: what matters here is that the tunnel was asked for).
            settings_tls = make_settings(
                upstream_base_url=f"https://upstream.corp:{port}/v1",
                egress_proxy=egress.url,
                http_transport=transport,
            )
            with BackgroundServer(create_app(settings_tls, resolve=dns({}))) as tls_proxy:
                r = httpx.post(f"{tls_proxy.url}/v1/chat/completions", json=CHAT, timeout=10)
                assert r.status_code == 502
    assert egress.seen[0] == f"POST http://upstream.corp:{port}/v1/chat/completions"
    assert egress.seen[1] == f"CONNECT upstream.corp:{port}"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_trust_env_takes_the_proxy_from_the_environment(
    upstream: BackgroundServer, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = upstream.port
    with TinyProxy({"upstream.corp": "127.0.0.1"}) as egress:
        for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", egress.url)
        settings = make_settings(
            upstream_base_url=f"http://upstream.corp:{port}/v1", trust_env=True, http_transport=transport
        )
        with BackgroundServer(create_app(settings, resolve=dns({}))) as proxy:
            # (trust_env=False: this test's own client must not use HTTP_PROXY)
            r = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, timeout=10, trust_env=False)
            assert r.status_code == 200, r.text
    assert egress.seen == [f"POST http://upstream.corp:{port}/v1/chat/completions"]


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_through_the_egress_proxy_chosen_names_are_still_vetted(
    upstream: BackgroundServer, transport: str
) -> None:
    port = upstream.port
    with TinyProxy({"rebind.example.com": "127.0.0.1", "api.example.com": "127.0.0.1"}) as egress:
        settings = make_settings(
            upstream_base_url=None,
            allowed_upstreams=f"*.example.com:{port}",
            egress_proxy=egress.url,
            http_transport=transport,
        )
        names = {"rebind.example.com": ["10.0.0.7"], "api.example.com": ["93.184.216.34"]}
        with BackgroundServer(create_app(settings, resolve=dns(names))) as proxy:

            def ask(base: str) -> httpx.Response:
                headers = {"x-upstream-base-url": base}
                return httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=headers, timeout=10)

            r = ask(f"http://rebind.example.com:{port}/v1")
            assert r.status_code == 403 and "private" in r.json()["error"]["message"]
            r = ask(f"http://nxdomain.example.com:{port}/v1")
            assert r.status_code == 403
            assert egress.seen == []
            # A public answer passes; the egress proxy (which resolves for itself) does the rest.
            assert ask(f"http://api.example.com:{port}/v1").status_code == 200
    assert egress.seen == [f"POST http://api.example.com:{port}/v1/chat/completions"]


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_proxy_credentials_never_reach_an_error_message(upstream: BackgroundServer, transport: str) -> None:
    port = upstream.port
    with TinyProxy({"upstream.corp": "127.0.0.1"}, require_auth="corp:right") as egress:
        wrong = f"http://corp:s3cret-pw@127.0.0.1:{egress.port}"
        for scheme in ("http", "https"):
            settings = make_settings(
                upstream_base_url=f"{scheme}://upstream.corp:{port}/v1",
                egress_proxy=wrong,
                http_transport=transport,
            )
            with BackgroundServer(create_app(settings, resolve=dns({}))) as proxy:
                r = httpx.get(f"{proxy.url}/v1/models?api_key=client-secret", timeout=10)
                assert "s3cret-pw" not in r.text and "client-secret" not in r.text
        right = f"http://corp:right@127.0.0.1:{egress.port}"
        settings = make_settings(
            upstream_base_url=f"http://upstream.corp:{port}/v1", egress_proxy=right, http_transport=transport
        )
        with BackgroundServer(create_app(settings, resolve=dns({}))) as proxy:
            assert httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, timeout=10).status_code == 200
