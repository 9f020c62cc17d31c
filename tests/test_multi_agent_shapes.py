"""Multi-agent transcripts the structural reader must read in one agent's view, or refuse: CAMEL role-playing
records and AutoGen 0.2 / AG2 chat histories.

CAMEL records follow camel-ai/camel ``examples/ai_society/role_playing_multiprocess.py`` (commit 0929b4a6): one JSON
object per session with ``role_1`` / ``role_2``, ``id``, ``original_task``, ``specified_task``, the messages as
``message_1`` ... ``message_N`` (each ``BaseMessage.to_dict()``: ``role_name``, ``role_type`` ``USER`` /
``ASSISTANT``, ``role``, ``content``; ``camel/messages.py`` at commit 0bdb33ad), ``termination_reason`` and
``num_messages``. Assistant turns counted by hand: the ASSISTANT agent's messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.cli import main
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.model.completeness import missing_context
from msgtrain.run.parts import LinearizeSettings, convert_file

SETTINGS = LinearizeSettings(None, None, (), None, None)


def camel_session(openai_role_of_user_agent: str = "user") -> dict[str, Any]:
    def message(agent: str, content: str) -> dict[str, Any]:
        user = agent == "USER"
        return {
            "role_name": "Stock Trader" if user else "Python Programmer",
            "role_type": agent,
            "role": openai_role_of_user_agent if user else "assistant",
            "content": content,
        }

    return {
        "role_1": "Python Programmer_RoleType.ASSISTANT",
        "role_2": "Stock Trader_RoleType.USER",
        "id": "001_001_001",
        "original_task": "Develop a trading bot for the stock market.",
        "specified_task": "Develop a Python bot that trades AAPL on the sentiment of social media posts.",
        "message_1": message("USER", "Instruction: Install the libraries the bot needs.\nInput: None"),
        "message_2": message("ASSISTANT", "Solution: run `pip install pandas tweepy`.\nNext request."),
        "message_3": message("USER", "Instruction: Load the posts into a DataFrame.\nInput: posts.csv"),
        "message_4": message("ASSISTANT", "Solution: `df = pd.read_csv('posts.csv')`.\nNext request."),
        "message_10": message("USER", "Instruction: Report the sentiment per day.\nInput: None"),
        "message_11": message("ASSISTANT", "Solution: `df.groupby('day').sentiment.mean()`.\nNext request."),
        "message_12": message("USER", "<CAMEL_TASK_DONE>"),
        "termination_reason": "<CAMEL_TASK_DONE>",
        "num_messages": 12,
    }


def read(path: Path) -> tuple[list[ReadGraph], list[ReadReject]]:
    events = list(read_events(detect_format(path), path))
    return [e for e in events if isinstance(e, ReadGraph)], [e for e in events if isinstance(e, ReadReject)]


@pytest.mark.parametrize("openai_role_of_user_agent", ["user", "assistant"])
def test_a_camel_session_is_read_in_the_assistant_agents_view_in_message_number_order(
    tmp_path: Path, openai_role_of_user_agent: str
) -> None:
    path = tmp_path / "001_001_001.json"
    path.write_text(json.dumps(camel_session(openai_role_of_user_agent)))
    (ev,), rejects = read(path)
    assert not rejects
    (branch,) = ev.graph.branches()
    # role_type says which agent spoke, whatever OpenAI role the log wrote; message_10 comes after message_4.
    assert [n.message.role for n in branch.nodes] == ["user", "assistant"] * 3 + ["user"]
    assert [n.message.text.split(":")[0] for n in branch.nodes][:2] == ["Instruction", "Solution"]
    assert "sentiment per day" in branch.nodes[4].message.text
    assert missing_context(ev.graph) == ["system_prompt"]  # the agents' system messages are not saved
    assert ev.extras["termination_reason"] == "<CAMEL_TASK_DONE>" and ev.extras["id"] == "001_001_001"
    assert not any(k.startswith("message_") for k in ev.extras)
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained) == (3, 3)


def test_the_mapping_explain_prints_for_a_camel_session_reads_it_back_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "session.json"
    path.write_text(json.dumps(camel_session("assistant")))
    assert main(["formats", "--explain", str(path)]) == 0
    text = capsys.readouterr().out
    mapping = tmp_path / "camel.yaml"
    mapping.write_text(text[text.index("formatting:") :].replace("\n    ", "\n"))
    assert "messages: message_*" in mapping.read_text() and "role_tag: role_type" in mapping.read_text()
    out = tmp_path / "out"
    assert main(["convert", str(path), "-o", str(out), "-q", "--map", str(mapping)]) == 0
    assert json.loads((out / "report.json").read_text())["turns"]["trained"] == 3


# AutoGen 0.2 / AG2 chats, in the shape microsoft/autogen (branch 0.2) and ag2ai/ag2 save them:
# ``ConversableAgent._append_oai_message`` (autogen/agentchat/conversable_agent.py) stores a received message as
# ``user`` and the agent's own as ``assistant``, each named after its sender; ``GroupChat.append``
# (autogen/agentchat/groupchat.py) names every message after its speaker, and the manager holds them as ``user``.
# ``ChatResult.chat_history`` is the initiator's ``chat_messages[recipient]``. Hand count: the LLM agent
# ("assistant") replied twice; in the group chat the Engineer spoke twice.
TWO_AGENTS_PROXY_VIEW = [
    {"content": "What is 2+2?", "role": "assistant", "name": "user_proxy"},
    {"content": "```python\nprint(2 + 2)\n```", "role": "user", "name": "assistant"},
    {"content": "exitcode: 0 (execution succeeded)\nCode output: 4", "role": "assistant", "name": "user_proxy"},
    {"content": "The answer is 4. TERMINATE", "role": "user", "name": "assistant"},
]
GROUP_CHAT = [
    {"content": "Find the latest paper on GPT-4 and its applications.", "role": "user", "name": "Admin"},
    {"content": "Plan: 1. The engineer searches arxiv.", "role": "user", "name": "Planner"},
    {"content": "```python\nprint(search('gpt-4'))\n```", "role": "user", "name": "Engineer"},
    {"content": "exitcode: 0 (execution succeeded)\nCode output: 2303.08774", "role": "user", "name": "Executor"},
    {"content": "The paper is arXiv:2303.08774. TERMINATE", "role": "user", "name": "Engineer"},
]


def flipped(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "role": "user" if m["role"] == "assistant" else "assistant"} for m in messages]


@pytest.mark.parametrize(
    ("name", "document", "agents"),
    [
        (
            "chat_result.json",
            {"chat_history": TWO_AGENTS_PROXY_VIEW, "summary": "4", "cost": {}},
            "assistant, user_proxy",
        ),
        ("proxy_chat_messages.json", {"assistant": TWO_AGENTS_PROXY_VIEW}, "assistant, user_proxy"),
        ("assistant_chat_messages.json", {"user_proxy": flipped(TWO_AGENTS_PROXY_VIEW)}, "assistant, user_proxy"),
        ("groupchat_messages.json", GROUP_CHAT, "Admin, Engineer, Executor, Planner"),
    ],
)
def test_an_autogen_chat_among_named_agents_is_refused_naming_them_never_trained_as_a_guess(
    tmp_path: Path, name: str, document: Any, agents: str
) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert not samples and stats.turns_trained == 0
    (reject,) = (json.loads(line) for line in rejects)
    assert reject["reason"] == "ambiguous_structure" and f"named agents ({agents})" in reject["message"]
    assert "roles: {assistant: [THE_MODEL_AGENT]" in reject["message"] + reject["hint"]


@pytest.mark.parametrize(
    ("document", "field", "model", "others", "replies"),
    [
        ({"chat_history": TWO_AGENTS_PROXY_VIEW}, "chat_history", "assistant", ["user_proxy"], 2),
        ({"messages": GROUP_CHAT}, "messages", "Engineer", ["Admin", "Planner", "Executor"], 2),
    ],
)
def test_a_mapping_that_names_the_model_agent_trains_its_turns_in_its_own_view(
    tmp_path: Path, document: Any, field: str, model: str, others: list[str], replies: int
) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(document))
    mapping = tmp_path / "agent.yaml"
    mapping.write_text(
        f"field_messages: {field}\nmessage_property_mappings: {{role: name, content: content}}\n"
        f"roles: {{assistant: [{model}], user: [{', '.join(others)}]}}\n"
    )
    out = tmp_path / "out"
    assert main(["convert", str(path), "-o", str(out), "-q", "--map", str(mapping)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["turns"]["found"], report["turns"]["trained"]) == (replies, replies)


def test_a_chat_whose_users_are_named_but_whose_assistant_is_not_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "name": "alice", "content": "Hi, I am Alice."},
                    {"role": "assistant", "content": "Hello Alice."},
                    {"role": "user", "name": "bob", "content": "And I am Bob."},
                    {"role": "assistant", "content": "Hello Bob."},
                ]
            }
        )
    )
    _, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects and stats.turns_trained == 2
