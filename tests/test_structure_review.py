"""The structural reader's shared mechanisms at scale and at their edges: openings marked on deep trees in one walk,
calls written as text, the history a scored group shares, Bedrock Converse blocks kept outside a Converse request."""

from __future__ import annotations

from typing import Any

import pytest

from msgtrain.ingest.structure.steps import scripted_openings
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import PartsMessage, TextPart


class _CountingDict(dict[Any, Any]):
    """A dict that counts lookups and fails once they pass ``budget``: work bounded by operations, not by time."""

    def __init__(self, data: dict[Any, Any], budget: int):
        super().__init__(data)
        self.lookups = 0
        self.budget = budget

    def _count(self) -> None:
        self.lookups += 1
        if self.lookups > self.budget:
            raise AssertionError(f"more than {self.budget} lookups")

    def __getitem__(self, key: Any) -> Any:
        self._count()
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._count()
        return super().get(key, default)


def _message(role: str, text: str) -> PartsMessage:
    return PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm=role)


def _budgeted(graph: MessageGraph, per_node: int) -> None:
    budget = per_node * len(graph.nodes)
    graph.nodes = _CountingDict(graph.nodes, budget)
    graph.children = _CountingDict(graph.children, budget)


def test_scripted_openings_walk_a_deep_conversation_in_linear_operations() -> None:
    # 20k messages deep: a reply per level, each under the whole conversation above it
    graph = MessageGraph(graph_id="deep")
    parent = graph.add_node(None, _message("system", "Be brief."))
    for i in range(10_000):
        parent = graph.add_node(parent, _message("user", f"q{i}"))
        parent = graph.add_node(parent, _message("assistant", f"a{i}"), origin=Origin.SAMPLED)
    _budgeted(graph, per_node=4)
    scripted_openings(graph)
    assert sum(n.origin is Origin.SAMPLED for n in graph.nodes.values()) == 10_000  # every reply answers a user


def test_scripted_openings_walk_a_deep_chain_of_system_messages_in_linear_operations() -> None:
    # 20k nodes: 10k system messages deep, an opening reply hung under each (each one's path is all system)
    graph = MessageGraph(graph_id="deep-system")
    parent = None
    openers = []
    for i in range(10_000):
        parent = graph.add_node(parent, _message("system", f"s{i}"))
        openers.append(graph.add_node(parent, _message("assistant", f"hello {i}"), origin=Origin.SAMPLED))
    answered = graph.add_node(parent, _message("user", "hi"))
    reply = graph.add_node(answered, _message("assistant", "hi back"), origin=Origin.SAMPLED)
    _budgeted(graph, per_node=4)
    scripted_openings(graph)
    assert all(graph.nodes[n].origin is Origin.INJECTED for n in openers)
    assert graph.nodes[reply].origin is Origin.SAMPLED


@pytest.mark.parametrize("evidence", ["usage", "finish_reason", None])
def test_an_opening_reply_logged_with_what_only_a_model_call_reports_stays_a_turn(evidence: str | None) -> None:
    from msgtrain.model.message import Generation

    graph = MessageGraph(graph_id="opening")
    system = graph.add_node(None, _message("system", "You are a bot."))
    message = _message("assistant", "Hi! How can I help you today?")
    generation = None
    if evidence == "usage":
        message = message.model_copy(update={"metadata": {"usage": {"prompt_tokens": 12}}})
    elif evidence == "finish_reason":
        generation = Generation(finish_reason="stop")
    opener = graph.add_node(system, message, origin=Origin.SAMPLED, generation=generation)
    scripted_openings(graph)
    assert graph.nodes[opener].origin is (Origin.INJECTED if evidence is None else Origin.SAMPLED)
    assert (opener in graph.generations) is (evidence == "finish_reason")


def test_a_scored_group_shares_the_history_its_rollouts_hold_value_for_value() -> None:
    from datetime import datetime

    from msgtrain.ingest.structure.found import group_history

    def rollout(stamp: Any, last: str) -> list[Any]:
        return [
            {"role": "user", "content": "step 1"},
            {"role": "assistant", "content": "move a", "at": stamp},
            {"role": "user", "content": "step 2", "score": 1},
            {"role": "assistant", "content": last},
        ]

    when = datetime(2025, 1, 2, 3, 4, 5)
    assert group_history([rollout(when, "b"), rollout(when, "c")]) == 1  # the first reply is the group's history
    assert group_history([rollout(when, "b"), rollout(when, "c"), rollout(when, "d")]) == 1
    # a date a YAML log holds is not the text of that date, nor 1 the same as true or 1.0: the rollouts differ there
    assert group_history([rollout(when, "b"), rollout(str(when), "c")]) == 0
    assert group_history([rollout(1, "b"), rollout(True, "c")]) == 0
    assert group_history([rollout(1, "b"), rollout(1.0, "c")]) == 0
    # the order of an object's keys is no difference
    reordered = rollout(when, "c")
    reordered[1] = {"at": when, "content": "move a", "role": "assistant"}
    assert group_history([rollout(when, "b"), reordered]) == 1
    assert group_history([rollout(float("nan"), "b"), rollout(float("nan"), "c")]) == 1


