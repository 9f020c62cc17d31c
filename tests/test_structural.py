"""The structural reader: conversations found by shape in files no specific reader claims.

Fixtures are written here in the shape of real third-party files (the data itself is not copied); each says which
repository, path and commit its shape follows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.common.message_like import canonical_role
from msgtrain.ingest.common.shapes import normalise_messages
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import get_reader
from msgtrain.run.parts import LinearizeSettings, convert_file

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _events(path: Path) -> list[Any]:
    reader = detect_format(path)
    assert reader.name == "structural"
    return list(read_events(reader, path))


def _graphs(path: Path) -> list[ReadGraph]:
    return [e for e in _events(path) if isinstance(e, ReadGraph)]


def _origins(graph: ReadGraph) -> list[tuple[str, str]]:
    return [(n.message.role, n.origin.value) for n in graph.graph.nodes.values()]


# Shape of TRL's conversational prompt-completion datasets (huggingface/trl docs/source/dataset_formats.md: "prompt"
# and "completion" message lists), with a grader's sibling fields as eval harnesses add them (a numeric "score").
PROMPT_COMPLETION_ROWS = [
    {
        "example_id": 0,
        "prompt": [
            {"role": "system", "content": "Use the calculator."},
            {"role": "user", "content": "What is 12*7?"},
            {"role": "assistant", "content": "Example: 2*2 is 4."},
        ],
        "completion": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "calc", "arguments": '{"e": "12*7"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "84"},
            {"role": "assistant", "content": "84"},
        ],
        "answer": "84",
        "task": "arith",
        "score": 1.0,
        "info": {"level": 1},
    },
    {
        "example_id": 1,
        "prompt": [{"role": "user", "content": "What is 3+3?"}],
        "completion": [{"role": "assistant", "content": "6"}],
        "answer": "6",
        "task": "arith",
        "score": 0.0,
        "info": {},
    },
]


def test_prompt_completion_rows_train_only_the_completion_and_carry_score_and_siblings(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "graded.jsonl", PROMPT_COMPLETION_ROWS)
    first, _ = _graphs(path)
    assert _origins(first) == [
        ("system", "context"),
        ("user", "context"),
        ("assistant", "injected"),  # an in-prompt demonstration: not sampled by the policy
        ("assistant", "sampled"),
        ("tool", "context"),
        ("assistant", "sampled"),
    ]
    assert first.extras == {
        "example_id": 0,
        "answer": "84",
        "task": "arith",
        "score": 1.0,
        "reward": 1.0,  # a numeric score is the rows' reward when there is no "reward"
        "info": {"level": 1},
    }
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert rejects == [] and stats.turns_trained == 3
    assert sorted(s.reward for s in samples) == [0.0, 1.0]
    assert all(s.metadata["task"] == "arith" for s in samples)


# Shape of a Gemini API `Content[]` chat history (role "model", parts with functionCall / functionResponse), as
# google-gemini/generative-ai-python's ChatSession.history serialises it (docs/api/google/generativeai/protos).
GEMINI_HISTORY = {
    "model": "gemini-2.0-flash",
    "history": [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"c": 18}}}]},
        {"role": "model", "parts": [{"text": "It is 18°C."}]},
    ],
}


def test_a_gemini_content_history_is_read_with_its_calls_paired_by_name(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(GEMINI_HISTORY), encoding="utf-8")
    (graph,) = _graphs(path)
    roles = [("user", "context"), ("assistant", "sampled"), ("tool", "context"), ("assistant", "sampled")]
    assert _origins(graph) == roles
    assert graph.extras == {"model": "gemini-2.0-flash"}
    _, stats, rejects = convert_file(path, SETTINGS)
    assert rejects == [] and stats.turns_trained == 2


def test_anthropic_blocks_nested_in_a_saved_history_are_read(tmp_path: Path) -> None:
    # Shape of a coding assistant's saved Messages API history: {"session", "messages": [...Anthropic blocks]}.
    record = {
        "session": "s1",
        "state": {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "use ls", "signature": "x"},
                        {"type": "tool_use", "id": "tu_1", "name": "bash", "input": {"cmd": "ls"}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "a.py"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "One file: a.py"}]},
            ]
        },
    }
    path = tmp_path / "history.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    (graph,) = _graphs(path)
    assert [r for r, _ in _origins(graph)] == ["user", "assistant", "tool", "assistant"]
    _, stats, rejects = convert_file(path, SETTINGS)
    assert rejects == [] and stats.turns_trained == 2


def test_assistant_messages_of_several_named_speakers_are_rejected_naming_the_path(tmp_path: Path) -> None:
    # Shape of a multi-agent role-play log (camel-ai/camel role-playing sessions: two assistants taking turns).
    record = {
        "chat": [
            {"role": "user", "content": "Plan a trip"},
            {"role": "assistant", "name": "Planner", "content": "Step 1"},
            {"role": "assistant", "name": "Critic", "content": "Too vague"},
        ]
    }
    path = _jsonl(tmp_path / "roleplay.jsonl", [record, record])
    events = _events(path)
    assert all(isinstance(e, ReadReject) for e in events)
    error = events[0].error
    assert error.code == "ambiguous_structure" and "$" in error.message and "Critic, Planner" in error.message


def test_two_message_lists_side_by_side_are_ambiguous_and_say_how_many_replies_they_hold(tmp_path: Path) -> None:
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    other = [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
    path = _jsonl(tmp_path / "two.jsonl", [{"input": msgs, "history": other + msgs}, {"input": msgs, "history": other}])
    events = _events(path)
    assert [type(e) for e in events] == [ReadReject, ReadReject]
    assert "$.input, $.history" in events[0].error.message and "2 assistant messages" in events[0].error.message


def test_a_role_outside_the_vocabulary_is_never_guessed_and_its_json_path_is_named(tmp_path: Path) -> None:
    rows = [
        {"turns": [{"speaker": "human", "text": "hi"}, {"speaker": "gpt", "text": "hello"}]},
        {"turns": [{"speaker": "human", "text": "hi"}, {"speaker": "narrator", "text": "..."}]},
    ]
    path = _jsonl(tmp_path / "turns.jsonl", rows)
    good, bad = _events(path)
    assert isinstance(good, ReadGraph)
    assert isinstance(bad, ReadReject) and bad.error.code == "unknown_role"
    assert "$.turns[1]" in str(bad.error) and '"narrator"' in bad.error.message


def test_alpaca_records_train_the_output_after_instruction_and_input(tmp_path: Path) -> None:
    # Shape of hiyouga/LLaMA-Factory data/alpaca_en_demo.json (commit 3053a806e9c55c27159e77ee240a6e050f12e675).
    rows = [
        {"instruction": "Translate", "input": "bonjour", "output": "hello"},
        {"instruction": "Say hi", "input": "", "output": "hi", "history": [["q0", "a0"]]},
    ]
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    first, second = _graphs(path)
    user = next(n.message for n in first.graph.nodes.values() if n.message.role == "user")
    assert user.parts[0].text == "Translate\nbonjour"
    assert [r for r, _ in _origins(second)] == ["user", "assistant", "user", "assistant"]


def test_a_record_with_no_message_like_content_is_a_skip_with_a_reason(tmp_path: Path) -> None:
    msgs = [{"speaker": "user", "text": "q"}, {"speaker": "bot", "text": "a"}]
    path = _jsonl(tmp_path / "mixed.jsonl", [{"dialog": msgs, "x": 1}, {"event": "heartbeat"}, {"dialog": msgs}])
    events = _events(path)
    assert [type(e) for e in events] == [ReadGraph, ReadSkip, ReadGraph]
    assert events[1].reason == "no_conversation"


def test_files_a_specific_reader_claims_are_not_taken_by_the_fallback(tmp_path: Path) -> None:
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    path = _jsonl(tmp_path / "chat.jsonl", [{"messages": msgs}] * 2)
    assert detect_format(path).name == "openai_chat"


@pytest.mark.parametrize(
    ("logged", "canonical"),
    [
        ("Human", "user"),
        ("gpt", "assistant"),
        ("model", "assistant"),
        ("bot", "assistant"),
        ("AI", "assistant"),
        ("observation", "tool"),
        ("ipython", "tool"),
        ("function", "tool"),
        ("system", "system"),
        ("narrator", None),
    ],
)
def test_roles_are_normalised_through_one_vocabulary(logged: str, canonical: str | None) -> None:
    assert canonical_role(logged) == canonical


@pytest.mark.parametrize("role", ["function_call", "tool-call"])
def test_a_message_that_is_a_call_is_read_as_the_call_alone_never_also_as_its_json_text(role: str) -> None:
    # ShareGPT's function_call turn (glaive / LLaMA-Factory) and smolagents' tool-call message: the value is the
    # call; kept as the reply's text too, the call would be rendered, and trained, twice.
    call = {"name": "get_rate", "arguments": {"base": "USD"}}
    messages = [
        {"from": "human", "value": "Rate?"},
        {"from": role, "value": json.dumps(call)},
        {"from": "observation", "value": '{"rate": 0.92}'},
        {"from": "gpt", "value": "0.92."},
    ]
    out, _ = normalise_messages(messages, "$.conversations")
    reply = out[1]
    assert reply["role"] == "assistant" and not reply["content"]
    assert [c["function"]["name"] for c in reply["tool_calls"]] == ["get_rate"]


def test_chat_template_kwargs_beside_the_messages_are_the_template_arguments_as_the_openai_reader_reads_them(
    tmp_path: Path,
) -> None:
    # vLLM / SGLang requests carry chat_template_kwargs (Qwen3's enable_thinking changes the rendered prompt): the
    # OpenAI chat reader, an independent reading, puts them in the graph's environment; so does the structural reader.
    kwargs = {"enable_thinking": False}
    chat = [("user", "Is 7 prime?"), ("assistant", "Yes.")]
    openai = _jsonl(
        tmp_path / "openai.jsonl",
        [{"messages": [{"role": r, "content": c} for r, c in chat], "chat_template_kwargs": kwargs, "run": 1}],
    )
    other = _jsonl(
        tmp_path / "other.jsonl",
        [{"turns": [{"speaker": r, "text": c} for r, c in chat], "chat_template_kwargs": kwargs, "run": 1}],
    )
    (own,) = [e for e in read_events(detect_format(openai), openai) if isinstance(e, ReadGraph)]
    (found,) = _graphs(other)
    assert found.graph.current_env.kwargs == own.graph.current_env.kwargs == kwargs
    assert found.extras == own.extras == {"run": 1}
    bad = _jsonl(
        tmp_path / "bad.jsonl", [{"turns": [{"speaker": r, "text": c} for r, c in chat], "chat_template_kwargs": 1}]
    )
    (reject,) = [e for e in _events(bad) if isinstance(e, ReadReject)]
    assert reject.error.code == "bad_record" and "chat_template_kwargs" in str(reject.error)


def test_a_tool_result_answering_no_open_call_is_an_error_not_a_guess() -> None:
    with pytest.raises(Exception, match="answers no open tool call"):
        normalise_messages([{"role": "user", "content": "q"}, {"role": "tool", "content": "x"}], "$.m")


# ------------------------------------------------------------------------------------------ labels and preferences
# Shape of hiyouga/LLaMA-Factory data/kto_en_demo.json (commit e62a1f494763d368f8764714e41bdf19d5b0c02e):
# [{"messages": [{"content", "role"}...], "label": bool}] (dataset_info: "tags": {"role_tag": "role", ...},
# "columns": {"messages": "messages", "kto_tag": "label"}), and the ShareGPT form {conversations, label}.
KTO_ROWS = [
    {"messages": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"}], "label": True},
    {"messages": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "9"}], "label": False},
]


def _settings(**kw: Any) -> LinearizeSettings:
    return LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None, **kw
    )


@pytest.mark.parametrize("sharegpt", [False, True])
def test_a_reply_labelled_bad_is_never_trained_as_a_positive_example_by_default(tmp_path: Path, sharegpt: bool) -> None:
    rows = KTO_ROWS
    if sharegpt:
        rows = [
            {
                "conversations": [
                    {"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in r["messages"]
                ],
                "label": r["label"],
            }
            for r in KTO_ROWS
        ]
    path = tmp_path / "kto.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == []
    assert (stats.turns_found, stats.turns_trained, dict(stats.turns_dropped)) == (2, 1, {"negative_label": 1})
    (sample,) = samples
    assert sample.flags == ["label_positive"] and sample.metadata["label"] is True


def test_train_negative_trains_a_bad_reply_flagged_with_its_label(tmp_path: Path) -> None:
    path = tmp_path / "kto.json"
    path.write_text(json.dumps(KTO_ROWS), encoding="utf-8")
    samples, stats, _ = convert_file(path, _settings(train_negative=True))
    assert stats.turns_trained == 2
    assert sorted(s.flags[0] for s in samples) == ["label_negative", "label_positive"]


# Shapes of hiyouga/LLaMA-Factory data/dpo_en_demo.json (commit 3075df156a6520392aecf5e30bf888b621c0959c):
# {"conversations": [...], "chosen": {"from": "gpt", "value"}, "rejected": {...}}, and of TRL's preference
# datasets (huggingface/trl docs/source/dataset_formats.md): {"prompt", "chosen", "rejected"} as strings or lists.
PREFERENCE_RECORDS = {
    "llamafactory": {
        "conversations": [{"from": "human", "value": "Capital of France?"}],
        "chosen": {"from": "gpt", "value": "Paris."},
        "rejected": {"from": "gpt", "value": "Lyon."},
    },
    "trl_strings": {"prompt": "Capital of France?", "chosen": "Paris.", "rejected": "Lyon."},
    "trl_implicit_prompt": {
        "chosen": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}],
        "rejected": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Lyon."}],
    },
}


@pytest.mark.parametrize("shape", sorted(PREFERENCE_RECORDS))
def test_a_preference_pair_is_one_prompt_with_two_sibling_replies_and_only_the_chosen_is_trained(
    tmp_path: Path, shape: str
) -> None:
    path = _jsonl(tmp_path / "pairs.jsonl", [PREFERENCE_RECORDS[shape]] * 2)
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.records_converted == 2
    assert (stats.turns_found, stats.turns_trained, dict(stats.turns_dropped)) == (4, 2, {"negative_label": 2})
    assert all(s.flags == ["preference_chosen"] for s in samples)
    samples, stats, _ = convert_file(path, _settings(train_negative=True))
    assert stats.turns_trained == 4
    by_graph: dict[str, list[Any]] = {}
    for s in samples:
        by_graph.setdefault(s.graph_id, []).append(s)
    for pair in by_graph.values():  # the two replies of one pair share their context, hence their group id
        assert sorted(s.flags[0] for s in pair) == ["preference_chosen", "preference_rejected"]
        assert len({s.group_id for s in pair}) == 1


# ------------------------------------------------------------------------------------------ declarative mappings
# A support-desk export no reader knows: the speaker under "who", the text under "said", a satisfaction score.
DESK_ROWS = [
    {
        "ticket": f"T-{i}",
        "utterances": [
            {"who": "customer", "said": f"My order {i} is late."},
            {"who": "agent", "said": f"Sorry, order {i} ships today."},
        ],
        "csat": i,
        "resolved": bool(i % 2),
    }
    for i in range(3)
]
MAPPINGS = {
    # LLaMA-Factory dataset_info.json entry (hiyouga/LLaMA-Factory data/README.md, sharegpt format: columns + tags).
    "llamafactory": {
        "desk": {
            "file_name": "desk.jsonl",
            "formatting": "sharegpt",
            "columns": {"messages": "utterances", "reward": "csat", "kto_tag": "resolved"},
            "tags": {"role_tag": "who", "content_tag": "said", "user_tag": "customer", "assistant_tag": "agent"},
        }
    },
    # axolotl chat_template dataset keys (axolotl-ai-cloud/axolotl docs/dataset-formats/conversation.qmd).
    "axolotl": {
        "type": "chat_template",
        "field_messages": "utterances",
        "message_property_mappings": {"role": "who", "content": "said"},
        "roles": {"user": ["customer"], "assistant": ["agent"]},
        "field_reward": "csat",
        "field_label": "resolved",
    },
}


@pytest.mark.parametrize("form", sorted(MAPPINGS))
def test_a_mapping_in_either_convention_reads_a_shape_no_reader_knows(tmp_path: Path, form: str) -> None:
    import yaml

    from msgtrain.ingest.structure.mapping import mapping_text

    data = _jsonl(tmp_path / "desk.jsonl", DESK_ROWS)
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(yaml.safe_dump(MAPPINGS[form]), encoding="utf-8")
    samples, stats, rejects = convert_file(data, _settings(mapping=mapping_text(mapping)))
    assert rejects == []
    # "resolved" is the KTO label: the unresolved tickets' replies are not trained
    assert (stats.records_converted, stats.turns_trained, dict(stats.turns_dropped)) == (3, 1, {"negative_label": 2})
    (sample,) = samples
    assert sample.reward == 1.0 and sample.metadata["ticket"] == "T-1"


def test_a_mapping_with_an_unknown_key_is_an_error_naming_it(tmp_path: Path) -> None:
    from msgtrain.errors import ConfigError
    from msgtrain.ingest.structure.mapping import load_mapping

    with pytest.raises(ConfigError, match="unknown column 'mesages'"):
        load_mapping({"formatting": "sharegpt", "columns": {"mesages": "x"}})
    with pytest.raises(ConfigError, match="unknown mapping key 'field_message'"):
        load_mapping({"field_message": "x"})


def test_explain_prints_the_mapping_it_used_and_convert_with_that_mapping_reads_the_same(tmp_path: Path) -> None:
    from msgtrain.cli import main

    path = tmp_path / "dialogs.jsonl"
    path.write_text((Path(__file__).parents[1] / "sample_logs/structural/chat_export.jsonl").read_text())
    exp_file = tmp_path / "explain.txt"
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["formats", "--explain", str(path)]) in (0, None)
    text = out.getvalue()
    assert "read by the structural reader" in text and "'bot' -> assistant" in text
    mapping_yaml = text.split("mapping (edit it", 1)[1].split("\n", 1)[1]
    exp_file.write_text("\n".join(line[4:] for line in mapping_yaml.splitlines()), encoding="utf-8")
    out_dir = tmp_path / "out"
    assert main(["convert", str(path), "-o", str(out_dir), "--map", str(exp_file), "-q"]) == 0
    report = json.loads((out_dir / "report.json").read_text())
    assert report["turns"]["trained"] == 3 and report["records"]["converted"] == 2


@pytest.mark.parametrize(
    "output",
    [
        "Refund issued.",
        {"role": "assistant", "content": "Refund issued."},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Refund issued."}}]},
    ],
)
def test_a_generation_logged_as_input_messages_and_an_output_trains_the_output(tmp_path: Path, output: Any) -> None:
    # Shape of a tracing tool's generation span (Langfuse-style {"type": "generation", "input": [...], "output"}).
    span = {
        "trace": "t1",
        "spans": [
            {"id": "s1", "type": "span", "name": "retrieve"},
            {
                "id": "g1",
                "type": "generation",
                "model": "gpt-4o",
                "input": [
                    {"role": "system", "content": "You are a support agent."},
                    {"role": "user", "content": "I want a refund."},
                ],
                "output": output,
            },
        ],
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(span), encoding="utf-8")
    (graph,) = _graphs(path)
    assert _origins(graph) == [("system", "context"), ("user", "context"), ("assistant", "sampled")]
    assert graph.extras["model"] == "gpt-4o"


def test_replies_beside_the_conversation_are_never_dropped_silently(tmp_path: Path) -> None:
    # Shape of NVIDIA NeMo-RL's ranked preference data: {"context": [...], "completions": [{"rank", "completion"}]}.
    record = {
        "context": [{"role": "user", "content": "Hello"}],
        "completions": [
            {"rank": 0, "completion": [{"role": "assistant", "content": "Hi"}]},
            {"rank": 1, "completion": [{"role": "assistant", "content": "Go away"}]},
        ],
    }
    path = _jsonl(tmp_path / "ranked.jsonl", [record, record])
    events = _events(path)
    assert [type(e) for e in events] == [ReadReject, ReadReject]
    assert "$.completions (2)" in events[0].error.message and events[0].turns == 2


def test_an_output_whose_input_is_empty_is_not_trained_after_a_context_the_policy_never_saw(tmp_path: Path) -> None:
    # Shape of camel-ai/camel examples/datagen/self_instruct/data_output.json (commit 13dc7a7dda66d943949e5448d55e7
    # 0d5a9481cfe): the instruction is beside a list of {"input": "", "output"} instances.
    rows = [{"id": "t1", "instruction": "Write a story.", "instances": [{"input": "", "output": "Once upon a time."}]}]
    path = tmp_path / "data_output.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    reader = get_reader("structural")
    assert not [e for e in read_events(reader, path) if isinstance(e, ReadGraph)]


def test_a_message_tree_is_read_as_a_tree_not_as_a_transcript_of_its_replies(tmp_path: Path) -> None:
    # Shape of OpenAssistant's message trees (LAION-AI/Open-Assistant data/datasets: {"role": "prompter", "text",
    # "replies": [...]}): the replies' context is the message above them, which a transcript of them would lose.
    tree = {
        "message_id": "m0",
        "role": "prompter",
        "text": "Explain gravity.",
        "replies": [
            {"message_id": "m1", "role": "assistant", "text": "Mass attracts mass.", "replies": []},
            {"message_id": "m2", "role": "assistant", "text": "It bends spacetime.", "replies": []},
        ],
    }
    path = _jsonl(tmp_path / "trees.jsonl", [tree, tree])
    graphs = _graphs(path)
    assert len(graphs) == 2
    for read in graphs:  # the two replies are siblings after the prompt, each trained in its own context
        assert sorted(_origins(read)) == [("assistant", "sampled"), ("assistant", "sampled"), ("user", "context")]
        assert len(read.graph.leaves()) == 2


def test_message_rows_with_parent_ids_are_read_as_a_tree_each_reply_in_its_own_context(tmp_path: Path) -> None:
    # Shape of OpenAssistant's flat message rows (message_id, parent_id, role prompter/assistant, text; the
    # oasst1 2023-04-12 export read by LAION-AI/Open-Assistant model/model_training/custom_datasets).
    rows = [
        {"message_id": "a", "parent_id": None, "role": "prompter", "text": "Hi", "lang": "en"},
        {"message_id": "b", "parent_id": "a", "role": "assistant", "text": "Hello!", "lang": "en"},
        {"message_id": "c", "parent_id": "b", "role": "prompter", "text": "How are you?", "lang": "en"},
        {"message_id": "d", "parent_id": "c", "role": "assistant", "text": "Fine.", "lang": "en"},
        {"message_id": "e", "parent_id": "a", "role": "assistant", "text": "Hey.", "lang": "en"},
        {"message_id": "f", "parent_id": "zz", "role": "assistant", "text": "Lost.", "lang": "en"},
    ]
    path = _jsonl(tmp_path / "oasst.jsonl", rows)
    events = _events(path)
    (graph,) = [e for e in events if isinstance(e, ReadGraph)]
    (orphan,) = [e for e in events if isinstance(e, ReadReject)]
    assert graph.records == 5 and len(graph.graph.leaves()) == 2 and orphan.error.code == "orphan_message"
    _samples, stats, _ = convert_file(path, SETTINGS)
    assert stats.turns_trained == 3 and stats.records_read == 6


def test_message_per_line_without_parents_is_one_conversation(tmp_path: Path) -> None:
    rows = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}, {"from": "human", "value": "q2"}]
    rows += [{"from": "gpt", "value": "a2"}]
    path = _jsonl(tmp_path / "lines.jsonl", rows)
    forced = LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format="structural"
    )
    _, stats, rejects = convert_file(path, forced)
    assert rejects == [] and stats.turns_trained == 2 and stats.graphs == 1


def test_a_json_array_of_message_rows_with_parent_ids_is_a_tree_not_one_transcript(tmp_path: Path) -> None:
    # Shape of LAION-AI/Open-Assistant backend/test_data/generic/test_generic_data.json (commit
    # f1e6ed9526f5817531f3ab85441a40b3671ddccb): task_message_id, user_message_id, parent_message_id, text, role.
    rows = [
        {
            "task_message_id": "t1",
            "user_message_id": "u1",
            "parent_message_id": None,
            "text": "Hi!",
            "role": "prompter",
        },
        {
            "task_message_id": "t2",
            "user_message_id": "u2",
            "parent_message_id": "u1",
            "text": "Hello!",
            "role": "assistant",
        },
        {
            "task_message_id": "t3",
            "user_message_id": "u3",
            "parent_message_id": "u2",
            "text": "Soup?",
            "role": "prompter",
        },
        {
            "task_message_id": "t4",
            "user_message_id": "u4",
            "parent_message_id": "u2",
            "text": "Tea?",
            "role": "prompter",
        },
        {
            "task_message_id": "t5",
            "user_message_id": "u5",
            "parent_message_id": "u3",
            "text": "Yes.",
            "role": "assistant",
        },
    ]
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    (graph,) = _graphs(path)
    assert graph.records == 5 and len(graph.graph.leaves()) == 2
    _, stats, rejects = convert_file(path, SETTINGS)
    assert rejects == [] and stats.turns_trained == 2


def test_a_transcript_beside_its_own_prefix_is_read_once(tmp_path: Path) -> None:
    # Shape of NVIDIA-NeMo/RL tests/unit/environments/nemo_gym_test_data/test_nemo_gym_sanity.json (commit
    # 7ea279abfbeb698b092856d0dab61e7cf39bc909): expected_output[] = {message_log, input_message_log}.
    user = {"role": "user", "content": "Extract the synonyms."}
    record = {
        "message_log": [user, {"role": "assistant", "content": "calling"}, {"role": "user", "content": "ok"}],
        "input_message_log": [user],
    }
    record["message_log"].append({"role": "assistant", "content": "Done."})
    path = tmp_path / "gym.json"
    path.write_text(json.dumps({"expected_output": [record, record]}), encoding="utf-8")
    graphs = _graphs(path)
    assert len(graphs) == 2 and all(len(g.graph.nodes) == 4 for g in graphs)


def test_a_record_whose_type_field_is_a_list_is_judged_by_its_shape_not_a_crash_of_detection(tmp_path: Path) -> None:
    # a Codex rollout line whose "type" a damaged writer (or a fuzzer) made a list: LangChain's message kinds are
    # looked up only for a string "type"
    line = {"timestamp": "2026-05-12T10:00:00Z", "type": [1], "payload": {"type": "message", "role": "user"}}
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps({**line, "n": i}) + "\n" for i in range(3)), encoding="utf-8")
    _, stats, _ = convert_file(path, _settings())
    assert set(stats.records_rejected) == {"unknown_format"}  # nothing message-like: no reader claims it
