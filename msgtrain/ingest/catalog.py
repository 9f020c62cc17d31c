"""The input formats as plain data (name, description, example), in detection order, for ``msgtrain formats``.

Listing the formats from the registry imports every reader module, and with them the typed message model
(pydantic) and YAML: most of a second, for a command that prints a table. This module is the registry's listing
written out, and imports nothing. Its table is generated, not edited: after adding or changing a reader, run
``python -m msgtrain.ingest.catalog`` (``tests/test_startup.py`` fails, saying so, when it differs from the
registry).
"""

# ruff: noqa: E501 - the generated table holds each reader's description as one string, however long

from __future__ import annotations

# Everything from this line on is written by generate().
_TABLE_MARK = "# -- the table" + " (generated) --"


def generate() -> str:
    """This module's text with the table the registry gives now."""
    import json
    from pathlib import Path

    from msgtrain.ingest import registry  # noqa: F401 - importing it registers the built-in readers
    from msgtrain.ingest.registry import REGISTRY

    source = Path(__file__).read_text(encoding="utf-8")
    head = source[: source.index("\n" + _TABLE_MARK) + 1]
    # The layout ``ruff format`` gives the table (JSON string literals are Python ones, in double quotes).
    rows = "".join(
        "    (\n"
        + "".join(f"        {json.dumps(v, ensure_ascii=False)},\n" for v in (r.name, r.description, r.example))
        + "    ),\n"
        for r in REGISTRY.values()
    )
    return f"{head}{_TABLE_MARK}\nFORMATS: tuple[tuple[str, str, str], ...] = (\n{rows})\n"


if __name__ == "__main__":
    from pathlib import Path

    Path(__file__).write_text(generate(), encoding="utf-8")