_ORIGINAL_MARKUP = r"<tool_call>|<functioncall>|<function=[\w.-]+>|<\|python_tag\|>|\[TOOL_CALLS\]"


def test_the_text_call_scan_finds_what_the_full_markup_pattern_finds_over_seeded_texts() -> None:
    # oracle: the markup as one alternation searched over the whole text, and the JSON of calls parsed outright
    import json
    import random
    import re

    from msgtrain.ingest.common.content_parts import text_calls

    def oracle(text: str) -> bool:
        if re.search(_ORIGINAL_MARKUP, text):
            return True
        if not text.lstrip().startswith(("{", "[")):
            return False
        try:
            value = json.loads(text)
        except ValueError:
            return False
        calls = value if isinstance(value, list) else [value]
        return bool(calls) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)

    pieces = [
        "<tool_call>", "</tool_call>", "<functioncall>", "<function=", "get.w-1", ">", "<|python_tag|>", "<|python",
        "[TOOL_CALLS]", "[TOOL_CALL", "<", "[", "{", '"name"', ": ", '"f"', "}", "]", " ", "\n", "text", "<div>",
        "function", "call>", "=", "```",
    ]  # fmt: skip
    rng = random.Random(36)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(5000)]
    texts += [json.dumps(v) for v in ({"name": "f"}, [{"name": "f", "arguments": {}}], {"answer": 1}, [], [1])]
    assert [text_calls(t) for t in texts] == [oracle(t) for t in texts]
    assert text_calls([{"type": "text", "text": "see "}, {"type": "text", "text": "<tool_call>{}</tool_call>"}])


def test_a_long_reply_that_holds_no_call_is_not_parsed_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from msgtrain.ingest.common.content_parts import text_calls

    answer = json.dumps({"answer": "x" * 100_000, "steps": list(range(1000))})

    def parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed a reply that names no function")

    monkeypatch.setattr(json, "loads", parse)
    assert not text_calls(answer)
    assert not text_calls("a < b and c > d " * 10_000)


_QUOTED = 'Write it like this:\n```\n<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>\n```'


def test_a_reply_that_quotes_a_call_stays_its_text_and_only_an_idless_tool_message_after_it_answers_it() -> None:
    from msgtrain.errors import ValidationError
    from msgtrain.ingest.common.shapes import normalise_messages
    from msgtrain.model.openai import TEXT_CALL_RESULT

    user = {"role": "user", "content": "How do I call search?"}
    quoted = {"role": "assistant", "content": _QUOTED}
    out, _ = normalise_messages([user, quoted, {"role": "user", "content": "thanks"}], "$")
    assert out == [user, {"role": "assistant", "content": _QUOTED}, {"role": "user", "content": "thanks"}]
    # the tool message after it is the one thing that says the quoted markup was the call it sampled (the rule)
    out, _ = normalise_messages([user, quoted, {"role": "tool", "content": "3 hits"}], "$")
    assert out[1] == {"role": "assistant", "content": _QUOTED}
    assert out[2] == {"role": "tool", "content": "3 hits", TEXT_CALL_RESULT: True}
    # a reply without markup does not make an id-less tool message after it a result: it answers nothing
    plain = {"role": "assistant", "content": "I will call the search function (tool_call) now."}
    with pytest.raises(ValidationError) as e:
        normalise_messages([user, plain, {"role": "tool", "content": "3 hits"}], "$")
    assert e.value.code == "unpaired_result"
    # nor a tool message that names a call id: that pairs with a structured call, or with nothing
    with pytest.raises(ValidationError) as e:
        normalise_messages([user, quoted, {"role": "tool", "tool_call_id": "c1", "content": "3 hits"}], "$")
    assert e.value.code == "unpaired_result"


