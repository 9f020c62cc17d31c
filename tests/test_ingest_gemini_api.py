"""Gemini API logs: generateContent request/response records and saved Content[] histories.

Fixtures (``sample_logs/gemini_api/``) are written here in the shapes the Gemini REST API documents for
``models.generateContent`` (``GenerateContentRequest`` / ``GenerateContentResponse``: ``contents[].parts`` with
``functionCall`` / ``functionResponse``, ``systemInstruction``, ``tools[].functionDeclarations``,
``usageMetadata``) and that googleapis/python-genai's ``chats.Chat.get_history()`` serialises (a ``Content[]``
list with roles ``user`` / ``model``).
"""

from __future__ import annotations

import json
from pathlib import Path

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.model.completeness import missing_context
from msgtrain.model.graph import MessageGraph

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs" / "gemini_api"


def _read(path: Path) -> tuple[str, list[ReadGraph], list[ReadReject]]:
    reader = detect_format(path)
    events = list(read_events(reader, path))
    graphs = [e for e in events if isinstance(e, ReadGraph)]
    return reader.name, graphs, [e for e in events if isinstance(e, ReadReject)]


def _roles(graph: MessageGraph) -> list[list[tuple[str, str]]]:
    return [[(n.message.role, n.origin.value) for n in b.nodes] for b in graph.branches()]


def test_generate_content_calls_join_into_one_conversation_sampled_in_each_request() -> None:
    name, (graph,), rejects = _read(SAMPLES / "calls.jsonl")
    assert name == "gemini_api" and not rejects and graph.records == 2
    assert _roles(graph.graph) == [
        [
            ("system", "context"),
            ("user", "context"),
            ("assistant", "sampled"),
            ("tool", "context"),
            ("assistant", "sampled"),
        ]
    ]
    assert [t["function"]["name"] for t in graph.graph.env.tools] == ["get_weather"]
    last = graph.graph.nodes[graph.graph.head[-1]].message
    assert last.metadata["usage"]["promptTokenCount"] == 50
    assert missing_context(graph.graph) == []


def test_a_content_history_with_role_model_is_read_not_refused_and_flags_its_missing_tools() -> None:
    name, (graph,), rejects = _read(SAMPLES / "history.json")
    assert name == "gemini_api" and not rejects
    assert _roles(graph.graph) == [
        [("user", "context"), ("assistant", "sampled"), ("tool", "context"), ("assistant", "sampled")]
    ]
    assert missing_context(graph.graph) == ["tools"]


def test_a_saved_request_with_its_tools_is_complete(tmp_path: Path) -> None:
    contents = json.loads((SAMPLES / "history.json").read_text())
    first = json.loads((SAMPLES / "calls.jsonl").read_text().splitlines()[0])["request"]
    path = tmp_path / "saved.json"
    path.write_text(
        json.dumps({"contents": contents, "tools": first["tools"], "systemInstruction": first["systemInstruction"]})
    )
    _, (graph,), _ = _read(path)
    assert _roles(graph.graph)[0][0] == ("system", "context") and missing_context(graph.graph) == []


def test_a_streamed_response_logged_as_chunks_is_reassembled(tmp_path: Path) -> None:
    first = json.loads((SAMPLES / "calls.jsonl").read_text().splitlines()[1])
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "18"}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "°C."}]}, "finishReason": "STOP"}]},
    ]
    path = tmp_path / "stream.jsonl"
    path.write_text(json.dumps({"request": first["request"], "response": chunks}) + "\n")
    _, (graph,), rejects = _read(path)
    assert not rejects and graph.graph.nodes[graph.graph.head[-1]].message.text == "18°C."
