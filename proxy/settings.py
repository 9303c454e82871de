"""Process settings, read once from `THINKPROXY_*` environment variables and, for any not set
there, from a `.env` file in the working directory if one exists (documented in the README).

Built in the app factory / CLI and passed down; nothing reads the environment after start-up.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from proxy.core.config.url_patterns import canonical_host
from proxy.core.controls import Level, ReasoningField, ReasoningVisibility, TraceFormat, TraceMode
from proxy.core.paths import escape, has_dot_segment
from proxy.core.stream.sse import DEFAULT_MAX_EVENT_BYTES

CommaList = Annotated[list[str], NoDecode]
PREFIX = "THINKPROXY_"
# THINKPROXY_* variables that are read elsewhere, not settings: the wheel build and the test suite.
NOT_SETTINGS = frozenset({"THINKPROXY_COMPILE", "THINKPROXY_EXPECT_BUILD", "THINKPROXY_FUZZ_SCALE"})


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_file=".env", extra="ignore")

    upstream_base_url: str | None = Field(
        default=None, description="Base URL of the upstream API, e.g. https://api.deepseek.com/v1"
    )
    providers_file: Path | None = Field(
        default=None, description="providers.yaml to use instead of the one shipped with the package"
    )
    routes_file: Path | None = Field(
        default=None,
        description="routes.yaml: models to upstreams (first match wins); see docs/routing.md",
    )
    policy_file: Path | None = Field(
        default=None,
        description="policy.yaml: per client key, a thinking-level ceiling and a reasoning-token budget; "
        "see docs/policy.md",
    )
    allowed_upstreams: CommaList = Field(
        default_factory=list,
        description="Patterns a client may name in X-Upstream-Base-URL (comma-separated); empty = refused",
    )
    default_thinking_level: Level | None = None
    # GET /v1/models lists each model's `model(level)` forms too (some clients offer only listed models).
    models_with_levels: bool = False
    trace: TraceMode = TraceMode.BRIEF
    trace_format: TraceFormat = TraceFormat.COMMENT
    reasoning_visibility: ReasoningVisibility = ReasoningVisibility.SHOW
    reasoning_field: ReasoningField = ReasoningField.REASONING_CONTENT
    responses_hosted_tools: Literal["omit", "refuse"] = Field(
        default="omit",
        description="bridged Responses requests: hosted tools (web_search…) left out and announced, or a 400",
    )

    upstream_api_key: SecretStr | None = Field(
        default=None,
        description="Gateway mode: the key sent to THINKPROXY_UPSTREAM_BASE_URL",
    )
    client_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Gateway mode: the keys clients present, comma-separated, optionally named (alice:ck-…)",
    )

    http_transport: Literal["aiohttp", "httpx"] = "aiohttp"
    connect_timeout: float = Field(default=10.0, gt=0)
    read_timeout: float = Field(default=300.0, gt=0, description="longest silence between two upstream reads")
    total_timeout: float = Field(default=1800.0, gt=0, description="longest whole upstream exchange")
    write_timeout: float = Field(
        default=120.0, gt=0, description="longest a client may read nothing of what the proxy writes"
    )
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    max_sse_event_bytes: int = Field(default=DEFAULT_MAX_EVENT_BYTES, gt=0)
    max_response_bytes: int = Field(
        default=32 * 1024 * 1024, gt=0, description="largest decoded non-stream chat body the proxy reads"
    )
    max_upstream_connections: int = Field(default=1000, gt=0)
    shutdown_timeout: float = Field(default=30.0, ge=0)

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    workers: int = Field(default=1, ge=1)
    # uvloop is faster per request; under CPU saturation it accepts one new connection per loop
    # iteration, so new clients can wait seconds while existing ones are served. asyncio does not.
    loop: Literal["uvloop", "asyncio"] = "uvloop"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool = False

    # -- server edge limits (per worker process; README "Limits at the client edge") ------------
    max_header_bytes: int = Field(
        default=64 * 1024, ge=1024, description="request line + headers; 431 beyond"
    )
    max_header_count: int = Field(default=100, ge=8, description="request header lines; 431 beyond")
    header_timeout: float = Field(
        default=10.0, gt=0, description="from a request's first byte to its last header"
    )
    client_body_timeout: float = Field(
        default=60.0, gt=0, description="to receive a whole request body; 408 beyond"
    )
    max_client_connections: int = Field(default=4096, ge=1, description="open client connections; 503 beyond")
    max_sockets_per_key: int = Field(
        default=16, ge=0, description="open Responses WebSockets per client key; 429 beyond; 0 = no cap"
    )

    # -- shared state: the replay store (and the console feed across replicas) ------------------
    state: Literal["on", "off"] = Field(default="on", description="off disables the replay store")
    state_url: SecretStr | None = Field(
        default=None, description="redis://… to share state between replicas; unset = in this process"
    )
    state_ttl: float = Field(default=3600.0, gt=0, description="seconds a remembered turn is kept")
    state_secret: SecretStr | None = Field(
        default=None,
        description="key of the tenant hash; unset = derived from STATE_URL (Redis) or random per process",
    )
    state_old_secrets: SecretStr | None = Field(
        default=None,
        description="earlier STATE_SECRETs, comma-separated: their blobs open, their stored state is found",
    )

    # -- observability --------------------------------------------------------------------------
    metrics: bool = Field(default=True, description="serve GET /metrics (Prometheus text)")
    metrics_max_models: int = Field(default=100, ge=1, description="distinct model labels, the rest 'other'")

    # -- console --------------------------------------------------------------------------------
    ui: bool = Field(default=False, description="serve the web console at /ui")
    admin_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Bearer keys for /thinkproxy/* in gateway mode"
    )
    cors_origins: CommaList = Field(
        default_factory=list, description="browser origins allowed to call the API"
    )
    allowed_hosts: CommaList = Field(
        default_factory=list,
        description="Host names the console answers to (exact, *.domain or *); unset = loopback names "
        "when bound to loopback, any otherwise (proxy.server.browser_guard)",
    )
    ui_history: int = Field(
        default=200, ge=1, le=10_000, description="recent requests the console's live view keeps"
    )
    tool_titles_file: Path | None = Field(
        default=None, description="YAML/JSON map of tool name to {zh, en} display title (trace, console)"
    )

    # -- agent sessions (docs/sessions.md) --------------------------------------------------------
    sessions: bool = Field(
        default=True, description="group requests into agent sessions (GET /thinkproxy/sessions)"
    )
    sessions_max: int = Field(
        default=2000, ge=1, le=1_000_000, description="sessions kept; least recently active go first"
    )
    sessions_max_bytes: int = Field(
        default=32 << 20, ge=1 << 16, description="bytes of request details kept over all sessions"
    )
    sessions_details_per_session: int = Field(
        default=200, ge=1, le=100_000, description="request details kept per session (the newest)"
    )
    stats_history: int = Field(
        default=20_000, ge=1, le=1_000_000, description="finished requests GET /thinkproxy/stats reads"
    )

    # -- human review of tool calls ---------------------------------------------------------------
    review_tools: CommaList = Field(
        default_factory=list, description="globs of tool names held for a reviewer, e.g. send_email,delete_*"
    )
    reviewer_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Bearer keys (name:key or key) that may decide held calls"
    )
    review_timeout: float = Field(default=300.0, gt=0, description="seconds a held call waits for a decision")
    review_keepalive: float = Field(
        default=10.0, gt=0, description="seconds between keep-alives sent while a held call waits"
    )

    @field_validator(
        "allowed_upstreams",
        "client_keys",
        "admin_keys",
        "cors_origins",
        "allowed_hosts",
        "review_tools",
        "reviewer_keys",
        mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        """Lists come from the environment as comma-separated text."""
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    # -- upstream URLs and egress ---------------------------------------------------------------
    # The configured base URL is checked once here: no credentials or query (they would be printed
    # in the start-up line and in errors, and a query breaks every URL built on it), no
    # dot-segments; its path is escaped the way proxy.core.paths escapes forwarded paths.
    # EGRESS_PROXY / TRUST_ENV: how upstream connections leave the host (proxy.server.egress).
    egress_proxy: SecretStr | None = Field(
        default=None,
        description="HTTP proxy for every upstream request (CONNECT for https), e.g. http://proxy.corp:3128",
    )
    trust_env: bool = Field(
        default=False, description="Take the egress proxy from HTTPS_PROXY / HTTP_PROXY / NO_PROXY instead"
    )

    @field_validator("host")
    @classmethod
    def _check_host(cls, host: str) -> str:
        if not _is_listen_address(host):
            raise ValueError(
                f"{host[:100]!r} is not an address to listen on: give an IP address or host name "
                "(127.0.0.1, 0.0.0.0, ::)"
            )
        return host

    @field_validator("allowed_hosts")
    @classmethod
    def _check_allowed_hosts(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            name = host.removeprefix("*.")
            if host != "*" and not _is_listen_address(name):
                raise ValueError(
                    f"{host[:100]!r} is not a host name: give names only (proxy.example.com, "
                    "*.example.com or *), no scheme, port or path"
                )
        return hosts

    @field_validator("cors_origins")
    @classmethod
    def _check_cors_origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            parts = urlsplit(origin)
            if origin != "*" and (
                parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/")
            ):
                raise ValueError(
                    f"{origin[:100]!r} is not an origin: write scheme://host[:port] as a browser sends it "
                    "(https://app.example.com), or *"
                )
        return origins

    @property
    def gateway_mode(self) -> bool:
        """Gateway mode, the one definition every part of the proxy uses: clients present the keys
        of THINKPROXY_CLIENT_KEYS and the proxy sends its own upstream (proxy.core.gateway)."""
        return bool(self.client_keys)

    @field_validator("state_url")
    @classmethod
    def _check_state_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        text = value.get_secret_value().strip()
        problem = redis_url_problem(text)
        if problem is not None:
            raise ValueError(problem)
        return SecretStr(text)

    @field_validator("upstream_base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        return normalized_base_url(value)

    @field_validator("egress_proxy")
    @classmethod
    def _check_egress_proxy(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        text = value.get_secret_value().strip()
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 (raises ValueError for a bad port)
        except ValueError:
            raise ValueError("is not a valid URL (value not shown: it may hold credentials)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// proxy URL, e.g. http://proxy.corp:3128")
        return SecretStr(text)


def normalized_base_url(value: str) -> str:
    """An upstream base URL as the proxy uses it, or ValueError saying what is wrong with it. The
    value itself is never part of the message: it may hold credentials."""
    value = value.strip()
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ValueError("is not a valid URL (check the host and port)") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an absolute http:// or https:// URL, e.g. https://api.deepseek.com/v1")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError(
            "must not contain credentials (user:password@): set THINKPROXY_UPSTREAM_API_KEY, or let "
            "clients send their own key"
        )
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ValueError(
            "must not contain a query string or fragment (a key in the URL would be printed and sent "
            "with every request): set THINKPROXY_UPSTREAM_API_KEY instead"
        )
    if has_dot_segment(parts.path):
        raise ValueError("must not contain '.' or '..' path segments (in any encoding)")
    host = canonical_host(parts.hostname)
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    return f"{parts.scheme.lower()}://{netloc}{escape(parts.path).rstrip('/')}"


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _is_listen_address(host: str) -> bool:
    """An IP address literal or a DNS name (letters, digits, inner hyphens per label)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        labels = host.removesuffix(".").split(".")
        return len(host) <= 253 and all(_HOST_LABEL.match(label) for label in labels)


