"""Safe YAML for untrusted configs."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

from nmt.errors import short_repr

MAX_DEPTH = 32  # a config nests four levels at most (section, train_corpora, entry, file)


class StrictLoader(yaml.SafeLoader):
    """Safe YAML, stricter still: no anchors or aliases (no alias bombs), no duplicate or merge keys,
    bounded nesting, no integers too long to convert."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        """A node of the document, refused when it has an anchor or lies deeper than MAX_DEPTH."""
        event = self.peek_event()
        if event.anchor is not None:
            raise yaml.composer.ComposerError(None, None, "anchors and aliases (& and *) are not allowed",
                                              event.start_mark)
        if self.depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                              event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """A mapping, refused when a key repeats or is a merge key."""
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise yaml.constructor.ConstructorError(None, None, "merge keys (<<) are not allowed",
                                                        key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):  # an unhashable key is the base class's error
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {short_repr(key)}",
                                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer, refused when it has more digits than Python converts."""
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(None, None, "integer too long", node.start_mark) from None


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def strict_yaml(text: str) -> Any:
    """The document in `text`, read with StrictLoader (raises yaml.YAMLError with the line at fault)."""
    return yaml.load(text, Loader=StrictLoader)  # StrictLoader derives from SafeLoader
