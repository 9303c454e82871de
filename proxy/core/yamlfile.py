"""Reading the operator's YAML files (providers.yaml, the routes file, tool titles). Pure.

One loader for all of them: YAML 1.2 booleans (so `off:` or `no` stay strings), a duplicate key
is an error instead of silently replacing the first — in a config file that is always a mistake —
and a bare YYYY-MM-DD is a `datetime.date` (a date-shaped impossible one stays a string).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from proxy.core.errors import ConfigError


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans that rejects duplicate keys."""


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _unique_mapping(loader: ConfigLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen and key != "<<":
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


ConfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _timestamp(loader: ConfigLoader, node: yaml.ScalarNode) -> Any:
    """A date such as 2026-12-02 (a `datetime.date`); one shaped like a date but not a real one
    (2026-13-01) stays a string, so the schema that reads it names the field instead of YAML failing."""
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError:
        return loader.construct_scalar(node)


ConfigLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)


def load_config(text: str, source: str, what: str = "YAML") -> Any:
    """The document in `text`; a ConfigError naming `source` (and where) when it is not valid."""
    try:
        return yaml.load(text, Loader=ConfigLoader)
    except yaml.YAMLError as exc:
        where = str(exc).replace('"<unicode string>"', repr(source))
        raise ConfigError(f"{source}: not valid {what}: {where}") from None