def redis_url_problem(url: str) -> str | None:
    """What is wrong with a Redis URL, in redis-py's own terms (the client that will use it), or
    None. The URL is never quoted: it may hold a password."""
    from redis.asyncio.connection import parse_url  # imported only when a URL is set

    try:
        parse_url(url)
    except (ValueError, TypeError) as exc:
        reason = str(exc)
        if any(secret and secret in reason for secret in (urlsplit(url).password, urlsplit(url).username)):
            reason = "it does not parse"
        return (
            f"is not a Redis URL ({reason.rstrip('.')}); use redis://[:password@]host[:port][/db], "
            "rediss://… for TLS, or unix:///path/to/socket (value not shown: it may hold a password)"
        )
    return None


def unknown_variables(names: Iterable[str]) -> list[str]:
    """A warning for each THINKPROXY_* name among `names` (the environment's, the .env file's) that
    is not a setting (a misspelling is otherwise silently ignored), naming the closest setting
    when one is close."""
    known = [name.upper() for name in Settings.model_fields]
    warnings = []
    for name in sorted(set(names)):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper[len(PREFIX) :] in known or upper in NOT_SETTINGS:
            continue
        # Compared without the shared prefix, which would make every name look close.
        close = difflib.get_close_matches(upper[len(PREFIX) :], known, n=1, cutoff=0.8)
        hint = f" (did you mean {PREFIX}{close[0]}?)" if close else ""
        warnings.append(f"{name} is not a setting and is ignored{hint}")
    return warnings
