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
from msgtrain.ingest.base import ReadGraph, ReadReject
from msgtrain.ingest.boundary import read_events
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
