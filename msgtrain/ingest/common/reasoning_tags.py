"""Reasoning an agent wrote into a reply's text, in tags before the answer.

aider (Aider-AI/aider ``aider/reasoning_tags.py``, ``Coder.show_send_output_stream``) puts the reasoning a model
streams in the API's reasoning field into the reply's text, wrapped in its own tag
(``<thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b>`` ... ``</thinking-content-...>``), and a model that writes its
reasoning into the text uses its own (``<think>``); both its chat transcript and its LLM history log the reply so. The
model did not write aider's tag, and aider strips the block before the next request (``remove_reasoning_content``):
read as a reasoning part, never as answer text."""

from __future__ import annotations

import re

from msgtrain.model.message import Part, ReasoningPart, TextPart

REASONING = re.compile(
    r"\A<(?P<tag>thinking-content-[0-9a-f]+|think|thinking|reasoning)>\s*(?P<text>.*?)\s*</(?P=tag)>\s*", re.S
)


def reasoning_and_answer(text: str) -> tuple[Part, ...]:
    """A reply's reasoning (when it opens with a reasoning block in tags) and its answer, stripped as aider strips it
    (``remove_reasoning_content``); a reply without such a block is its text as given."""
    match = REASONING.match(text.strip())
    if not match:
        return (TextPart(text=text),)
    parts: list[Part] = [ReasoningPart(text=match.group("text"))] if match.group("text") else []
    answer = text.strip()[match.end() :].strip()
    if answer or not parts:
        parts.append(TextPart(text=answer))
    return tuple(parts)
