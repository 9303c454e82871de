"""Process settings, read once from `THINKPROXY_*` environment variables and, for any not set
there, from a `.env` file in the working directory if one exists (documented in the README).

Built in the app factory / CLI and passed down; nothing reads the environment after start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from proxy.levels import Level, ReasoningField, ReasoningVisibility, TraceFormat, TraceMode
from proxy.paths import escape, has_dot_segment
from proxy.sse import DEFAULT_MAX_EVENT_BYTES
from proxy.url_patterns import canonical_host

CommaList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THINKPROXY_", env_file=".env", extra="ignore")

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
    allowed_upstreams: CommaList = Field(
        default_factory=list,
        description="Patterns a client may name in X-Upstream-Base-URL (comma-separated); empty = refused",
    )
    default_thinking_level: Level | None = None
    trace: TraceMode = TraceMode.BRIEF
    trace_format: TraceFormat = TraceFormat.COMMENT
    reasoning_visibility: ReasoningVisibility = ReasoningVisibility.SHOW
    reasoning_field: ReasoningField = ReasoningField.REASONING_CONTENT

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
    ui_history: int = Field(
        default=200, ge=1, le=10_000, description="recent requests the console's live view keeps"
    )
    tool_titles_file: Path | None = Field(
        default=None, description="YAML/JSON map of tool name to {zh, en} display title (trace, console)"
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
    # dot-segments; its path is escaped the way proxy.paths escapes forwarded paths.
    # EGRESS_PROXY / TRUST_ENV: how upstream connections leave the host (proxy.egress).
    egress_proxy: SecretStr | None = Field(
        default=None,
        description="HTTP proxy for every upstream request (CONNECT for https), e.g. http://proxy.corp:3128",
    )
    trust_env: bool = Field(
        default=False, description="Take the egress proxy from HTTPS_PROXY / HTTP_PROXY / NO_PROXY instead"
    )

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
