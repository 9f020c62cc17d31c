"""The native graph log, version 1, must load forever: a frozen fixture and its exact, hand-checked content.

``fixtures/graph_log_v1.jsonl`` was written once by msgtrain 0.1.0 and checked by hand; it is never regenerated
(its sha256 is pinned below). It holds, in one file:

- ``fixture-live``: a running agent's append-only log (``MessageGraph(log=...)``) with tools and template kwargs,
  reasoning, a tool call and result, two generations, an in-place edit (``retract``), an edit fork and a
  compaction; it has no ``head`` record, so the head is the path to the last node written.
- ``fixture-saved``: a ``save(append=True)`` of a graph with a developer message, an image with a MIME type,
  step numbers, a sub-agent result nesting the graph ``fixture-sub``, a deletion, an edit of a sampled turn, a
  prefill, an injected message and an environment change; it ends with a ``head`` record.

If a change to msgtrain breaks one of these tests, old logs in the wild break the same way: bump the format
version and keep a reader for version 1 instead of editing this fixture.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import msgtrain
from msgtrain import MessageGraph
from msgtrain.model import (
    EdgeKind,
    Env,
    Generation,
    MediaPart,
    OptionCallMessage,
    OptionResultMessage,
    Origin,
    ParallelEdge,
    parse_message,
)
from msgtrain.model.graphlog import subgraphs

FIXTURE = Path(__file__).parent / "fixtures" / "graph_log_v1.jsonl"
FIXTURE_SHA256 = "887d33fb8d691949a23a233752f79b6fbe5244c02357309b413719cc0cf6a303"

CALCULATE = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate arithmetic.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}


@pytest.fixture(scope="module")
def graphs() -> dict[str, MessageGraph]:
    return {g.graph_id: g for g in msgtrain.load_graphs(FIXTURE)}


def _label(g: MessageGraph, nid: str) -> tuple[str, str, str]:
    node = g.nodes[nid]
    message = node.message
    if isinstance(message, OptionResultMessage):
        text = f"{message.result.option_name}#{message.result.invocation_id}={message.result.result}"
    elif isinstance(message, OptionCallMessage):
        calls = [f"{c.option_name}#{c.invocation_id}" for c in message.calls]
        text = " ".join([message.text, *calls]).strip()
    else:
        text = message.text
    return message.role, text, node.origin.value


def _branches(g: MessageGraph) -> list[list[tuple[str, str, str]]]:
    return sorted([_label(g, n.id) for n in b.nodes] for b in g.branches())


def test_the_v1_fixture_is_byte_for_byte_the_frozen_file() -> None:
    assert hashlib.sha256(FIXTURE.read_bytes()).hexdigest() == FIXTURE_SHA256


def test_the_v1_fixture_holds_its_graphs_in_file_order() -> None:
    assert [g.graph_id for g in msgtrain.load_graphs(FIXTURE)] == ["fixture-live", "fixture-saved"]


def test_every_record_type_of_version_1_appears_in_the_fixture() -> None:
    records = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    assert {r["type"] for r in records} == {"graph", "env", "node", "generation", "edge", "retract", "head"}
    headers = [r for r in records if r["type"] == "graph"]
    assert [(h["format"], h["version"]) for h in headers] == [("msgtrain.graph", 1)] * 2


# ----------------------------------------------------------------------------------------------- fixture-live

LIVE_SYSTEM = ("system", "You are a calculator.", "context")
LIVE_CALL = ("assistant", "Let me calculate. calculate#call_1", "sampled")
LIVE_RESULT = ("tool", "calculate#call_1=4", "context")


def test_the_live_graph_keeps_its_header_and_environment(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-live"]
    assert (g.policy, g.metadata) == ("agent", {"task": "arith"})
    assert g.envs == {"3d494b6e215f65557a69558f": Env.make([CALCULATE], {"enable_thinking": True})}
    assert g.current_env.kwargs == {"enable_thinking": True}


def test_the_live_graph_has_its_exact_branches_and_origins(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-live"]
    assert len(g.nodes) == 15  # 16 written, one retracted
    assert _branches(g) == sorted(
        [
            [
                LIVE_SYSTEM,
                ("user", "What is 2+2?", "context"),
                LIVE_CALL,
                LIVE_RESULT,
                ("assistant", "2+2 = 4", "sampled"),
                ("user", "And 3 + 3?", "context"),
            ],
            [
                LIVE_SYSTEM,
                ("user", "What is 2 + 2?", "context"),
                (*LIVE_CALL[:2], "carried"),
                LIVE_RESULT,
                ("assistant", "2+2 = 4", "carried"),
                ("user", "And 3 + 3?", "context"),
                ("assistant", "6", "sampled"),
            ],
            [
                LIVE_SYSTEM,
                ("user", "Summary: 2+2 = 4.", "context"),
                ("user", "And 3 + 3?", "context"),
                ("assistant", "6", "carried"),
            ],
        ]
    )


def test_the_live_graph_head_is_the_path_to_the_last_node_written(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-live"]
    assert list(g) == [
        {"role": "system", "content": "You are a calculator."},
        {"role": "user", "content": "Summary: 2+2 = 4."},
        {"role": "user", "content": "And 3 + 3?"},
        {"role": "assistant", "content": "6"},
    ]
    assert g.head[-1] == "2e670f6c3d381372a8864dae"


def test_the_live_graph_edges_are_exactly_the_edit_and_the_compaction(
    graphs: dict[str, MessageGraph],
) -> None:
    g = graphs["fixture-live"]
    system = "e0787b868dc9fd8c6644fef6"
    assert g.edges == [
        ParallelEdge(EdgeKind.EDIT, ("666ac4e6d041d2cacbe51025",), ("e93f603cb51557099663e1ce",), system),
        ParallelEdge(
            EdgeKind.COMPACTION,
            (
                "e93f603cb51557099663e1ce",
                "48383522db0250ce804a13e6",
                "623070d7a8825200e4e60f28",
                "cb26cfa5651637f7b39713d0",
            ),
            ("3c1bc276d451fefda9bf5238",),
            system,
        ),
    ]
    assert [_label(g, n)[1] for n in g.edges[1].old] == [
        "What is 2 + 2?",
        "Let me calculate. calculate#call_1",
        "calculate#call_1=4",
        "2+2 = 4",
    ]
    assert "f69776f020a1af589ca48d36" not in g.nodes  # the retracted "And 3+3?"


def test_the_live_graph_generations_are_exact(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-live"]
    assert g.generations == {
        "24689be47d636b5aed4d322c": Generation(
            token_ids=(11, 12, 13),
            logprobs=(-0.5, -0.25, -0.125),
            model="demo-model",
            sampling={"temperature": 1.0},
            finish_reason="tool_calls",
        ),
        "73c66ce8c0a15ad67c368bc9": Generation(token_ids=(21, 22), logprobs=(-0.5, -1), finish_reason="stop"),
    }
    assert sorted(n.id for n in g.sampled_nodes()) == sorted([*g.generations, "55638830101f38d15bbc57a4"])


def test_the_live_graph_call_keeps_reasoning_and_exact_argument_text(graphs: dict[str, MessageGraph]) -> None:
    call = graphs["fixture-live"].nodes["24689be47d636b5aed4d322c"].message
    assert isinstance(call, OptionCallMessage)
    assert (call.reasoning, call.text, call.policy) == ("Use the tool.", "Let me calculate.", "agent")
    (payload,) = call.calls
    assert (payload.arguments, payload.raw_arguments) == ({"expr": "2+2"}, '{"expr": "2+2"}')


# ----------------------------------------------------------------------------------------------- fixture-saved

SAVED_SYSTEM = ("system", "Answer briefly.", "context")
SAVED_PICTURE = ("user", "What is in this picture?", "context")
ASK_OWNER = ("assistant", "ask_owner#call_sub")
OWNER_RESULT = ("tool", "ask_owner#call_sub=Alice sent it.", "context")
ALICE = ("assistant", "Alice sent it.")
THANKS = ("user", "Thanks!", "context")
TAIL = [
    ("user", "Bye", "context"),
    ("assistant", "Bye!", "prefill"),
]


def test_the_saved_graph_keeps_its_header_and_both_environments(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-saved"]
    assert (g.policy, g.metadata) == ("policy", {})
    assert g.envs == {
        "a261a294d65ccbe19aa5434a": Env.make([], {}),
        "a8d4fb90a75498b06d905064": Env.make([], {"enable_thinking": False}),
    }
    assert g.current_env.kwargs == {"enable_thinking": False}


def test_the_saved_graph_has_its_exact_branches_and_origins(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-saved"]
    assert len(g.nodes) == 34
    assert _branches(g) == sorted(
        [
            [
                SAVED_SYSTEM,
                SAVED_PICTURE,
                ("assistant", "A cat.", "sampled"),
                ("user", "Who sent it?", "context"),
                (*ASK_OWNER, "sampled"),
                OWNER_RESULT,
                (*ALICE, "sampled"),
                THANKS,
            ],
            [
                SAVED_SYSTEM,
                SAVED_PICTURE,
                ("assistant", "A cat.", "sampled"),
                (*ASK_OWNER, "carried"),
                OWNER_RESULT,
                (*ALICE, "carried"),
                THANKS,
                ("assistant", "You're welcome.", "sampled"),
            ],
            [
                SAVED_SYSTEM,
                SAVED_PICTURE,
                ("assistant", "A small cat.", "edited"),
                (*ASK_OWNER, "carried"),
                OWNER_RESULT,
                (*ALICE, "carried"),
                THANKS,
                ("assistant", "You're welcome.", "carried"),
                *TAIL,
                ("assistant", "See you.", "sampled"),
            ],
            [
                SAVED_SYSTEM,
                SAVED_PICTURE,
                ("assistant", "A small cat.", "edited"),
                (*ASK_OWNER, "carried"),
                OWNER_RESULT,
                (*ALICE, "carried"),
                THANKS,
                ("assistant", "You're welcome.", "carried"),
                *TAIL,
                ("assistant", "See you.", "carried"),
                ("assistant", "Summary so far: a cat from Alice.", "injected"),
            ],
        ]
    )


def test_the_saved_graph_head_is_its_head_record(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-saved"]
    assert g.head[0] == "d001e5276cb41057136ec538"
    assert g.head[-1] == "e3d6d16bf50e62b1bdbc748b"
    developer, picture, *rest = list(g)
    assert developer == {"role": "developer", "content": "Answer briefly."}
    assert picture == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        ],
    }
    assert [m["content"] for m in rest] == [
        "A small cat.",
        None,
        "Alice sent it.",
        "Alice sent it.",
        "Thanks!",
        "You're welcome.",
        "Bye",
        "Bye!",
        "See you.",
        "Summary so far: a cat from Alice.",
    ]
    assert all(g.env_of(n).kwargs == {"enable_thinking": False} for n in g.head)


def test_the_saved_graph_edges_are_the_delete_the_edit_and_the_env_change(
    graphs: dict[str, MessageGraph],
) -> None:
    g = graphs["fixture-saved"]
    delete, edit, env_change = g.edges
    answer, picture = "5300ffe9bf138cd723bd3cbc", "59a1940150de46e9e2f1e5d1"
    assert delete == ParallelEdge(EdgeKind.DELETE, ("50ae2bf88fc7c9d46390bd34",), (), answer)
    assert edit == ParallelEdge(EdgeKind.EDIT, (answer,), ("3bd1f46c10bdb1b5620dc02e",), picture)
    assert (env_change.kind, env_change.anchor) == (EdgeKind.ENV_CHANGE, None)
    assert env_change.new == tuple(g.head[:-1])
    assert env_change.old[0] == "f8882c8ba4851e8018042745"
    assert env_change.old[-1] == "143305469d27ba20da7b9b7e"
    assert [_label(g, n)[1] for n in env_change.old] == [_label(g, n)[1] for n in env_change.new]


def test_the_saved_graph_generation_is_exact(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-saved"]
    expected = Generation(token_ids=(31, 32, 33), model="demo-model", finish_reason="stop")
    assert g.generations == {"5300ffe9bf138cd723bd3cbc": expected}


def test_the_saved_graph_keeps_steps_media_and_developer_role(graphs: dict[str, MessageGraph]) -> None:
    g = graphs["fixture-saved"]
    messages = [g.nodes[n].message for n in g.head]
    assert [m.step_num for m in messages] == [None, 0, None, 1, 1, 2, None, None, None, None, None, None]
    assert messages[0].metadata == {"openai_role": "developer"}
    media = messages[1].parts[1]  # type: ignore[union-attr]
    assert media == MediaPart(modality="image", url="https://example.com/cat.png", mime="image/png")
    assert (messages[4].policy, messages[4].role) == ("ask_owner", "tool")


def test_the_saved_graph_nests_the_sub_agent_graph_with_its_own_policy(
    graphs: dict[str, MessageGraph],
) -> None:
    g = graphs["fixture-saved"]
    nested = {sub.graph_id: sub for sub in subgraphs(g)}
    assert list(nested) == ["fixture-sub"]
    sub = nested["fixture-sub"]
    assert sub.policy == "owner-finder"
    assert list(sub) == [
        {"role": "system", "content": "You find owners."},
        {"role": "user", "content": "Who sent the cat?"},
        {"role": "assistant", "content": "Alice."},
    ]
    assert [n.origin for n in sub.nodes.values()] == [Origin.CONTEXT, Origin.CONTEXT, Origin.SAMPLED]


# ----------------------------------------------------------------------------------------------- ids


def _blake(*chunks: str) -> str:
    h = hashlib.blake2b(digest_size=12)
    for chunk in chunks:
        h.update(chunk.encode("utf-8") + b"\x00")
    return h.hexdigest()


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_ids_in_the_v1_fixture_are_the_documented_content_hashes() -> None:
    """docs/graph-log.md: env id = H("env", canonical env); node id = H(parent or "env:<env id>", identity)."""
    checked = 0
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["type"] == "env":
            env = {"tools": record["tools"], "kwargs": record["template_kwargs"]}
            assert record["env_id"] == _blake("env", _canonical(env))
        elif record["type"] == "node":
            identity = parse_message(record["message"]).model_dump(
                mode="json", exclude={"generation", "metadata", "step_num", "subgraph"}
            )
            parent = record["parent"] if record["parent"] is not None else f"env:{record['env_id']}"
            assert record["id"] == _blake(parent, _canonical(identity)), record["id"]
            checked += 1
    assert checked == 16 + 34
