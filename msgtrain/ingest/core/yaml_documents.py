"""YAML documents read whole, refusing an alias expansion bomb (recorded cassettes, YAML records)."""

from typing import Any

import yaml

from msgtrain.errors import ParseError

# YAML aliases let a few hundred bytes name a billion nodes (the "billion laughs"); whatever walks the loaded data
# then walks every repetition. A document whose aliases repeat its nodes more than this is refused before it is
# built.
MAX_YAML_EXPANSION = 10
MIN_YAML_EXPANDED_LIMIT = 100_000


def _yaml_node_counts(root: yaml.Node) -> tuple[int, int]:
    """(distinct nodes, nodes once every alias is expanded) of a composed YAML document; a recursive alias counts
    as unbounded. Iterative: memoised per node, so linear in the distinct nodes whatever the expansion."""
    expanded: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c in _yaml_children(node))
            continue
        if key in expanded:
            continue
        if key in on_path:  # an alias inside its own anchor: infinite once expanded
            return len(expanded), 1 << 62
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _yaml_children(node) if id(c) not in expanded)
    return len(expanded), expanded[id(root)]


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml_bounded(stream: Any, where: str) -> Any:
    """``yaml.safe_load`` that refuses an alias expansion bomb before constructing anything."""
    loader = yaml.SafeLoader(stream)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        distinct, expanded = _yaml_node_counts(node)
        if expanded > max(MIN_YAML_EXPANDED_LIMIT, MAX_YAML_EXPANSION * distinct):
            raise ParseError(
                f"YAML aliases expand {distinct} nodes to {expanded if expanded < 1 << 62 else 'infinitely many'}",
                where=where,
                code="yaml_alias_bomb",
                hint="a recorded cassette does not repeat itself through aliases; drop the file",
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()
