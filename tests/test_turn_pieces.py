"""Replies logged as several typed pieces (Open Interpreter's LMC messages, OpenAI Responses items wherever a record
keeps them), read by the structural reader as one call each with its tool call and result; hand-written here in the
shapes of real files (no third-party data), each trained count against a count made by hand.

Provenance of the shapes:
- Open Interpreter's saved conversations (``json.dump(self.messages)`` in ``interpreter/core/core.py``; the messages as
  ``interpreter/core/llm/utils/convert_to_openai_messages.py`` sends them: ``code`` as a call of ``execute``
  with ``{"language", "code"}``, the ``computer``'s console ``output`` as its result): OpenInterpreter/open-interpreter
  @ dcfcffa9af13737bee1fa128364a718b56324998, and its docs/protocols/lmc-messages.mdx.
- NeMo Gym rollouts whose agent logs its own transcript in ``response.output`` with ``responses_create_params.input``
  empty: NVIDIA-NeMo/Gym @ 07d6b0d07b22fcf530b4c211dae2ee23100428e4,
  ``resources_servers/gdpval/data/example_rollouts.jsonl`` (system and user messages first, then each model call's
  ``message`` + ``function_call`` items, no ``function_call_output`` logged: 5 rollouts, 147 replies, counted by
  hand: 30 + 9 + 29 + 26 + 53) and ``responses_api_agents/anyswe_agent/data/example_rollouts_claude_code.jsonl``
  (replies, calls and outputs only, no prompt: 5 rollouts, 21 replies: 8 + 3 + 3 + 3 + 4). Each record here is
  cut to a few items and its texts shortened, with the first line's first real texts.

Real files of that commit read from a local copy, counted by hand from the raw JSON (replies the policy sampled:
each run of assistant items up to the next message after a call), trained / hand count before these rules and
after (the files stay out of this repository):
- ``resources_servers/gdpval/data/example_rollouts.jsonl``: 147 replies, 1 per rollout in a context the log holds
  (no call output is logged); before 0 trained (``ambiguous_structure``), after 5 trained, 142 ``context_unknown``.
- ``resources_servers/conversational_tool_use_simulation/data/example_rollouts.jsonl``: 34 replies (reasoning
  after its call); before 0, after 34.
- ``responses_api_agents/harbor_agent/example/example_output.jsonl``: 46 replies, 38 before an output answering
  no call; before 0, after 38 (8 ``context_unknown``).
- ``responses_api_agents/anyswe_agent/data/example_rollouts_{claude_code,hermes,opencode,openclaw,pi}.jsonl``: 21,
  73, 31, 5, 25 replies, no prompt logged; before 0, 68, 26, 0, 20 trained after no prompt, after all rejected
  (``no_prompt``) and counted as lost.
- ``resources_servers/scicode/data/example_rollouts.jsonl``: 5 replies, no prompt; after rejected and counted.
- ``resources_servers/asr_with_pc/data/example_rollouts.jsonl``: 5 replies, audio outside the messages; after
  rejected (``unsupported_content``) and counted.
- ``resources_servers/{multichallenge,genrm_compare}/data/example_rollouts.jsonl``: requests alone, 0 replies;
  before 9 and 2 history messages trained as replies, after skipped.
- ``resources_servers/bbq/data/example_rollouts.jsonl``: 5 ``policy_response`` replies, no prompt; before 0 counted
  as lost, after 5 (``tests/test_open_world_data.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import get_reader
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.run.parts import LinearizeSettings, convert_file

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)
# The structural reader, as it reads the real rollouts (their lines are larger than detection's head, so no reader of
# their own claims them), and as it reads Responses items in any other record.
STRUCTURAL = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format="structural"
)


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _graphs(path: Path, reader: str | None = None) -> tuple[list[MessageGraph], list[ReadReject]]:
    events = list(read_events(get_reader(reader) if reader else detect_format(path), path))
    return [e.graph for e in events if isinstance(e, ReadGraph)], [e for e in events if isinstance(e, ReadReject)]


def _replies(graph: MessageGraph) -> list[tuple[str, list[tuple[str, str]], str, list[str]]]:
    """(origin, context as (role, text), reply text, call arguments) of every reply, in order."""
    out = []
    (branch,) = graph.branches()
    for n, node in enumerate(branch.nodes):
        if node.message.role != "assistant":
            continue
        context = [(m.message.role, _text(m.message)) for m in branch.nodes[:n]]
        calls = [c.raw_arguments or json.dumps(c.arguments) for c in getattr(node.message, "calls", ())]
        out.append((node.origin.value, context, node.message.text, calls))
    return out


def _text(message: Any) -> str:
    result = getattr(message, "result", None)
    return str(result.result) if result is not None else message.text


# ------------------------------------------------------------------------------------------------ Open Interpreter


def _open_interpreter() -> list[dict[str, Any]]:
    return [
        {"role": "user", "type": "message", "content": "What's 2380*3875?"},
        {"role": "assistant", "type": "message", "content": "Let me calculate that."},
        {"role": "assistant", "type": "code", "format": "python", "content": "2380*3875"},
        {"role": "computer", "type": "console", "format": "output", "content": "9222500"},
        {"role": "assistant", "type": "message", "content": "The result is 9222500."},
        {"role": "user", "type": "message", "content": "Make a folder."},
        {"role": "assistant", "type": "code", "format": "shell", "content": "mkdir out"},
        {"role": "computer", "type": "console", "format": "output", "content": ""},
        {"role": "computer", "type": "console", "format": "output", "content": "shown", "recipient": "user"},
        {"role": "assistant", "type": "message", "content": "Done."},
    ]


def test_open_interpreter_text_and_code_of_one_reply_are_one_call_with_its_result(tmp_path: Path) -> None:
    """A reply split into a ``message`` and a ``code`` entry is one sampled turn: its text and a call of
    ``execute`` with the arguments Open Interpreter sends; the ``computer``'s console output is that call's result
    (``No output`` when blank, as Open Interpreter sends it); an entry for another recipient is never sent. Hand
    count: four replies (text + code, text, code, text). Before: ``computer`` was an unknown role (a gap after the
    first reply), and the code was trained as the text of a turn of its own."""
    (graph,), rejects = _graphs(_write(tmp_path / "conversation.json", _open_interpreter()))
    assert not rejects
    replies = _replies(graph)
    assert [r[0] for r in replies] == ["sampled"] * 4
    first, second, third, fourth = replies
    assert (first[2], first[3]) == ("Let me calculate that.", ['{"language": "python", "code": "2380*3875"}'])
    assert second[1][-2:] == [("assistant", "Let me calculate that."), ("tool", "9222500")]
    assert third[3] == ['{"language": "shell", "code": "mkdir out"}']
    assert fourth[1][-1] == ("tool", "No output") and fourth[2] == "Done."
    _, stats, _ = convert_file(tmp_path / "conversation.json", SETTINGS)
    assert (stats.turns_found, stats.turns_trained, stats.turns_lost) == (4, 4, 0)


def test_an_open_interpreter_conversation_is_flagged_for_the_system_message_and_tool_it_never_saves(
    tmp_path: Path,
) -> None:
    """Open Interpreter sends its system message and the ``execute`` schema with every call and saves neither: the
    samples are ``context_incomplete`` for both. Before: only the tools were flagged."""
    (graph,), _ = _graphs(_write(tmp_path / "conversation.json", _open_interpreter()))
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]


# ------------------------------------------------------------------------------------------------ Responses items


def _item_text(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _call(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "code_exec", "arguments": json.dumps({"cmd": command})}


def _rollout(output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [], "tools": [], "tool_choice": "auto", "parallel_tool_calls": True},
        "response": {"id": "r1", "object": "response", "model": "default", "output": output, "tools": []},
        "reward": 0.85,
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "agent_ref": {"type": "responses_api_agents", "name": "gdpval_stirrup_agent"},
    }


def test_responses_items_nested_in_a_record_are_calls_and_a_reply_after_unlogged_outputs_is_not_trained(
    tmp_path: Path,
) -> None:
    """GDPval's rollout: each model call's ``message`` and ``function_call`` items are one reply; no output of any
    call is logged, so every reply after the first was sampled after a result the log lost: the first is trained,
    the others kept as context (``context_unknown``), never stitched into one reply nor trained after a context
    without the results. Hand count: 3 replies, 1 trainable. Before: ``ambiguous_structure`` (nothing read)."""
    output = [
        _item_text("system", "You are an AI agent that will be given a specific task."),
        _item_text("user", "You are tasked with completing a specific assignment."),
        _item_text("assistant", "<think>Let me start by understanding the task.</think>"),
        _call("call-1", "ls -la"),
        _item_text("assistant", "<think>Let me check the reference files.</think>"),
        _call("call-2", "ls -la ref"),
        _item_text("assistant", "<think>The task has been completed.</think>"),
        {**_call("call-3", ""), "name": "finish", "arguments": '{"reason": "done"}'},
    ]
    path = _jsonl(tmp_path / "example_rollouts.jsonl", [_rollout(output)])
    (graph,), rejects = _graphs(path, "structural")
    assert [r.error.code for r in rejects] == ["missing_result"]
    replies = _replies(graph)
    assert [r[0] for r in replies] == ["sampled", "carried", "carried"]
    assert replies[0][1] == [("system", output[0]["content"][0]["text"]), ("user", output[1]["content"][0]["text"])]
    assert replies[0][3] == ['{"cmd": "ls -la"}']
    _, stats, _ = convert_file(path, STRUCTURAL)
    assert (stats.turns_found, stats.turns_trained, stats.turns_dropped["context_unknown"]) == (3, 1, 2)


def test_responses_items_with_their_outputs_are_read_as_calls_and_results(tmp_path: Path) -> None:
    """Reasoning, text and two parallel calls of one response are one reply; each ``function_call_output`` answers
    its call by ``call_id``. Hand count: 2 replies, both trained."""
    output = [
        _item_text("user", "Fix the bug."),
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Read both files."}]},
        _item_text("assistant", "Reading."),
        _call("c1", "cat a.py"),
        _call("c2", "cat b.py"),
        {"type": "function_call_output", "call_id": "c2", "output": "b"},
        {"type": "function_call_output", "call_id": "c1", "output": "a"},
        _item_text("assistant", "Both files are fine."),
    ]
    (graph,), rejects = _graphs(_jsonl(tmp_path / "rollouts.jsonl", [_rollout(output)]), "structural")
    assert not rejects
    first, second = _replies(graph)
    assert first[0] == second[0] == "sampled"
    assert first[2] == "Reading." and first[3] == ['{"cmd": "cat a.py"}', '{"cmd": "cat b.py"}']
    assert second[1][-2:] == [("tool", "b"), ("tool", "a")]
    (branch,) = graph.branches()
    reasoning = [p for p in branch.nodes[1].message.parts if p.kind == "reasoning"]
    assert [p.text for p in reasoning] == ["Read both files."]


def test_a_rollout_of_replies_and_results_with_no_prompt_is_rejected_counting_its_replies(tmp_path: Path) -> None:
    """anyswe's Claude Code rollout logs what the model returned, never the system prompt and task its harness
    sent first: no reply can be trained in its context, and each counts as lost. Hand count: 2 replies."""
    output = [
        _item_text("assistant", "Looking at this issue, I need to read separable.py."),
        {**_call("toolu_1", ""), "name": "Read", "arguments": '{"file_path": "/testbed/separable.py"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "1\t# Licensed under a 3-clause BSD"},
        _item_text("assistant", "I've made the fix."),
    ]
    path = _jsonl(tmp_path / "example_rollouts_claude_code.jsonl", [_rollout(output)])
    samples, stats, rejects = convert_file(path, STRUCTURAL)
    assert samples == [] and stats.turns_trained == 0 and stats.turns_lost == 2
    assert json.loads(rejects[0])["reason"] == "no_prompt"


def test_pieces_after_a_gap_are_counted_as_the_replies_they_make() -> None:
    """Origins of the GDPval shape, as one list: three pieces of text + call after the gap are one carried reply
    each, not two."""
    from msgtrain.ingest.common.shapes import MessageNormaliser
    from msgtrain.ingest.structure.steps import StepBuilder

    items = [
        _item_text("user", "Task."),
        _item_text("assistant", "one"),
        _call("a", "x"),
        _item_text("assistant", "two"),
        _call("b", "y"),
        _item_text("assistant", "three"),
        _call("c", "z"),
    ]
    builder = StepBuilder(MessageNormaliser())
    gap = builder.add_until_gap(items, "$")
    assert gap is not None and (gap.turns, gap.after, gap.unread) == (0, 2, 0)
    assert [s.origin for s in builder.steps if s.message.role == "assistant"] == [None, Origin.CARRIED, Origin.CARRIED]


def test_the_nemo_gym_reader_keeps_replies_after_unlogged_outputs_as_context_and_refuses_a_rollout_with_no_prompt(
    tmp_path: Path,
) -> None:
    """The same two shapes read by the NeMo Gym reader (their lines fit detection's head here): a reply after calls
    whose outputs are not logged, and the ones after it, are not trained (before: the 60 items of a real GDPval
    rollout were one reply), and a rollout with no prompt is rejected (before: trained after no context)."""
    gdpval = [
        _item_text("system", "You are an AI agent."),
        _item_text("user", "Complete the assignment."),
        _item_text("assistant", "<think>Look first.</think>"),
        _call("call-1", "ls -la"),
        _item_text("assistant", "<think>Now the files.</think>"),
        _call("call-2", "ls ref"),
        _item_text("assistant", "<think>Done.</think>"),
        {**_call("call-3", ""), "name": "finish", "arguments": '{"reason": "done"}'},
    ]
    path = _jsonl(tmp_path / "gdpval.jsonl", [_rollout(gdpval)])
    assert detect_format(path).name == "nemo_gym"
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained, stats.turns_dropped["context_unknown"]) == (3, 1, 2)
    anyswe = [
        _item_text("assistant", "I need to read separable.py."),
        {**_call("toolu_1", ""), "name": "Read", "arguments": '{"file_path": "/testbed/separable.py"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "1\t# Licensed"},
        _item_text("assistant", "I've made the fix."),
    ]
    samples, stats, rejects = convert_file(_jsonl(tmp_path / "anyswe.jsonl", [_rollout(anyswe)]), SETTINGS)
    assert samples == [] and stats.turns_lost == 2 and json.loads(rejects[0])["reason"] == "no_prompt"


def test_a_rollout_line_longer_than_detections_head_is_still_the_nemo_gym_reader_s(tmp_path: Path) -> None:
    """A real GDPval rollout line is 150 KB: its keys are in the head, its end is not. Before: no whole object in the
    head, so the NeMo Gym reader declined it and the file fell to the structural reader."""
    output = [
        _item_text("system", "You are an AI agent. " + "Rules. " * 12_000),
        _item_text("user", "Complete the assignment."),
        _item_text("assistant", "<think>Look first.</think>"),
        _call("call-1", "ls -la"),
    ]
    path = _jsonl(tmp_path / "example_rollouts.jsonl", [_rollout(output)])
    assert path.stat().st_size > 80_000 and detect_format(path).name == "nemo_gym"
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained) == (1, 1)


def test_a_responses_request_beside_its_response_is_one_call_wherever_the_record_keeps_it(tmp_path: Path) -> None:
    """The structural reader reads ``responses_create_params.input`` (and a logged ``request.input``) with the
    ``response.output`` beside it as one call: the instructions, the input items, then the output's replies, calls
    and results (NeMo Gym's ASR rollout, whose 88 KB lines its reader's detection cannot see whole). Hand count: 2
    replies. Before: the output alone, its first reply trained after no context."""
    record = _rollout(
        [
            _item_text("assistant", "Reading."),
            _call("c1", "cat a.py"),
            {"type": "function_call_output", "call_id": "c1", "output": "a"},
            _item_text("assistant", "Fine."),
        ]
    )
    record["responses_create_params"] |= {"instructions": "Be brief.", "input": [_item_text("user", "Check a.py.")]}
    (graph,), rejects = _graphs(_jsonl(tmp_path / "rollouts.jsonl", [record]), "structural")
    assert not rejects
    first, second = _replies(graph)
    assert first[0] == second[0] == "sampled"
    assert first[1] == [("system", "Be brief."), ("user", "Check a.py.")] and first[3] == ['{"cmd": "cat a.py"}']
    assert second[1][-1] == ("tool", "a") and second[2] == "Fine."
    logged = {"request": record["responses_create_params"], "response": record["response"], "latency_ms": 812}
    (graph,), _ = _graphs(_jsonl(tmp_path / "calls.jsonl", [logged]), "structural")
    assert [r[2] for r in _replies(graph)] == ["Reading.", "Fine."]


def test_reasoning_logged_after_its_call_is_that_calls_and_a_message_after_it_the_next_call(tmp_path: Path) -> None:
    """NeMo Gym's converter writes a call's reasoning after the call, before its output (its conversational tool-use
    rollouts: ``function_call, reasoning, function_call_output, reasoning, message``). Hand count: 2 replies, both
    trained, by the NeMo Gym reader and by the structural reader alike. Before: the reasoning began a reply of its
    own, and the reply after it was kept as context after a lost result (26 of the file's 34 replies lost)."""
    output = [
        {**_call("c1", ""), "name": "request_accessibility", "arguments": '{"reservation": "ACC123"}'},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Request it first."}]},
        {"type": "function_call_output", "call_id": "c1", "output": '{"confirmation": "sent"}'},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Tell the user."}]},
        _item_text("assistant", "I've submitted your ASL interpreter request."),
    ]
    record = _rollout(output)
    record["responses_create_params"]["input"] = [_item_text("user", "I need an ASL interpreter.")]
    path = _jsonl(tmp_path / "example_rollouts.jsonl", [record])
    for settings in (SETTINGS, STRUCTURAL):
        _, stats, _ = convert_file(path, settings)
        assert (stats.turns_found, stats.turns_trained) == (2, 2), settings.input_format
    (graph,), _ = _graphs(path, "structural")
    (branch,) = graph.branches()
    first = branch.nodes[1].message
    assert [p.text for p in first.parts if p.kind == "reasoning"] == ["Request it first."]


def test_a_request_logged_without_its_response_is_skipped_not_trained(tmp_path: Path) -> None:
    """NeMo Gym's multichallenge / genrm_compare data lines are requests alone (``responses_create_params.input``:
    a conversation whose assistant messages the dataset wrote, sent as history): no reply was sampled. Before: each
    assistant message was trained (9 and 2 in the real files)."""
    record = {
        "uuid": "example_1",
        "responses_create_params": {
            "input": [
                {"role": "user", "content": "Hi! I'm allergic to peanuts."},
                {"role": "assistant", "content": "Noted, Alex."},
                {"role": "user", "content": "Suggest a snack."},
            ]
        },
        "rubric": [{"question": "Did the model avoid peanuts?"}],
    }
    samples, stats, _ = convert_file(_jsonl(tmp_path / "data.jsonl", [record]), SETTINGS)
    assert samples == [] and stats.turns_found == 0 and sum(stats.records_skipped.values()) == 1


def test_an_output_answering_no_call_cuts_the_rollout_there_instead_of_rejecting_it(tmp_path: Path) -> None:
    """NVIDIA-NeMo/Gym ``responses_api_agents/harbor_agent/example/example_output.jsonl`` (@ 07d6b0d0): the terminal
    agent's turn without a command is answered by a ``function_call_output`` whose ``call_id`` no call has. The
    replies before it are trained, the ones after it kept as context, by the NeMo Gym reader and the structural
    reader alike. Hand count: 3 replies, 2 trainable (the real file: 46 replies, 38 before the gaps). Before: the
    whole rollout rejected (``unpaired_result``), every reply lost."""
    output = [
        _item_text("assistant", '{"analysis": "At /app.", "commands": [{"keystrokes": "ls\\n"}]}'),
        {**_call("call_0_1", ""), "name": "terminal", "arguments": '{"keystrokes": "ls -la /app/\\n"}'},
        {"type": "function_call_output", "call_id": "call_0_1", "output": "config.json"},
        _item_text("assistant", '{"analysis": "Done.", "commands": [], "task_complete": true}'),
        {"type": "function_call_output", "call_id": "call_87f635b1", "output": "Are you sure? Confirm again."},
        _item_text("assistant", '{"analysis": "Confirmed.", "task_complete": true}'),
    ]
    record = _rollout(output)
    record["responses_create_params"]["input"] = [_item_text("user", "Simulate the particles in /app.")]
    path = _jsonl(tmp_path / "example_output.jsonl", [record])
    for settings in (SETTINGS, STRUCTURAL):
        _, stats, rejects = convert_file(path, settings)
        assert (stats.turns_found, stats.turns_trained, stats.turns_lost) == (3, 2, 0), settings.input_format
        assert stats.turns_dropped["context_unknown"] == 1 and [json.loads(r)["reason"] for r in rejects] == [
            "unpaired_result"
        ]


def test_a_request_that_sent_media_outside_its_messages_is_not_trained_without_it(tmp_path: Path) -> None:
    """NVIDIA-NeMo/Gym ``resources_servers/asr_with_pc/data/example_rollouts.jsonl`` (@ 07d6b0d0): the user asks to
    transcribe the audio, and the audio the server sent sits in ``responses_create_params.metadata.audio_url``, in no
    message. A transcription trained after the text alone is trained in a context the model never had: rejected
    (``unsupported_content``), its reply counted as lost, by the NeMo Gym reader and the structural reader alike
    (the real file's lines, 88 KB, go to the structural reader). Before: the structural reader trained the 5 replies
    after the text alone."""
    record = _rollout([_item_text("assistant", "The transcription of the audio is: 'No, think.'")])
    record["responses_create_params"] |= {
        "input": [_item_text("system", "You are a helpful assistant."), _item_text("user", "Transcribe the audio.")],
        "metadata": {"audio_url": "data:audio/wav;base64,UklGRiR9AABXQVZF"},
    }
    path = _jsonl(tmp_path / "example_rollouts.jsonl", [record])
    for settings in (SETTINGS, STRUCTURAL):
        samples, stats, rejects = convert_file(path, settings)
        assert samples == [] and stats.turns_lost == 1, settings.input_format
        assert json.loads(rejects[0])["reason"] == "unsupported_content"


def test_responses_calls_nested_in_a_trace_s_steps_are_each_trained_after_their_own_request(tmp_path: Path) -> None:
    """Responses request / response pairs under any key (a tracer's ``trace.steps[]``): each step is one call, its
    reply trained after exactly the items its request sent (the second request re-sends the first reply, its call and
    the call's output), with the request's instructions and tools. Hand count: 2 replies."""
    tools = [{"type": "function", "name": "search", "parameters": {"type": "object", "properties": {}}}]
    first = [_item_text("assistant", "Searching."), _call("c1", "x")]
    result = {"type": "function_call_output", "call_id": "c1", "output": "found"}
    steps = [
        {
            "request": {"instructions": "Be brief.", "input": [_item_text("user", "Find x.")], "tools": tools},
            "response": {"output": first},
        },
        {
            "request": {
                "instructions": "Be brief.",
                "input": [_item_text("user", "Find x."), *first, result],
                "tools": tools,
            },
            "response": {"output": [_item_text("assistant", "Found x.")]},
        },
    ]
    path = _write(tmp_path / "trace.json", {"trace": {"id": "t1", "steps": steps}})
    (graph,), rejects = _graphs(path)
    assert not rejects
    sampled = [n for n in graph.nodes.values() if n.origin is Origin.SAMPLED]
    assert sorted(n.message.text for n in sampled) == ["Found x.", "Searching."]
    last = next(n for n in sampled if n.message.text == "Found x.")
    context = [(m.message.role, _text(m.message)) for m in graph.path(last.id)[:-1]]
    assert context == [("system", "Be brief."), ("user", "Find x."), ("assistant", "Searching."), ("tool", "found")]
    assert all(env.tools for env in graph.envs.values())


def test_an_open_interpreter_code_entry_with_no_output_is_read_with_the_empty_result_it_was_sent(
    tmp_path: Path,
) -> None:
    """A ``code`` entry that no console output follows is sent with an empty result right after it
    (``process_messages`` in ``interpreter/core/llm/run_tool_calling_llm.py`` @ dcfcffa9), whatever comes next: a
    reply, a user message; an entry for another recipient in between is never sent and changes nothing. Hand count:
    six replies (code, text, code, text, code, text), each after the context Open Interpreter sent. Before: the reply
    after the first unanswered code entry was a gap (``missing_result``), 3 trained and 3 ``context_unknown``."""
    conversation = [
        {"role": "user", "type": "message", "content": "What's 2*3?"},
        {"role": "assistant", "type": "code", "format": "python", "content": "2*3"},
        {"role": "computer", "type": "console", "format": "output", "content": "6"},
        {"role": "assistant", "type": "message", "content": "6."},
        {"role": "user", "type": "message", "content": "Make a folder."},
        {"role": "assistant", "type": "code", "format": "shell", "content": "mkdir out"},
        {"role": "computer", "type": "console", "format": "output", "content": "shown", "recipient": "user"},
        {"role": "assistant", "type": "message", "content": "Done."},
        {"role": "user", "type": "message", "content": "Another."},
        {"role": "assistant", "type": "code", "format": "shell", "content": "mkdir b"},
        {"role": "user", "type": "message", "content": "ok?"},
        {"role": "assistant", "type": "message", "content": "Yes."},
    ]
    path = _write(tmp_path / "conversation.json", conversation)
    (graph,), rejects = _graphs(path)
    assert not rejects
    replies = _replies(graph)
    assert [r[0] for r in replies] == ["sampled"] * 6
    assert replies[3][1][-1] == ("tool", "") and replies[3][2] == "Done."
    assert replies[5][1][-3:] == [("assistant", ""), ("tool", ""), ("user", "ok?")]
    assert sum(1 for r in replies[5][1] if r[0] == "tool") == 3  # one result per code entry, none invented beyond
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained, stats.turns_lost) == (6, 6, 0)


def _run_items() -> list[dict[str, Any]]:
    return [
        _call("c1", "ls"),
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        _item_text("assistant", "There is one file, a.txt."),
    ]


def test_a_string_input_beside_a_run_s_items_is_the_user_message_they_answer(tmp_path: Path) -> None:
    """The Responses API's and the OpenAI Agents SDK's ``input`` may be a string: the one user message. Beside the
    items a run produced (the SDK's RunResult keeps ``input`` and ``new_items``; a logged run keeps ``input``,
    ``instructions`` and its ``output`` items, call outputs between its replies: no single response's output) it
    is the context of the first reply. Hand count: two replies (the call; the answer after its output), each after
    the instructions and the prompt. Before: ``new_items`` was read alone (``no_prompt``, 2 lost), and the record
    with ``output`` was claimed by the Responses reader and refused (``bad_response``: not one turn)."""
    run = {"input": "Which files are here?", "new_items": _run_items(), "final_output": "There is one file, a.txt."}
    logged = {"model": "gpt-4.1", "instructions": "You are terse.", "input": "Which files are here?"}
    logged |= {"output": _run_items(), "usage": {"input_tokens": 12, "output_tokens": 9}}
    for name, record, system in (("run.json", run, []), ("logged.json", logged, [("system", "You are terse.")])):
        path = _write(tmp_path / name, record)
        (graph,), rejects = _graphs(path)
        assert not rejects, name
        replies = _replies(graph)
        assert [r[0] for r in replies] == ["sampled", "sampled"], name
        assert replies[0][1] == [*system, ("user", "Which files are here?")], name
        assert replies[0][3] == ['{"cmd": "ls"}'] and replies[1][2] == "There is one file, a.txt.", name
        assert replies[1][1][-1] == ("tool", "a.txt"), name
        _, stats, _ = convert_file(path, SETTINGS)
        assert (stats.turns_found, stats.turns_trained, stats.turns_lost) == (2, 2, 0), name