# -- the table (generated) --
FORMATS: tuple[tuple[str, str, str], ...] = (
    (
        "graph",
        "msgtrain native graph log (MessageGraph.save / log=...), JSONL of graph/node/edge records",
        "sample_logs/native/edit_and_compaction.graph.jsonl",
    ),
    (
        "inspect_ai",
        "Inspect AI eval logs (.json log format v2, .eval zip): one graph per sample and epoch",
        "sample_logs/inspect_ai/popularity.json",
    ),
    (
        "verifiers",
        "PrimeIntellect verifiers rollouts (vf-eval results.jsonl: prompt, completion, reward, info)",
        "sample_logs/verifiers/results.jsonl",
    ),
    (
        "lm_eval",
        "EleutherAI lm-evaluation-harness samples_<task>_<date>.jsonl (--log_samples): generations per doc",
        "sample_logs/lm_eval/samples_gsm8k_chat_2025-01-01T00-00-00.000000.jsonl",
    ),
    (
        "mt_bench",
        "FastChat MT-bench / Arena-Hard model answers (model_answer/<model>.jsonl), joined by question_id with the question.jsonl beside them or one folder up",
        "sample_logs/mt_bench/model_answer/demo-model.jsonl",
    ),
    (
        "options",
        "Options-framework messages (seed 003): msgtrain Message JSON, kind = parts/option_call/option_result",
        "sample_logs/options/research_agent.jsonl",
    ),
    (
        "batch",
        "Batch API files (OpenAI Batch input/output JSONL, Anthropic Message Batches, Gemini Batch API): each result joined to its request by custom_id (Gemini: key) from the input file in the same folder; Bedrock batch .jsonl.out records",
        "sample_logs/batch/batch_output.jsonl",
    ),
    (
        "cassettes",
        "VCR YAML cassettes of OpenAI chat / Responses, Anthropic, Gemini and Bedrock Converse / InvokeModel calls (streamed and compressed bodies too)",
        "sample_logs/cassettes/weather_tools.yaml",
    ),
    (
        "lionagi",
        "LionAGI RoledMessage dicts (seed 002): System, Instruction, AssistantResponse, ActionRequest/Response",
        "sample_logs/lionagi/branch_messages.json",
    ),
    (
        "marsys",
        "MARSYS agent memories (seed 001): roles incl. agent_call, agent_response, error; message_id",
        "sample_logs/marsys/orchestrator_memory.json",
    ),
    (
        "go_agent",
        "Go agent AgentState JSON (seed 004): messages with tool_calls[{id, name, args}], tool_call_id",
        "sample_logs/go_agent/thread_state.json",
    ),
    (
        "anthropic",
        "Anthropic Messages: message lists with system, or request/response pairs (content blocks; streamed responses as event lists)",
        "sample_logs/anthropic/request_response.jsonl",
    ),
    (
        "openai_responses",
        "OpenAI Responses API items (message, function_call, reasoning...) or request/response records (streamed responses as event lists)",
        "sample_logs/openai_responses/items.jsonl",
    ),
    (
        "calls",
        "per-call API logs: JSONL of {request, response} chat-completions bodies or streamed chunk lists (vLLM token ids optional)",
        "sample_logs/calls/agent_calls.jsonl",
    ),
    (
        "ag2_sqlite",
        "AG2 / AutoGen 0.2 runtime logs: the SQLite logs.db of autogen.runtime_logging (chat_completions)",
        "sample_logs/ag2/logs.db",
    ),
    (
        "gemini_api",
        "Gemini API generateContent {request, response} logs and saved Content[] histories (role model)",
        "sample_logs/gemini_api/calls.jsonl",
    ),
    (
        "smolagents",
        "smolagents memory steps with model_input_messages / model_output_message (get_full_steps)",
        "sample_logs/smolagents/steps.json",
    ),
    (
        "autogen",
        "AutoGen 0.4+ model contexts (llm_context / LLMMessage lists) and agentchat TaskResult messages",
        "sample_logs/autogen/agent_state.json",
    ),
    (
        "claude_code",
        "Claude Code session transcripts (JSONL with uuid/parentUuid, sub-agent files, loglines exports)",
        "sample_logs/claude_code/session.jsonl",
    ),
    (
        "codex",
        "OpenAI Codex CLI rollouts (JSONL: session_meta, response_item, turn_context, compacted)",
        "sample_logs/codex/rollout.jsonl",
    ),
    (
        "aider",
        "aider chat transcripts (.aider.chat.history.md): sessions of #### prompts, > output, replies",
        "sample_logs/aider/.aider.chat.history.md",
    ),
    (
        "copilot_cli",
        "GitHub Copilot CLI sessions (JSONL events: session.start, user/assistant.message, tool.execution_*)",
        "sample_logs/copilot_cli/session.jsonl",
    ),
    (
        "gemini_cli",
        "Gemini CLI chat sessions (session-*.json with messages[] of user/gemini, or the append-only JSONL layout; logs.json skipped)",
        "sample_logs/gemini_cli/session.json",
    ),
    (
        "swe_agent",
        "SWE-agent trajectories (.traj JSON: history with role/content/tool_calls, is_demo, info)",
        "sample_logs/swe_agent/run.traj",
    ),
    (
        "mini_swe_agent",
        "mini-SWE-agent trajectories (.traj.json: info + OpenAI-style messages, final 'exit' record)",
        "sample_logs/mini_swe_agent/run.traj.json",
    ),
    (
        "tau2_bench",
        "tau2-bench results (JSON {info, tasks, simulations[{messages, reward_info}]}), one graph each",
        "sample_logs/tau2_bench/results.json",
    ),
    (
        "toolbench",
        "ToolBench answers (answer_generation.train_messages + the DFSDT search tree; branches kept)",
        "sample_logs/toolbench/answer_DFS.json",
    ),
    (
        "openhands",
        "OpenHands event streams (JSON list of actions/observations embedding the raw model response)",
        "sample_logs/openhands/events.json",
    ),
    (
        "openhands_v1",
        "OpenHands V1 (software-agent-sdk) conversation folders: base_state.json + events/event-*.json",
        "sample_logs/openhands_v1/conv0001",
    ),
    (
        "otel",
        "OpenTelemetry GenAI spans (gen_ai.input/output.messages, tool spans; JSON, OTLP/JSON or JSONL)",
        "sample_logs/otel/trace.json",
    ),
    (
        "sharegpt",
        "ShareGPT conversations[{from, value}] (function_call / observation, tools) and LLaMA-Factory messages",
        "sample_logs/sharegpt/glaive_style.json",
    ),
    (
        "openai_chat",
        "OpenAI chat messages: JSON list(s) of messages, JSONL of {messages, tools}, tau-bench traj records",
        "sample_logs/openai_chat/conversations.jsonl",
    ),
    (
        "structural",
        "fallback for any JSON / JSONL / YAML: message lists (role/from/author/speaker + content/value/text/parts), prompt/completion, chosen/rejected, alpaca; found by shape (see `msgtrain formats --explain FILE`)",
        "sample_logs/structural/chat_export.jsonl",
    ),
)