# Converse messages as the Converse API defines them (ToolResultBlock: content of ToolResultContentBlocks, status;
# ReasoningContentBlock: reasoningText or redactedContent), read by the Converse reader and, kept outside a request
# (Strands' sessions, AgentCore memory), by the structural reader's normaliser: the two readings are one.
_ASK = {"role": "user", "content": [{"text": "Weather in Paris and Oslo?"}]}


def _calls(*ids: str) -> dict[str, Any]:
    uses = [{"toolUse": {"toolUseId": i, "name": "weather", "input": {"city": i}}} for i in ids]
    return {"role": "assistant", "content": uses}


_CONVERSE_CASES: dict[str, list[Any]] = {
    "one json block is its value": [
        _ASK,
        _calls("t1"),
        {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"json": {"temp": 21}}]}}]},
    ],
    "text and json blocks are their texts joined": [
        _ASK,
        _calls("t1"),
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "Paris:"}, {"json": {"temp": 21}}]}}],
        },
    ],
    "status error is an error result": [
        _ASK,
        _calls("t1"),
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "timeout"}], "status": "error"}}],
        },
    ],
    "redactedContent is redacted reasoning": [
        _ASK,
        {
            "role": "assistant",
            "content": [{"reasoningContent": {"redactedContent": "ZW5jcnlwdGVk"}}, {"text": "Paris is sunny."}],
        },
    ],
}
_CONVERSE_EXPECTED = {
    "one json block is its value": ("result", '{"temp": 21}', False),
    "text and json blocks are their texts joined": ("result", 'Paris:\n{"temp": 21}', False),
    "status error is an error result": ("result", "timeout", True),
    "redactedContent is redacted reasoning": ("reasoning", "ZW5jcnlwdGVk", True),
}


def _seen(messages: list[Any]) -> list[Any]:
    """What the model was shown and what the books keep of each message: role, text, results, reasoning parts."""
    from msgtrain.model.message import OptionCallMessage, OptionResultMessage, ReasoningPart
    from msgtrain.model.openai import result_text

    out: list[Any] = []
    for m in messages:
        if isinstance(m, OptionResultMessage):
            out.append(("result", m.result.invocation_id, result_text(m.result), m.result.is_error))
            continue
        parts = [(p.text, p.signature, p.redacted) if isinstance(p, ReasoningPart) else p.text for p in m.parts]
        calls = (
            [(c.invocation_id, c.option_name, c.arguments) for c in m.calls] if isinstance(m, OptionCallMessage) else []
        )
        out.append((m.role, parts, calls))
    return out


@pytest.mark.parametrize("case", sorted(_CONVERSE_CASES))
def test_the_converse_reader_and_the_normaliser_read_a_converse_block_alike(case: str) -> None:
    from msgtrain.ingest.common.shapes import normalise_messages
    from msgtrain.ingest.formats.api.bedrock import ConverseConverter
    from msgtrain.model.openai import from_openai_messages

    messages = _CONVERSE_CASES[case]
    converter = ConverseConverter()
    converse = [m for i, data in enumerate(messages) for m in converter.message(data, i)]
    normalised, _ = normalise_messages(messages, "$.messages")
    structural = from_openai_messages(normalised)
    assert _seen(structural) == _seen(converse)
    kind, value, flag = _CONVERSE_EXPECTED[case]
    last = _seen(converse)[-1]
    if kind == "result":
        assert last == ("result", "t1", value, flag)
    else:  # the reply is its text, beside reasoning whose text the provider keeps encrypted (never trained)
        assert last == ("assistant", [("", value, flag), "Paris is sunny."], [])


def test_a_message_list_is_a_prefix_of_another_value_for_value_whatever_its_values() -> None:
    from datetime import date

    from msgtrain.ingest.structure.found import is_prefix

    long: list[dict[str, Any]] = [
        {"role": "user", "content": date(2025, 1, 2)},
        {"role": "assistant", "content": [{"text": "ok"}]},
    ]
    assert is_prefix(long[:1], long) and is_prefix([dict(m) for m in long], long)  # a YAML date compared, not dumped
    assert not is_prefix([{"role": "user", "content": "2025-01-02"}], long)
    assert not is_prefix([{"role": "assistant", "content": date(2025, 1, 2)}], long)
    assert not is_prefix(long + long[:1], long)


def test_a_converse_reasoning_text_of_null_is_empty_reasoning_not_the_text_none() -> None:
    from msgtrain.ingest.common.content_parts import converse_block

    block = {"reasoningContent": {"reasoningText": {"text": None, "signature": "sig"}}}
    assert converse_block(block) == {"type": "thinking", "thinking": "", "signature": "sig"}
