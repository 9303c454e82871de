"""The routes file's schema: what an operator may write in it, and the error wording when it is wrong.

Pure: text in, validated route specs (or one `ConfigError` naming every fault) out. Compiling the
specs into a table that answers "where does this model go" is proxy.core.config.routing's job; this module
only decides whether the file is well-formed, so it can speak the language of someone editing YAML:
every message names the file, the route (`routes[i]`, with its name or upstream) and the field.

A routes file is a mapping with one key, `routes`, a list of routes; each has `upstream` and
either `models` (globs) or `prefix`, and optionally `name` and `api_key_env`. Unknown keys are
refused rather than ignored: a misspelled `api_key_env` would otherwise silently send no key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from proxy.core.config.yamlfile import load_config
from proxy.core.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")  # it travels in headers and log lines
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9_.:-]+$")  # names (IDNA-encoded), IPv4, IPv6 without brackets


def check_base_url(value: str) -> str:
    """A base URL an operator configured: http(s), a host, no credentials, query or fragment
    (they would end up in logs and error messages, and break every URL built from it)."""
    text = value.strip().rstrip("/")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} must be an absolute http:// or https:// URL")
    if not _HOST.match(parts.hostname):
        raise ValueError(f"{value!r}: the host {parts.hostname!r} is not a host name or IP address")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials (put the key in the variable api_key_env names)")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise ValueError("must not carry a query or fragment")
    del port
    return text


class RouteSpec(BaseModel):
    """One route as written in the file, checked field by field (proxy.core.config.routing compiles it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    models: tuple[str, ...] | None = None
    prefix: str | None = None
    upstream: str
    api_key_env: str | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str | None) -> str | None:
        if name is not None and not _NAME.match(name):
            raise ValueError(f"{name!r}: names use letters, digits, '_', '.', ':', '-' (at most 64)")
        return name

    @field_validator("models", mode="before")
    @classmethod
    def _models_as_list(cls, value: object) -> object:
        # `models: deepseek-*` is the most natural slip in YAML; say what to write instead.
        if isinstance(value, str):
            raise ValueError(
                f"must be a list of model globs, not the single string {value[:100]!r}: write "
                f"models: [{value[:100]!r}] (or one '- glob' line per glob)"
            )
        return value

    @field_validator("models")
    @classmethod
    def _check_globs(cls, globs: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if globs is not None:
            if not globs:
                raise ValueError("needs at least one glob (use ['*'] for every model)")
            for glob in globs:
                if not glob.strip():
                    raise ValueError("empty model glob")
        return globs

    @field_validator("prefix")
    @classmethod
    def _check_prefix(cls, prefix: str | None) -> str | None:
        if prefix is None:
            return None
        prefix = prefix.strip()
        if not prefix.rstrip("/"):
            raise ValueError("empty prefix (write it as the models are named, e.g. openrouter/)")
        if any(c.isspace() for c in prefix) or any(c in prefix for c in "*?["):
            raise ValueError(f"{prefix!r}: a prefix is literal text, no spaces or glob characters")
        return prefix if prefix.endswith("/") else prefix + "/"

    @field_validator("upstream")
    @classmethod
    def _check_upstream(cls, upstream: str) -> str:
        return check_base_url(upstream)

    @field_validator("api_key_env")
    @classmethod
    def _check_env(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError(
                f"{name!r} is not an environment variable name (write the variable's name, never the key)"
            )
        return name

    @model_validator(mode="after")
    def _models_or_prefix(self) -> RouteSpec:
        if self.models is None and self.prefix is None:
            raise ValueError("a route needs either 'models' (globs) or 'prefix'")
        if self.models is not None and self.prefix is not None:
            raise ValueError("a route has either 'models' or 'prefix', not both")
        return self


class _RoutesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    routes: tuple[RouteSpec, ...] = Field(min_length=1)


def parse_routes(text: str, source: str = "routes.yaml") -> tuple[RouteSpec, ...]:
    """The routes of a routes file's text, validated, in file order; a ConfigError naming every
    route and field at fault (one line each) otherwise. Route names must be unique."""
    data = load_config(text, source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the file must be a mapping with a 'routes' list")
    try:
        parsed = _RoutesFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # pydantic counts only the routes that validated: a bad route also reads as "no routes".
        if len(errors) > 1:
            errors = [e for e in errors if not (e["type"] == "too_short" and tuple(e["loc"]) == ("routes",))]
        raise ConfigError("\n".join(_describe(source, data, err) for err in errors)) from None
    seen: dict[str, int] = {}
    for i, spec in enumerate(parsed.routes):
        if spec.name is not None and spec.name in seen:
            raise ConfigError(
                f"{source}: routes[{i}] ({spec.name}), field 'name': already the name of "
                f"routes[{seen[spec.name]}]; names identify routes in logs and headers"
            )
        if spec.name is not None:
            seen[spec.name] = i
    return parsed.routes


# --------------------------------------------------------------------------------------------------
# Error messages
# --------------------------------------------------------------------------------------------------


# pydantic's error types in the words of someone editing the YAML file.
_PLAIN_WORDS = {
    "missing": "is required",
    "string_type": "must be a text value",
    "tuple_type": "must be a list (one '- item' line per item, or [a, b])",
    "list_type": "must be a list (one '- item' line per item, or [a, b])",
    "dict_type": "must be a mapping (key: value lines)",
    "model_type": "must be a mapping (key: value lines)",
}


def _describe(source: str, data: Mapping[str, Any], err: Mapping[str, Any]) -> str:
    loc = tuple(err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    message = _PLAIN_WORDS.get(str(err["type"]), message)
    if err["type"] == "extra_forbidden":
        message = (
            f"unknown key {loc[-1]!r} (a route has name, models, prefix, upstream, api_key_env)"
            if len(loc) >= 3
            else f"unknown key {loc[-1]!r} (the file has one key, routes)"
        )
    if len(loc) >= 2 and loc[0] == "routes" and isinstance(loc[1], int):
        index = loc[1]
        where = f"routes[{index}]"
        routes = data.get("routes")
        if isinstance(routes, list) and index < len(routes) and isinstance(routes[index], dict):
            name = routes[index].get("name") or routes[index].get("upstream")
            if isinstance(name, str):
                where += f" ({name})"
        field = ".".join(str(p) for p in loc[2:])
        if err["type"] == "extra_forbidden" and field:
            return f"{source}: {where}, field {field!r}: {message}"
        return f"{source}: {where}, field {field!r}: {message}" if field else f"{source}: {where}: {message}"
    return f"{source}: field {'.'.join(str(p) for p in loc)!r}: {message}"
