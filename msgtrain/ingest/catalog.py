"""The input formats as plain data, in detection order: the registry's catalogue.

Listing the formats or detecting a file's format from the registry's readers would import every reader module, and
with them the typed message model (pydantic) and YAML: most of a second, for a command that prints a table or
converts one file. This module is what the registry needs to know of every reader without importing it, written
out: ``FORMATS`` (name, description, example) for ``msgtrain formats``, ``READERS`` (name, module, traits, marks,
partner marks; :mod:`msgtrain.ingest.registry`) for detection. It imports nothing. Its tables are generated, not
edited: after adding or changing a reader, run ``python -m msgtrain.ingest.registry`` (``tests/test_startup.py``
fails, saying so, when they differ from the readers).
"""

# ruff: noqa: E501 - the generated table holds each reader's description as one string, however long

from __future__ import annotations

# Everything from this line on is written by msgtrain.ingest.registry.catalog_text().
TABLE_MARK = "# -- the table" + " (generated) --"

# A reader's marks (msgtrain.ingest.core.marks.Marks) as data: (texts, path patterns); None: any file.
MarksData = tuple[tuple[str, ...], tuple[str, ...]] | None
# name, module (whose READER it is), traits (msgtrain.ingest.registry.TRAITS), marks, partner marks
Row = tuple[str, str, tuple[str, ...], MarksData, MarksData]

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
        "nemo_gym",
        "NVIDIA NeMo Gym rollouts (responses_create_params, response, reward; engine token ids per model call)",
        "sample_logs/nemo_gym/example_rollouts.jsonl",
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
        "amp",
        "Amp threads (T-*.json: messages of Anthropic-shaped blocks, tool_result runs keyed by toolUseID)",
        "sample_logs/amp/T-0e5a.json",
    ),
    (
        "cline_task",
        "Cline / Roo Code / Kilo Code task folders: api_conversation_history.json + ui_messages.json",
        "sample_logs/cline_task/1765000000000",
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
        "crush",
        "Crush / Go OpenCode SQLite databases: sessions + messages whose parts are [{type, data}]",
        "sample_logs/crush/crush.db",
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
        "aider_llm",
        "aider's LLM history (.aider.llm.history): every request as sent and its reply",
        "sample_logs/aider_llm/.aider.llm.history",
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
        "strands",
        "Strands Agents session folders: agents/agent_<id>/agent.json + messages/message_<n>.json",
        "sample_logs/strands/session_demo",
    ),
    (
        "opencode",
        "OpenCode storage folders: session/<project>/<id>.json, message/<session>/, part/<message>/",
        "sample_logs/opencode/storage",
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
# fmt: off
READERS: tuple[Row, ...] = (
    ('graph', 'msgtrain.ingest.formats.chats.native', (), (('"msgtrain.graph"',), ()), None),
    ('inspect_ai', 'msgtrain.ingest.formats.harnesses.inspect_ai', ('explain',), (('"eval"', '_journal/start.json', 'header.json'), ()), None),
    ('verifiers', 'msgtrain.ingest.formats.harnesses.verifiers', (), (('"reward"',), ()), None),
    ('nemo_gym', 'msgtrain.ingest.formats.harnesses.nemo_gym', (), (('"responses_create_params"',), ()), None),
    ('lm_eval', 'msgtrain.ingest.formats.harnesses.lm_eval', (), (('"doc_id"',), ()), None),
    ('mt_bench', 'msgtrain.ingest.formats.harnesses.mt_bench', ('partners',), (('"question_id"',), ()), (('"question_id"',), ())),
    ('options', 'msgtrain.ingest.formats.chats.options', (), (('"option_call"', '"option_result"', '"parts"'), ()), None),
    ('batch', 'msgtrain.ingest.formats.api.batch_files', ('partners',), (('"custom_id"', '"key"', '"recordId"'), ()), (('"custom_id"', '"key"'), ())),
    ('cassettes', 'msgtrain.ingest.formats.api.cassettes', (), ((), ('*.yaml', '*.yml')), None),
    ('lionagi', 'msgtrain.ingest.formats.sessions.lionagi', (), (('lionagi.', '"sender"'), ()), None),
    ('marsys', 'msgtrain.ingest.formats.sessions.marsys', (), (('"agent_call"', '"agent_response"', '"error"', '"message_id"'), ()), None),
    ('go_agent', 'msgtrain.ingest.formats.sessions.go_agent', (), (('"args"', '"thread_id"'), ()), None),
    ('amp', 'msgtrain.ingest.formats.sessions.amp', (), (('"messageId"',), ()), None),
    ('cline_task', 'msgtrain.ingest.formats.sessions.cline_task', ('detect_directory', 'partners'), (('<environment_details>',), ('*/api_conversation_history.json',)), ((), ('*/api_conversation_history.json',))),
    ('anthropic', 'msgtrain.ingest.formats.api.anthropic', (), (('"redacted_thinking"', '"request"', '"response"', '"system"', '"thinking"', '"tool_result"', '"tool_use"'), ()), None),
    ('openai_responses', 'msgtrain.ingest.formats.api.openai_responses', (), (('"custom_tool_call"', '"custom_tool_call_output"', '"function_call"', '"function_call_output"', '"input_audio"', '"input_file"', '"input_image"', '"input_text"', '"output_text"', '"reasoning"', '"request"', '"response"'), ()), None),
    ('calls', 'msgtrain.ingest.formats.api.calls', (), None, None),
    ('ag2_sqlite', 'msgtrain.ingest.formats.sessions.ag2_logs', (), ((), ()), None),
    ('crush', 'msgtrain.ingest.formats.sessions.crush', (), ((), ()), None),
    ('gemini_api', 'msgtrain.ingest.formats.api.gemini_api', (), (('"parts"',), ()), None),
    ('smolagents', 'msgtrain.ingest.formats.sessions.smolagents', (), (('"model_input_messages"',), ()), None),
    ('autogen', 'msgtrain.ingest.formats.sessions.autogen', (), (('"AssistantMessage"', '"TextMessage"', '"ToolCallRequestEvent"', '"UserMessage"'), ()), None),
    ('claude_code', 'msgtrain.ingest.formats.sessions.claude_code', ('partners',), (('"init"', '"leafUuid"', '"loglines"', '"parentUuid"', '"sessionId"', '"session_id"', '"snapshot"'), ()), ((), ('*/subagents/*',))),
    ('codex', 'msgtrain.ingest.formats.sessions.codex', (), (('"payload"', '"thread.started"'), ()), None),
    ('aider', 'msgtrain.ingest.formats.sessions.aider', ('reads_text', 'partners', 'explain'), (('# aider chat started at',), ('*.aider.chat.history.md', '*/.aider.conf.yml', '*/.aider.input.history', '*/.aider.model.metadata.json', '*/.aider.model.settings.yml')), ((), ('*.aider.chat.history.md',))),
    ('aider_llm', 'msgtrain.ingest.formats.sessions.aider_llm', ('reads_text',), (('to llm ',), ('*/.aider.llm.history',)), None),
    ('copilot_cli', 'msgtrain.ingest.formats.sessions.copilot_cli', (), (('"assistant.message"', '"session.start"', '"tool.execution_complete"', '"user.message"'), ()), None),
    ('gemini_cli', 'msgtrain.ingest.formats.sessions.gemini_cli', (), (('"$set"', '"sessionId"', '"session_id"', '"thoughts"', '"toolCalls"'), ()), None),
    ('swe_agent', 'msgtrain.ingest.formats.sessions.swe_agent', (), (('"history"',), ()), None),
    ('mini_swe_agent', 'msgtrain.ingest.formats.sessions.mini_swe_agent', (), (('"model_stats"', '"trajectory_format"'), ()), None),
    ('tau2_bench', 'msgtrain.ingest.formats.harnesses.tau2_bench', (), (('"agent_info"', '"reward_info"', '"user_scenario"'), ()), None),
    ('toolbench', 'msgtrain.ingest.formats.harnesses.toolbench', (), (('"node_type"', '"train_messages"'), ()), None),
    ('openhands', 'msgtrain.ingest.formats.sessions.openhands', (), (('"action"', '"observation"'), ()), None),
    ('openhands_v1', 'msgtrain.ingest.formats.sessions.openhands_v1', ('detect_directory',), ((), ()), None),
    ('strands', 'msgtrain.ingest.formats.sessions.strands', ('detect_directory',), ((), ()), None),
    ('opencode', 'msgtrain.ingest.formats.sessions.opencode', ('detect_directory',), ((), ()), None),
    ('otel', 'msgtrain.ingest.formats.traces.otel', (), (('gen_ai.', 'openinference.span.kind', 'llm.input_messages', '"input_messages"', 'mlflow.spanType'), ()), None),
    ('sharegpt', 'msgtrain.ingest.mappings:sharegpt', (), (('"from"', '"value"'), ()), None),
    ('openai_chat', 'msgtrain.ingest.mappings:openai_chat', ('explain',), (('"role"',), ()), None),
    ('structural', 'msgtrain.ingest.structure.structural', ('fallback',), None, None),
)
# fmt: on
