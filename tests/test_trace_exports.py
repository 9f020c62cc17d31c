"""Traces exported by observability tools, read by the structural reader: each generation a call, trained once.

Shape (hand-written, no third-party data): a Langfuse trace as its public API returns it (``TraceWithFullDetails``:
``id``, ``input``, ``output``, ``observations[]`` of ``{id, traceId, type: GENERATION | SPAN | EVENT, input, output,
parentObservationId, model, usage}``; the observation fields of the Langfuse OpenAPI schema, as the generated clients
document them). An agent's trace there logs the run's input and final output on the trace and on its root span, and
each model call as a generation with the messages it sent and the message it got.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.model.graph import Origin
from msgtrain.run.parts import LinearizeSettings, convert_file

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)
SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "Weather in Paris?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "Sunny"}
ANSWER = {"role": "assistant", "content": "It is sunny."}


def _trace() -> dict[str, Any]:
    def observation(oid: str, kind: str, inputs: Any, output: Any, parent: str | None) -> dict[str, Any]:
        return {"id": oid, "traceId": "t1", "type": kind, "name": oid, "input": inputs, "output": output,
                "parentObservationId": parent}  # fmt: skip

    return {
        "id": "t1",
        "name": "agent-run",
        "input": [SYSTEM, USER],
        "output": ANSWER,
        "observations": [
            observation("agent", "SPAN", [SYSTEM, USER], ANSWER, None),
            {**observation("llm-1", "GENERATION", [SYSTEM, USER], CALL, "agent"), "model": "gpt-4o"},
            observation("weather", "SPAN", {"city": "Paris"}, "Sunny", "agent"),
            {**observation("llm-2", "GENERATION", [SYSTEM, USER, CALL, RESULT], ANSWER, "agent"), "model": "gpt-4o"},
        ],
    }


def test_a_trace_s_generations_are_its_calls_and_its_summaries_of_the_last_one_are_not_trained_again(
    tmp_path: Path,
) -> None:
    """Hand count: two replies sampled (the call, the answer after its result). The trace's own ``input`` /
    ``output`` and its root span's are the run's input and final output: the second reply again, after the part of
    its context the wrapper saw (without the call and its result). Each reply is trained once, after the messages
    its generation sent; the root span's copy is counted, as context (never trained in the context it lacks).
    Before: the trace's own pair was read and the observations beside it refused the record
    (``ambiguous_structure``, nothing trained)."""
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_trace()), encoding="utf-8")
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects
    assert (stats.turns_found, stats.turns_trained) == (3, 2)
    assert len(samples) == 1
    graphs = [e.graph for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]
    nodes = [(g, n) for g in graphs for n in g.nodes.values()]
    sampled = [(g, n) for g, n in nodes if n.origin is Origin.SAMPLED]
    assert [n.message.text for _, n in sampled] == ["", "It is sunny."]
    graph, answer = sampled[1]
    assert [n.message.role for n in graph.path(answer.id)[:-1]] == ["system", "user", "assistant", "tool"]
    carried = [(g, n) for g, n in nodes if n.origin is Origin.CARRIED]
    assert [n.message.text for _, n in carried] == ["It is sunny."]
    graph, copy = carried[0]
    assert [n.message.role for n in graph.path(copy.id)[:-1]] == ["system", "user"]


def test_a_trace_whose_final_output_no_generation_sampled_stays_refused(tmp_path: Path) -> None:
    """The trace's pair is a summary only when a generation below sampled that same output: a trace whose output
    is no generation's reply holds a reply in a context no call shows, and stays refused, its replies counted."""
    trace = _trace()
    trace["output"] = {"role": "assistant", "content": "Sunny in Paris today."}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert stats.turns_trained == 0 and rejects
