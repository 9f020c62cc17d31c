"""The probe conversations ``audit-template`` renders, one per template feature.

Invariants:
- Probes are written as OpenAI chat messages and passed through msgtrain's own model round trip
  (``from_openai_messages`` then ``to_openai_message(for_template=True)``), so templates see exactly the dicts
  msgtrain renders training data from (with its aliases: ``thinking`` next to ``reasoning_content``, flat
  ``name``/``arguments`` next to ``function`` on tool calls).
- Every message carries text no other message has (its *markers*: content, reasoning, call arguments), so the
  audit can find where each message ended up in a render and whether a template dropped it.
- Assistant turns come after a user or tool message, so "messages before it + generation prompt" is the context
  the policy saw when it sampled the turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msgtrain.model.openai import from_openai_messages, to_openai_message

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name."}},
            "required": ["city"],
        },
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name."}},
            "required": ["city"],
        },
    },
}


@dataclass(frozen=True)
class Probe:
    """One conversation exercising one feature.

    ``markers[i]`` are strings the render of ``messages[: i + 1]`` must contain (the message's text, reasoning,
    call arguments); a template that renders the conversation without them dropped that part.
    ``later_day`` asks for later renders to happen on another day than the turns they check (date templates).
    """

    feature: str
    description: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    markers: dict[int, tuple[str, ...]] = field(default_factory=dict)
    later_day: bool = False

    @property
    def assistant_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m["role"] == "assistant"]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str, reasoning: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return msg


def _calls(*calls: tuple[str, str, str], text: str = "", reasoning: str | None = None) -> dict[str, Any]:
    msg = _assistant(text, reasoning)
    msg["tool_calls"] = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": {"city": city}}}
        for cid, name, city in calls
    ]
    return msg


def _result(call_id: str, name: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}


def _markers_of(messages: tuple[dict[str, Any], ...]) -> dict[int, tuple[str, ...]]:
    out: dict[int, tuple[str, ...]] = {}
    for i, m in enumerate(messages):
        found: list[str] = []
        content = m.get("content")
        if isinstance(content, str) and content:
            found.append(content)
        elif isinstance(content, list):
            found.extend(p["text"] for p in content if p.get("type") == "text")
        if m.get("reasoning_content"):
            found.append(m["reasoning_content"])
        found.extend(c["function"]["arguments"]["city"] for c in m.get("tool_calls", ()))
        out[i] = tuple(found)
    return out


def _probe(
    feature: str,
    description: str,
    *messages: dict[str, Any],
    tools: tuple[dict[str, Any], ...] = (),
    later_day: bool = False,
) -> Probe:
    rendered = tuple(to_openai_message(m, for_template=True) for m in from_openai_messages(messages))
    return Probe(feature, description, rendered, tools, _markers_of(messages), later_day)


MULTI_TURN = (
    _user("What is 2 + 2? (q1)"),
    _assistant("2 + 2 = 4. (a1)"),
    _user("And 3 + 3? (q2)"),
    _assistant("3 + 3 = 6. (a2)"),
    _user("Thanks! (q3)"),
    _assistant("You are welcome. (a3)"),
)

PROBES: tuple[Probe, ...] = (
    _probe("multi_turn", "three user/assistant exchanges", *MULTI_TURN),
    _probe(
        "system_prompt",
        "a system prompt, then two exchanges",
        {"role": "system", "content": "You are terse. (s1)"},
        _user("Name a colour. (q1)"),
        _assistant("Blue. (a1)"),
        _user("Another one. (q2)"),
        _assistant("Red. (a2)"),
    ),
    _probe(
        "multi_user",
        "two user messages in a row before each answer",
        _user("I have a question. (q1)"),
        _user("What is the capital of France? (q2)"),
        _assistant("Paris. (a1)"),
        _user("And of Italy? (q3)"),
        _user("Answer briefly. (q4)"),
        _assistant("Rome. (a2)"),
    ),
    _probe(
        "tool_calls",
        "a tool call, its result, an answer, then a second call in a later exchange",
        _user("Weather in the French capital? (q1)"),
        _calls(("call_1", "get_weather", "Paris")),
        _result("call_1", "get_weather", "Sunny, 21 C (r1)"),
        _assistant("It is sunny there. (a1)"),
        _user("And in the city of silk? (q2)"),
        _calls(("call_2", "get_weather", "Lyon"), text="Checking. (a2)"),
        _result("call_2", "get_weather", "Rain, 14 C (r2)"),
        _assistant("It is raining there. (a3)"),
        tools=(WEATHER_TOOL,),
    ),
    _probe(
        "parallel_tool_calls",
        "one assistant message with two tool calls, two results, an answer",
        _user("Weather on the Riviera, and the time next door? (q1)"),
        _calls(("call_1", "get_weather", "Nice"), ("call_2", "get_time", "Monaco")),
        _result("call_1", "get_weather", "Windy, 18 C (r1)"),
        _result("call_2", "get_time", "14:05 (r2)"),
        _assistant("Windy and 18 C; it is 14:05 next door. (a1)"),
        _user("Thanks. (q2)"),
        _assistant("Any time. (a2)"),
        tools=(WEATHER_TOOL, TIME_TOOL),
    ),
    _probe(
        "reasoning",
        "assistant turns with reasoning, across two exchanges",
        _user("Is 17 prime? (q1)"),
        _assistant("Yes, 17 is prime. (a1)", reasoning="17 has no divisor between 2 and 4. (t1)"),
        _user("Is 21 prime? (q2)"),
        _assistant("No, 21 = 3 x 7. (a2)", reasoning="21 is divisible by 3. (t2)"),
    ),
    _probe(
        "reasoning_tools",
        "reasoning before a tool call and before the answer, within one exchange",
        _user("Should I take an umbrella in the French capital? (q1)"),
        _calls(("call_1", "get_weather", "Paris"), reasoning="I need the forecast first. (t1)"),
        _result("call_1", "get_weather", "Rain, 12 C (r1)"),
        _assistant("Yes, it is raining. (a1)", reasoning="Rain means umbrella. (t2)"),
        tools=(WEATHER_TOOL,),
    ),
    _probe(
        "images",
        "a user message with an image part, then a text exchange",
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "text", "text": "What animal is this? (q1)"},
            ],
        },
        _assistant("A cat. (a1)"),
        _user("What colour is it? (q2)"),
        _assistant("Grey. (a2)"),
    ),
    _probe(
        "date",
        "the multi-turn conversation, re-rendered on a later day than it was sampled",
        *MULTI_TURN,
        later_day=True,
    ),
)

FEATURES: tuple[str, ...] = tuple(p.feature for p in PROBES)
