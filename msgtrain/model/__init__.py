"""The typed model every stage shares: messages (message.py), the graph (graph.py), builders, validation.

This package imports no pipeline stage.
"""

from msgtrain.model.builder import MessageBuilder, OptionResultBuilder
from msgtrain.model.graph import Branch, EdgeKind, Env, MessageGraph, Node, Origin, ParallelEdge
from msgtrain.model.graphlog import load_graphs
from msgtrain.model.message import (
    AnyMessage,
    Generation,
    MediaPart,
    Message,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    PartsMessage,
    ReasoningPart,
    TextPart,
    parse_message,
)
from msgtrain.model.openai import from_openai_messages, to_openai_messages

__all__ = [
    "AnyMessage",
    "Branch",
    "EdgeKind",
    "Env",
    "Generation",
    "MediaPart",
    "Message",
    "MessageBuilder",
    "MessageGraph",
    "Node",
    "OptionCallMessage",
    "OptionCallPayload",
    "OptionResultBuilder",
    "OptionResultMessage",
    "OptionResultPayload",
    "Origin",
    "ParallelEdge",
    "PartsMessage",
    "ReasoningPart",
    "TextPart",
    "from_openai_messages",
    "load_graphs",
    "parse_message",
    "to_openai_messages",
]
