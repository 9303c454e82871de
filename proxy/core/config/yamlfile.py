"""Reading the operator's YAML files (providers.yaml, the routes file, the policy file, tool
titles). Pure.

One loader for all of them: YAML 1.2 booleans (so `off:` or `no` stay strings), a duplicate key
is an error instead of silently replacing the first — in a config file that is always a mistake —
and a bare YYYY-MM-DD is a `datetime.date` (a date-shaped impossible one stays a string).

What a file may cost is bounded before anything is built from it: an alias repeats its anchor's
whole subtree wherever it stands, so nine lines of nested aliases (a "billion laughs") are a
billion nodes to whatever walks the result (a SIGHUP reload of the policy file took a gateway's
memory). Aliases may add at most MAX_ALIAS_NODES nodes and MAX_ALIAS_CHARS characters of scalars
to what is written; an alias inside its own anchor (an endless document) and nesting deeper than
MAX_DEPTH are refused too. Each refusal, like a file that is not UTF-8 (`decode_config`), is one
line naming the file (a syntax error too: one line, with where it is).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from proxy.core.errors import ConfigError

MAX_ALIAS_NODES = 10_000  # nodes aliases may add to a document (providers.yaml has ~1,800 in all)
MAX_ALIAS_CHARS = 1_000_000  # characters of scalars aliases may add
MAX_DEPTH = 64  # levels of nesting (providers.yaml has 10)


class _Refused(yaml.YAMLError):
    """A document the loader will not build: its one-line reason (see load_config)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans that rejects duplicate keys, and documents that aliases
    would expand past the bounds above, that never end or that nest too deeply."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases: list[tuple[int, str, yaml.Node]] = []  # (line, anchor, node) of each alias

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.current_event  # (the event check_event just peeked at)
            node = super().compose_node(parent, index)
            if node is not None:
                self._aliases.append((event.start_mark.line + 1, str(event.anchor), node))
            return node
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                self.check_event()  # (peeks at the node's first event: current_event)
                line = self.current_event.start_mark.line + 1
                raise _Refused(line, f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        self._aliases = []
        node = super().compose_document()
        if node is not None and self._aliases:
            _check_expansion(node, self._aliases)
        return node


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
        if key_node.tag == _MERGE:
            continue  # `<<: *base`: merged by construct_mapping, whose keys the mapping's own override
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_MERGE = "tag:yaml.org,2002:merge"
ConfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _timestamp(loader: ConfigLoader, node: yaml.ScalarNode) -> Any:
    """A date such as 2026-12-02 (a `datetime.date`); one shaped like a date but not a real one
    (2026-13-01) stays a string, so the schema that reads it names the field instead of YAML failing."""
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError:
        return loader.construct_scalar(node)


ConfigLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, aliases: list[tuple[int, str, yaml.Node]]) -> None:
    """Refuse a document whose aliases add more than the bounds to it, or that contains itself.
    Counted, never expanded: each distinct node's expanded size once (iteratively, children
    first), so a billion-node document costs what its few written nodes do."""
    nodes: dict[int, int] = {}  # id(node) -> nodes in its expanded subtree, itself included
    chars: dict[int, int] = {}  # id(node) -> characters of the scalars in it
    written_nodes = written_chars = 0
    open_: set[int] = set()  # the nodes being counted: the path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_.discard(key)
            own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            kids = _children(node)
            nodes[key] = 1 + sum(nodes[id(kid)] for kid in kids)
            chars[key] = own + sum(chars[id(kid)] for kid in kids)
            written_nodes += 1
            written_chars += own
            continue
        if key in nodes:
            continue  # (reached again through an alias: counted once)
        if key in open_:
            line, anchor = next(((ln, name) for ln, name, n in aliases if n is node), (1, "?"))
            raise _Refused(
                line, f"the alias *{anchor} stands inside its own anchor: the document would never end"
            )
        open_.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node))
    added_nodes, added_chars = nodes[id(root)] - written_nodes, chars[id(root)] - written_chars
    if added_nodes > MAX_ALIAS_NODES or added_chars > MAX_ALIAS_CHARS:
        line, anchor, _ = max(aliases, key=lambda alias: nodes[id(alias[2])] + chars[id(alias[2])])
        what = (
            f"{added_nodes:,} nodes (at most {MAX_ALIAS_NODES:,})"
            if added_nodes > MAX_ALIAS_NODES
            else f"{added_chars:,} characters (at most {MAX_ALIAS_CHARS:,})"
        )
        raise _Refused(
            line,
            f"its aliases would add {what} to what is written (the largest: *{anchor}): write the "
            "repeated part out, or use fewer aliases",
        )


def decode_config(data: bytes, source: str) -> str:
    """The text of a file's bytes; a one-line ConfigError naming `source`, the byte offset and the
    line when they are not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{source}: not UTF-8: byte {exc.start} (0x{data[exc.start]:02x}, line {line}); "
            "save the file as UTF-8"
        ) from None


def load_config(text: str, source: str, what: str = "YAML") -> Any:
    """The document in `text`; a ConfigError naming `source` (and where) when it is not valid."""
    try:
        return yaml.load(text, Loader=ConfigLoader)
    except _Refused as exc:
        raise ConfigError(f"{source}:{exc.line}: refused: {exc.reason}") from None
    except yaml.MarkedYAMLError as exc:
        said = "; ".join(part for part in (exc.context, exc.problem) if part)
        mark = exc.problem_mark or exc.context_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ConfigError(f"{source}: not valid {what}: {said}{at}") from None
    except yaml.YAMLError as exc:  # (a character YAML does not allow)
        where = " ".join(str(exc).replace('"<unicode string>"', repr(source)).split())
        raise ConfigError(f"{source}: not valid {what}: {where}") from None
