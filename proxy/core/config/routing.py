"""The compiled routes: which upstream a request's model goes to, and the merged `/v1/models` list.

Pure apart from reading the routes file in `RouteTable.load` and the `.env` file in
`key_environment` (start-up only, never per request). A routes file (`THINKPROXY_ROUTES_FILE`) is a
YAML mapping with one key, `routes`, a list tried in order; the first route that matches the
request's `model` wins, and nothing ever falls back to a later route once one matched:

    routes:
      - models: ["deepseek-*"]             # case-insensitive globs on the model
        upstream: https://api.deepseek.com/v1
        api_key_env: DEEPSEEK_API_KEY      # gateway mode: the variable holding this route's key
      - prefix: openrouter/                # matched case-insensitively and stripped before sending
        upstream: https://openrouter.ai/api/v1
        api_key_env: OPENROUTER_API_KEY

`THINKPROXY_UPSTREAM_BASE_URL`, when set, becomes an implicit last route for every model. A model no
route matches is a 404 `model_not_found`. The file's schema and its error wording (which name the
route, `routes[i]`, and the field at fault) are proxy.core.config.routes_file's; this module compiles the
validated routes into a table, answers lookups (cached per model), and merges the upstreams' model
lists into the one `/v1/models` answer.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson
from dotenv import dotenv_values

from proxy.core import jsonio
from proxy.core.body_splice import splice
from proxy.core.config.routes_file import RouteSpec, parse_routes
from proxy.core.config.yamlfile import decode_config
from proxy.core.errors import ConfigError, NotFound, quoted

DEFAULT_ROUTE_NAME = "default"  # the implicit last route made of THINKPROXY_UPSTREAM_BASE_URL
_CACHE_LIMIT = 4096  # models looked up; a table answers the same model the same way
_CACHED_MODEL_CHARS = 256  # longer (client-chosen) names are matched every time, never kept


# --------------------------------------------------------------------------------------------------
# The compiled table
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    """One compiled route. `index` is its place in the file (the implicit default route comes last);
    `api_key_env` names the variable whose value this route sends upstream in gateway mode."""

    index: int
    name: str
    upstream: str
    globs: tuple[str, ...] = ()
    prefix: str | None = None
    api_key_env: str | None = None
    implicit: bool = False  # made of THINKPROXY_UPSTREAM_BASE_URL, not written in the file
    _compiled: tuple[re.Pattern[str], ...] = ()

    @property
    def pattern_text(self) -> str:
        """How this route's patterns read in a 404 message."""
        if self.prefix is not None:
            return f"{self.prefix}*"
        return ", ".join(self.globs)

    def upstream_model(self, model: str) -> str | None:
        """The model to send upstream if this route takes `model` (prefix stripped), else None."""
        if self.prefix is not None:
            if len(model) > len(self.prefix) and model[: len(self.prefix)].lower() == self.prefix.lower():
                return model[len(self.prefix) :]
            return None
        return model if any(rx.match(model) for rx in self._compiled) else None

    def listed_id(self, upstream_id: str) -> str:
        """How a model the upstream lists is named to clients."""
        return self.prefix + upstream_id if self.prefix is not None else upstream_id


def _compile_globs(globs: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(fnmatch.translate(g.strip()), re.IGNORECASE | re.DOTALL) for g in globs)


def _route(index: int, spec: RouteSpec) -> Route:
    globs = tuple(g.strip() for g in spec.models or ())
    return Route(
        index=index,
        name=spec.name or _host_name(spec.upstream),
        upstream=spec.upstream,
        globs=globs,
        prefix=spec.prefix,
        api_key_env=spec.api_key_env,
        _compiled=_compile_globs(globs),
    )


