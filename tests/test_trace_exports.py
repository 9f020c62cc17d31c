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


def _lc(kind: str, content: str, **kwargs: Any) -> dict[str, Any]:
    """A LangChain message as ``dumpd`` writes it (LangSmith run inputs and outputs)."""
    short = {"SystemMessage": "system", "HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool"}[kind]
    return {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", kind],
        "kwargs": {"content": content, "type": short, **kwargs},
    }


def _run_tree() -> dict[str, Any]:
    """A LangGraph agent's LangSmith run tree (langchain-ai/langsmith-sdk python/langsmith/schemas.py ``Run``:
    ``run_type``, ``inputs``, ``outputs``, ``child_runs``): chain runs hold the graph state, the messages again;
    each ``llm`` run the messages it sent (``inputs.messages``, one list per prompt) and its generations."""
    system, user = _lc("SystemMessage", "You are terse."), _lc("HumanMessage", "Weather in Paris?")
    call = _lc("AIMessage", "", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}])
    result, answer = _lc("ToolMessage", "Sunny", tool_call_id="c1"), _lc("AIMessage", "It is sunny.")

    def llm(name: str, sent: list[Any], reply: dict[str, Any]) -> dict[str, Any]:
        generation = {"text": reply["kwargs"]["content"], "message": reply, "type": "ChatGeneration"}
        outputs = {"generations": [[generation]], "llm_output": {"model_name": "gpt-4o"}}
        return {"id": name, "run_type": "llm", "inputs": {"messages": [sent]}, "outputs": outputs, "child_runs": []}

    def chain(name: str, state: list[Any], out: list[Any], children: list[Any]) -> dict[str, Any]:
        return {"id": name, "run_type": "chain", "inputs": {"messages": state}, "outputs": {"messages": out},
                "child_runs": children}  # fmt: skip

    tool = {
        "id": "weather",
        "run_type": "tool",
        "inputs": {"input": "{'city': 'Paris'}"},
        "outputs": {"output": "Sunny"},
    }
    return chain(
        "LangGraph",
        [user],
        [user, call, result, answer],
        [
            chain("agent", [user], [call], [llm("llm-1", [system, user], call)]),
            chain("tools", [user, call], [result], [tool]),
            chain("agent", [user, call, result], [answer], [llm("llm-2", [system, user, call, result], answer)]),
        ],
    )


def test_a_run_tree_s_chain_runs_are_copies_of_its_llm_runs_and_each_reply_is_trained_once(tmp_path: Path) -> None:
    """Hand count: two replies sampled (the two ``llm`` runs), each after the messages its run sent, the system
    prompt first. The chain runs' inputs and outputs are the graph state (the same replies, no system prompt):
    copies, passed over (counted as skips). Before: the root chain's output was trained as a conversation of its own
    (the two replies again, without the system prompt), the agent chains' outputs were rejected (``no_prompt``) and
    the tools chain's (a result answering no call): 4 trained, 2 dropped as duplicates, 3 rejects."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_run_tree()), encoding="utf-8")
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects
    assert (stats.turns_found, stats.turns_trained, len(samples)) == (2, 2, 1)
    (graph,) = [e.graph for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]
    (branch,) = graph.branches()
    assert [n.message.role for n in branch.nodes] == ["system", "user", "assistant", "tool", "assistant"]


def test_a_root_span_row_saying_what_a_call_of_its_file_says_is_not_trained_again(tmp_path: Path) -> None:
    """Span rows one per line, as tracing tools export them (Braintrust's logs: ``span_id``, ``root_span_id``,
    ``span_parents``, ``span_attributes.type`` ``task`` / ``llm`` / ``tool``, ``input``, ``output``; the LLM
    spans' ``output`` a list of choices): the root span's row holds the user's question and the final answer as
    text, beside the LLM spans that sent that question among more messages and sampled that answer. Hand count: two
    replies (the two LLM spans), each after the messages its span sent. The root row is their summary, skipped
    (``summary_of_calls``). Before: it was trained too, the answer a second time after the bare question (no system
    prompt, no call, no result)."""

    def row(span: str, kind: str, inputs: Any, output: Any) -> dict[str, Any]:
        parents = None if span == "root" else ["root"]
        return {"span_id": span, "root_span_id": "root", "span_parents": parents, "input": inputs, "output": output,
                "span_attributes": {"name": span, "type": kind}}  # fmt: skip

    def choice(message: dict[str, Any], reason: str) -> list[dict[str, Any]]:
        return [{"index": 0, "message": message, "finish_reason": reason}]

    rows = [
        row("root", "task", "Weather in Paris?", "It is sunny."),
        row("llm-1", "llm", [SYSTEM, USER], choice(CALL, "tool_calls")),
        row("weather", "tool", {"city": "Paris"}, "Sunny"),
        row("llm-2", "llm", [SYSTEM, USER, CALL, RESULT], choice(ANSWER, "stop")),
    ]
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects
    assert (stats.turns_found, stats.turns_trained, len(samples)) == (2, 2, 1)
    # a text row whose answer no call of the file sampled is a conversation of its own, read as before
    rows[0] = row("root", "task", "Weather in Paris?", "Sunny, 25 degrees.")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained) == (3, 3)


def test_a_tool_s_span_is_no_prompt_and_reply(tmp_path: Path) -> None:
    """The OpenAI Agents SDK's exported spans (openai/openai-agents-python src/agents/tracing/span_data.py
    @ e2183e81f2f09fb217ef651a0c88009fc5acfab6: ``GenerationSpanData`` ``{type: generation, input, output, model}``,
    ``FunctionSpanData`` ``{type: function, name, input: the arguments' JSON text, output: the result}``): a
    function span's input and output are a tool's arguments and result, never a prompt and a reply. Hand count: two
    replies (the two generation spans). Before: the function span was read too, its result ``Sunny`` trained as a
    reply to its arguments (3 trained)."""

    def span(sid: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"object": "trace.span", "id": sid, "trace_id": "trace_1", "parent_id": "span_a", "span_data": data}

    rows = [
        {"object": "trace", "id": "trace_1", "workflow_name": "Agent workflow"},
        span("span_a", {"type": "agent", "name": "Assistant", "tools": ["weather"], "output_type": "str"}),
        span("span_g1", {"type": "generation", "input": [SYSTEM, USER], "output": [CALL], "model": "gpt-4o"}),
        span("span_f", {"type": "function", "name": "weather", "input": '{"city": "Paris"}', "output": "Sunny"}),
        span("span_g2", {"type": "generation", "input": [SYSTEM, USER, CALL, RESULT], "output": [ANSWER]}),
    ]
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects
    assert (stats.turns_found, stats.turns_trained, len(samples)) == (2, 2, 1)