def _host_name(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "upstream"
    return f"{host}:{parts.port}" if parts.port else host


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one request goes: decided before anything is sent.

    `route` is None when the proxy has no routes file (the configured upstream) or the client named
    the upstream itself (`client_chosen`). `model` is the model to send when it differs from the
    client's (a prefix route strips its prefix), else None.
    """

    base_url: str
    route: Route | None = None
    model: str | None = None
    client_chosen: bool = False


class RouteTable:
    """The validated routes, in order; `destination(model)` picks one or raises a 404."""

    def __init__(self, routes: tuple[Route, ...], source: str) -> None:
        self.routes = routes
        self.source = source
        self._cache: dict[str, Destination | None] = {}

    # ---- construction -----------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path, default_upstream: str | None = None) -> RouteTable:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the routes file: {exc.strerror or exc}") from None
        text = decode_config(data, str(path))
        return cls.from_text(text, source=Path(path).name, default_upstream=default_upstream)

    @classmethod
    def from_text(
        cls, text: str, source: str = "routes.yaml", default_upstream: str | None = None
    ) -> RouteTable:
        specs = parse_routes(text, source)
        routes = [_route(i, spec) for i, spec in enumerate(specs)]
        if default_upstream is not None:
            routes.append(
                Route(
                    index=len(routes),
                    name=DEFAULT_ROUTE_NAME,
                    upstream=default_upstream.rstrip("/"),
                    globs=("*",),
                    implicit=True,
                    _compiled=_compile_globs(["*"]),
                )
            )
        return cls(tuple(routes), source)

    # ---- lookup -----------------------------------------------------------------------------------

    def match(self, model: str) -> tuple[Route, str] | None:
        """The first route taking `model` and the model it sends upstream, or None."""
        for route in self.routes:
            sent = route.upstream_model(model)
            if sent is not None:
                return route, sent
        return None

    def destination(self, model: object) -> Destination:
        """Where a request for `model` goes; a 404 `model_not_found` when no route takes it."""
        if not isinstance(model, str):
            last = self.routes[-1]
            if last.implicit:  # a request naming no model goes to THINKPROXY_UPSTREAM_BASE_URL
                return Destination(last.upstream, last)
            raise self.not_found(model)
        cache = self._cache
        if model in cache:
            destination = cache[model]
        else:
            found = self.match(model)
            destination = None if found is None else Destination(found[0].upstream, found[0], found[1])
            if destination is not None and destination.model == model:
                destination = Destination(destination.base_url, destination.route)
            if len(model) <= _CACHED_MODEL_CHARS:  # the model is client-chosen: the cache stays bounded
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[model] = destination
        if destination is None:
            raise self.not_found(model)
        return destination

    def not_found(self, model: object) -> NotFound:
        patterns = "; ".join(f"{r.name}: {r.pattern_text}" for r in self.routes)
        if not isinstance(model, str):
            what = "The request names no model (a string 'model' field)"
        else:
            what = f"The model {quoted(model)} matches no route"
        return NotFound(
            f"{what}; this proxy routes these models: {patterns}. Use one of them, or add a route "
            f"to {self.source}.",
            param="model",
        )

    def describe(self, route: Route) -> str:
        """One line for `thinkproxy explain`: which route, how it matched, where it sends."""
        how = f"prefix {route.prefix!r} (stripped)" if route.prefix else f"models {list(route.globs)}"
        origin = (
            "THINKPROXY_UPSTREAM_BASE_URL, the last route" if route.implicit else f"routes[{route.index}]"
        )
        key = f", key from ${route.api_key_env} in gateway mode" if route.api_key_env else ""
        return f"{route.name} ({origin}; {how}) -> {route.upstream}{key}"


def key_environment(environ: Mapping[str, str], env_file: Path = Path(".env")) -> dict[str, str]:
    """The variables route keys are read from: the process environment over a `.env` file in the
    working directory, the same file the THINKPROXY_* settings may come from."""
    values: dict[str, str] = {}
    if env_file.is_file():
        values.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
    values.update(environ)
    return values


def resolve_route_keys(table: RouteTable, environ: Mapping[str, str], *, gateway: bool) -> dict[int, str]:
    """Each route's key from the environment, by route index. In gateway mode a route that names a
    variable which is unset or empty stops start-up (ConfigError naming the route and the field)."""
    keys: dict[int, str] = {}
    problems = []
    for route in table.routes:
        if route.api_key_env is None:
            continue
        value = environ.get(route.api_key_env, "").strip()
        if value:
            keys[route.index] = value
        elif gateway:
            problems.append(
                f"{table.source}: routes[{route.index}] ({route.name}), field 'api_key_env': the variable "
                f"{route.api_key_env} is unset or empty; gateway mode (THINKPROXY_CLIENT_KEYS) sends "
                "each route's own key, so set it (or remove api_key_env if the upstream needs no key)."
            )
    if problems:
        raise ConfigError("\n".join(problems))
    return keys


def request_model(path: str, body: bytes) -> str | None:
    """The model a request other than a chat completion is for: `GET /v1/models/{id}`'s id, or a
    JSON body's string `model` (embeddings, completions, …); None when it names none."""
    if path.startswith("/v1/models/"):
        return unquote(path[len("/v1/models/") :]) or None
    if not body or body.lstrip()[:1] != b"{":
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


def replace_model(parsed: dict[str, Any] | None, body: bytes, model: str) -> bytes:
    """The request body with its `model` replaced (a prefix route strips its prefix), every other
    byte as it came (proxy.core.body_splice: a native upstream may bind reasoning to the exact
    bytes of the history, as Anthropic's preserved thinking does)."""
    if parsed is not None:
        before = dict(parsed)
        parsed["model"] = model
        if not body:  # (a body the proxy built: nothing to keep)
            return jsonio.dumps(parsed)  # (a parsed chat body may hold integers above 64 bits)
        return splice(body, before, parsed)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body  # (request_model found no model in it, so there is nothing to replace)
    if not isinstance(data, dict):
        return body
    return splice(body, data, {**data, "model": model})


# --------------------------------------------------------------------------------------------------
# /v1/models
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Listing:
    """One upstream to ask for its models, and the routes it serves (in table order)."""

    upstream: str
    routes: tuple[Route, ...]

    @property
    def name(self) -> str:
        return "+".join(dict.fromkeys(r.name for r in self.routes))


def listings(table: RouteTable) -> list[Listing]:
    """The distinct upstreams (with the same key) to list, in table order; each is asked once."""
    groups: dict[tuple[str, str | None], list[Route]] = {}
    for route in table.routes:
        groups.setdefault((route.upstream, route.api_key_env), []).append(route)
    return [Listing(upstream, tuple(routes)) for (upstream, _), routes in groups.items()]


def model_ids(payload: Any) -> list[dict[str, Any]] | None:
    """The `data` items with a string `id` of an OpenAI-style model list, or None if it is not one."""
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        return None
    return [item for item in payload["data"] if isinstance(item, dict) and isinstance(item.get("id"), str)]


def merge_models(
    table: RouteTable, answers: Sequence[tuple[Listing, list[dict[str, Any]] | None]]
) -> tuple[dict[str, Any], list[str]]:
    """The merged model list and the names of the listings that failed (answer None).

    A model appears under the name a client would use, once, and only where a request for that
    name would actually be routed: an id that an earlier route takes is not listed twice.
    """
    data: list[dict[str, Any]] = []
    seen: set[str] = set()
    missing: list[str] = []
    for listing, items in answers:
        if items is None:
            missing.append(listing.name)
            continue
        for route in listing.routes:
            for item in items:
                shown = route.listed_id(item["id"])
                if shown in seen:
                    continue
                found = table.match(shown)
                if found is None or found[0] is not route:
                    continue
                seen.add(shown)
                data.append(item if shown == item["id"] else {**item, "id": shown})
    return {"object": "list", "data": data}, missing
