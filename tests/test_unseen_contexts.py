"""Replies whose context the log does not show as it was sent: counted, never trained in the wrong context.

The fixtures are hand-made in the shapes of tests/fixtures/unseen/PROVENANCE.md; every count is by hand."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.formats.sessions.cline_task import HISTORY
from msgtrain.model.completeness import SHRUNK_PROMPT, carry_replies_after_shrunk_prompt, reported_prompt_range
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import (
    Generation,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    PartsMessage,
    ReasoningPart,
    TextPart,
    text_message,
)
from msgtrain.run.parts import convert_file
from msgtrain.run.plan import discover_inputs
from tests.conftest import ROOT
from tests.unseen_books import FIXTURES, SETTINGS, contexts, graphs


def _reply(text: str, prompt: int, *, reasoning: str | None = None, model: str = "m-1") -> PartsMessage:
    parts = ((ReasoningPart(text=reasoning),) if reasoning else ()) + (TextPart(text=text),)
    return PartsMessage(
        parts=parts,
        role_hint_for_llm="assistant",
        metadata={"usage": {"input_tokens": prompt}},
        generation=Generation(model=model),
    )


def _call(prompt: int, reasoning: str) -> OptionCallMessage:
    return OptionCallMessage(
        parts=(ReasoningPart(text=reasoning),),
        calls=(OptionCallPayload(invocation_id="c1", option_name="read_log", arguments={}),),
        metadata={"usage": {"input_tokens": prompt}},
        generation=Generation(model="m-1"),
    )


def _result() -> OptionResultMessage:
    return OptionResultMessage(result=OptionResultPayload(invocation_id="c1", option_name="read_log", result="ok"))


def _origins(graph: MessageGraph) -> list[str]:
    return [n.origin.value for n in graph.nodes.values() if n.is_assistant]


def test_replies_after_a_history_the_agent_cut_unlogged_are_counted_not_trained() -> None:
    # A Cline task history (api_conversation_history.json, its assistant messages' metrics.tokens.prompt) whose
    # context manager removed the middle of the history before the fourth request: Cline keeps the file whole, so
    # the log shows 158,611 tokens of history where the model was sent 80,644
    path = FIXTURES / "cline-truncated-history.json"
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (3, {"context_unknown": 2}, 0)
    trained = contexts(path)
    assert [len(c) for c in trained] == [2, 4, 6]  # the first three replies, each after the whole history before it
    assert trained[2][-1] == ("assistant", [("replace_in_file", trained[2][-1][1][0][1])])
    assert trained[2][-1][1][0][1]["path"] == "src/config.py"
    (graph,) = graphs(path)
    why = list(graph.metadata[SHRUNK_PROMPT].values())
    assert len(why) == 2 and "80644 tokens" in why[0] and "(158611)" in why[0]


def test_a_prompt_that_shrinks_only_by_reasoning_dropped_at_a_new_user_turn_is_not_a_cut() -> None:
    # Anthropic (and Qwen3's template) keep the thinking of the open tool loop in the prompt and drop it once a new
    # user turn starts: the next prompt may be smaller without anything cut
    graph = MessageGraph(graph_id="g")
    graph.append(text_message("user", "Fix the build."))
    graph.append(_call(1000, "a long chain of thought " * 50))
    graph.append(_result())
    graph.append(_reply("Found it.", 3000))  # the loop's thinking is in this prompt
    graph.append(text_message("user", "Thanks, now the tests."))
    graph.append(_reply("On it.", 2500))  # smaller: the thinking of the loop left the prompt, nothing was cut
    assert carry_replies_after_shrunk_prompt(graph) == 0
    assert _origins(graph) == ["sampled"] * 3


def test_a_prompt_that_shrinks_within_one_model_taints_the_rest_of_its_branch_only() -> None:
    graph = MessageGraph(graph_id="g")
    graph.append(text_message("user", "Plan the trip."))
    first = graph.append(_reply("Day one: the museum.", 5000))
    graph.append(text_message("user", "And day two?"))
    graph.append(_reply("Day two: the coast.", 9000))
    graph.append(text_message("user", "And day three?"))
    graph.append(_reply("Day three: rest.", 4000, model="m-2"))  # another model (tokenizer): not comparable
    graph.append(text_message("user", "And day four?"))
    graph.append(_reply("Day four: the hills.", 6000))  # m-1 again: 6000 < 9000, the history was cut
    graph.append(text_message("user", "And day five?"))
    graph.append(_reply("Day five: home.", 7000))  # grows again from the cut history: still not the log's
    # another branch from the first reply (an edit): its prompt is compared with its own path only
    side = graph.add_node(first, text_message("user", "Only one day, then."))
    graph.add_node(side, _reply("Then the museum alone.", 5200))
    assert carry_replies_after_shrunk_prompt(graph) == 2
    assert _origins(graph) == ["sampled", "sampled", "sampled", "carried", "carried", "sampled"]
    assert all(n.origin is Origin.CARRIED for n in graph.nodes.values() if "why_not_trained" in n.message.metadata)


def test_an_opencode_storage_folder_is_read_as_sessions_of_joined_message_and_part_files() -> None:
    # session/<project>/<id>.json, message/<session>/<id>.json, part/<message>/<id>.json (sst/opencode message-v2.ts):
    # before, each file was read alone (43 rejects, nothing trained)
    path = FIXTURES / "opencode-storage"
    _, stats, _ = convert_file(path, SETTINGS)
    # two calls of the first turn, two of the retried one, the summary, two after the compaction, the sub-agent's
    # reply; the reply the user aborted is kept as context, not trained
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (8, {"interrupted": 1}, 0)
    assert stats.records_read == 56 and not stats.records_rejected
    assert dict(stats.records_skipped) == {
        "opencode_messages_without_session": 1,
        "opencode_migration": 1,
        "opencode_project": 1,
        "opencode_todo": 1,
    }
    trained = contexts(path)
    first = trained[0]
    # the prompt with the file contents OpenCode read for the @-mention (synthetic text parts), then the first call
    assert first[0][0] == "user" and "00002|     cart = load('fixtures/cart.json')" in first[0][1]
    assert first[1] == ("assistant", [("glob", {"pattern": "**/cart.json"})])
    # the failed request (an APIError) is in no later request: the two prompts follow each other
    retried = trained[2]
    assert retried[-3:-1] == [("user", "Fix it."), ("user", "Try again, please.")]
    # the summary is sampled after the whole history and the compaction prompt; the requests after it hold only
    # that prompt, the summary and what follows
    summary = trained[4]
    assert len(summary) == 11 and summary[-2] == ("user", "What did we do so far?")
    after = trained[5]
    assert [m[0] for m in after] == ["user", "assistant", "user", "assistant"]
    assert after[0] == ("user", "What did we do so far?") and after[1] == summary[-1]
    assert after[3] == ("assistant", [("bash", {"command": "ruff check"})])
    sessions = graphs(path)
    assert [g.metadata.get("parentID") for g in sessions] == [None, "ses_5a1b2c3d4e0001"]
    assert all(g.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"] for g in sessions)


def test_a_cline_task_folder_keeps_the_replies_after_clines_context_truncation_out_of_training() -> None:
    # api_conversation_history.json (the whole history, kept on disk) beside ui_messages.json, whose messages carry
    # the range Cline's context manager removed from the requests (conversationHistoryDeletedRange, stamped from the
    # fifth request's setup on) and each request's tokens: before, the history was read alone by the Anthropic reader
    # (six replies trained, two of them in a history they were not sent) and the two other files were rejects
    path = FIXTURES / "cline-task" / "1765000000000"
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (4, {"context_unknown": 2}, 0)
    assert stats.records_read == 3 and not stats.records_rejected
    assert dict(stats.records_skipped) == {"cline_task_metadata": 1}
    # each after the whole history before it (a result's turn is its tool result, then Cline's environment details)
    trained = contexts(path)
    assert [len(c) for c in trained] == [2, 5, 8, 10]
    roles = ["user"] + ["assistant", "tool", "user"] * 2 + ["assistant", "user", "assistant"]
    assert [m[0] for m in trained[3]] == roles
    (graph,) = graphs(path)
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]
    replies = [n for n in graph.nodes.values() if n.is_assistant]
    # a request's tokens are the reported prompt of the reply it produced: tokensIn alone, or with the cache counts
    # (whether tokensIn holds them is the provider's)
    prompts = [reported_prompt_range(n.message.metadata) for n in replies]
    assert prompts == [(3, t) for t in (11820, 12410, 12903, 13377, 13950, 14420)]
    assert [n.origin.value for n in replies[4:]] == ["carried", "carried"]
    assert "removed messages 2..5" in replies[4].message.metadata["why_not_trained"]


def test_a_cline_task_whose_context_manager_edited_earlier_messages_trains_only_the_replies_before_the_edit(
    tmp_path: Path,
) -> None:
    # context_history.json: [message index, [edit type, [[block index, [[timestamp, type, update, metadata]]]]]],
    # an edit (a file read replaced by a note) applied to the requests after its timestamp: the third request
    # (sent at +30 s) held the edited message, the log holds it unedited
    folder = tmp_path / "1765000000000"
    shutil.copytree(ROOT / "sample_logs" / "cline_task" / "1765000000000", folder)
    note = "[[NOTE] This file read has been removed to save space in the context window. Refer to the latest file read]"
    edits = [[2, [2, [[0, [[1765000025000, "text", [note], []]]]]]]]
    (folder / "context_history.json").write_text(json.dumps(edits), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (2, {"context_unknown": 1}, 0)
    assert stats.records_read == 4 and not stats.records_rejected


def test_a_list_of_anthropic_messages_says_it_lacks_the_system_prompt_a_request_body_would_hold() -> None:
    # Anthropic messages never hold the system prompt (a request field): a saved list of them cannot say none was sent
    (graph,) = graphs(FIXTURES / "cline-text-results.json")
    assert "system_prompt" in graph.metadata["context_incomplete"]["missing"]


def test_aiders_llm_history_trains_each_reply_after_exactly_the_request_aider_logged() -> None:
    # .aider.llm.history (log_llm_history + format_messages): "TO LLM <time>", "-------" before each message, every
    # content line prefixed with its role; "LLM RESPONSE <time>" and the reply. Before, the file (no log suffix) was
    # passed over, and read alone it was no format
    path = FIXTURES / "aider-llm-history" / ".aider.llm.history"
    assert detect_format(path).name == "aider_llm"
    _, stats, _ = convert_file(path, SETTINGS)
    # the edit, the weak model's commit message, the test after the retried prompt; aider's canned "Ok." replies in
    # the requests' history are context (no logged call produced them); a request the user interrupted is skipped
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (3, {"context_unknown": 3}, 0)
    assert dict(stats.records_skipped) == {"aider_request_without_reply": 1} and not stats.records_rejected
    trained = contexts(path)
    first = next(c for c in trained if c[0][1].startswith("Act as an expert") and len(c) == 7)
    assert first[0] == (
        "system",
        "Act as an expert software developer.\nAlways use best practices when coding.\n\n"
        "Once you understand the request you MUST describe each change with a *SEARCH/REPLACE block*.",
    )
    assert [m[0] for m in first] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert first[-1][1].endswith("if i.price is not None)\n>>>>>>> REPLACE\n```")
    assert any(c[-1] == ("assistant", "fix: skip items without a price in total()") and len(c) == 3 for c in trained)
    last = max(trained, key=len)
    assert last[-2] == ("user", "Also add a test for it. Use pytest.") and last[6] == first[-1]


def test_aiders_llm_history_is_found_in_a_folder_without_a_log_suffix(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "aider-llm-history" / ".aider.llm.history", tmp_path / ".aider.llm.history")
    shutil.copy(FIXTURES / "aider-llm-history" / ".aider.llm.history", tmp_path / "llm-history.txt")
    files, ignored = discover_inputs([tmp_path])
    assert sorted(Path(f).name for f in files) == [".aider.llm.history", "llm-history.txt"] and not ignored


def _opencode_database(folder: Path, db: Path) -> None:
    """``folder`` migrated into an ``opencode.db`` as OpenCode 1.2's json-migration.ts does: ids from the file
    names, ``data`` each message's and part's JSON without its ids."""
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE project (id TEXT PRIMARY KEY, worktree TEXT, time_created INTEGER);"
        "CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, parent_id TEXT, slug TEXT, directory TEXT,"
        " title TEXT, version TEXT, time_created INTEGER, time_updated INTEGER);"
        "CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, time_updated INTEGER,"
        " data TEXT NOT NULL);"
        "CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, time_created INTEGER,"
        " time_updated INTEGER, data TEXT NOT NULL);"
    )
    for file in sorted((folder / "session").glob("*/*.json")):
        s = json.loads(file.read_text(encoding="utf-8"))
        row = (file.stem, file.parent.name, s.get("parentID"), "", s["directory"], s["title"], s["version"], 1, 1)
        con.execute("INSERT INTO session VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    for file in sorted((folder / "message").glob("*/*.json")):
        m = json.loads(file.read_text(encoding="utf-8"))
        sid = m.pop("sessionID")
        if not (folder / "session" / "4f2a9c" / f"{sid}.json").is_file():
            continue  # the migration leaves out messages of sessions it has not
        m.pop("id")
        created = m["time"]["created"]
        con.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (file.stem, sid, created, created, json.dumps(m)))
        for part_file in sorted((folder / "part" / file.stem).glob("*.json")):
            p = json.loads(part_file.read_text(encoding="utf-8"))
            for key in ("id", "messageID", "sessionID"):
                p.pop(key)
            con.execute("INSERT INTO part VALUES (?, ?, ?, 1, 1, ?)", (part_file.stem, file.stem, sid, json.dumps(p)))
    con.commit()
    con.close()


def test_opencodes_database_trains_what_its_storage_folder_trains(tmp_path: Path) -> None:
    # OpenCode 1.2 on keeps the same records in opencode.db (tables session, message and part, each row's JSON in
    # data); its migration of the fixture folder is read by the same rules: the same replies in the same contexts
    folder = FIXTURES / "opencode-storage"
    db = tmp_path / "opencode.db"
    _opencode_database(folder, db)
    assert detect_format(db).name == "opencode"
    _, stats, _ = convert_file(db, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (8, {"interrupted": 1}, 0)
    # the folder's session, message and part records (52), no more: the migration leaves the orphan out
    assert stats.records_read == 2 + 14 + 36 and not stats.records_rejected
    assert contexts(db) == contexts(folder)


def test_opencode_replies_after_it_cleared_old_tool_results_are_context_until_a_compaction(tmp_path: Path) -> None:
    # OpenCode's prune marks a completed tool part state.time.compacted and sends it as "[Old tool result content
    # cleared]" from then on: the retried turn (created after) and the summary saw the cleared text, which the log
    # does not rebuild; after the compaction the requests no longer hold that result, and are exact again
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    glob = next(p for p in (folder / "part" / "msg_0002").glob("*.json") if '"glob"' in p.read_text(encoding="utf-8"))
    part = json.loads(glob.read_text(encoding="utf-8"))
    part["state"]["time"]["compacted"] = 1765000030000
    glob.write_text(json.dumps(part), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (5, {"context_unknown": 3, "interrupted": 1})
    assert [len(c) for c in contexts(folder)] == [2, 4, 4, 6, 2]


def test_a_crush_database_trains_each_call_in_the_history_its_agent_sent(tmp_path: Path) -> None:
    # crush.db (sessions + messages whose parts are [{type, data}]), built from the hand-made SQL of its migrations;
    # before, the database was no format
    db = tmp_path / "crush.db"
    con = sqlite3.connect(db)
    con.executescript((FIXTURES / "crush-sessions.sql").read_text(encoding="utf-8"))
    con.close()
    assert detect_format(db).name == "crush"
    _, stats, _ = convert_file(db, SETTINGS)
    # the grep call and the diagnosis, the edit and its report after the summary, the sub-agent's answer; the
    # canceled reply is context, the summary was sampled after a prompt the database does not keep
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (
        5,
        {"interrupted": 1, "context_unknown": 1},
        0,
    )
    assert stats.records_read == 2 + 15 and dict(stats.records_skipped) == {"crush_messages_without_session": 1}
    trained = contexts(db)
    assert trained[0][-1] == ("assistant", [("grep", {"pattern": "for order in", "path": "app"})])
    # after the summary, requests open with it as a user message: the history before it is in none of them
    edit = next(c for c in trained if c[-1][0] == "assistant" and c[-1][1] and c[-1][1][0][0] == "edit")
    assert edit[0][0] == "user" and edit[0][1].startswith("Summary: the orders page ran")
    assert [m[0] for m in edit] == ["user", "user", "assistant"]


def test_a_history_roo_condensed_in_place_trains_neither_its_summary_nor_the_replies_after_it() -> None:
    # Roo Code / Kilo Code condense without deleting: the replaced messages stay, tagged condenseParent, and the
    # summary (isSummary, condenseId) sits before the kept tail. Before, the summary was trained as a reply and the
    # replies after it in the whole history, which the requests after the condense did not hold
    path = FIXTURES / "roo-condensed-history.json"
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (2, {"context_unknown": 2}, 0)
    assert [c[-1][1][0][0] for c in contexts(path)] == ["read_file", "write_to_file"]
    (graph,) = graphs(path)
    summary = next(n for n in graph.nodes.values() if n.message.text.startswith("## Summary"))
    assert summary.origin.value == "injected"


def test_a_cline_request_whose_cache_missed_is_not_read_as_a_cut_history(tmp_path: Path) -> None:
    # with an OpenAI-compatible provider tokensIn holds the cached tokens and cacheReads repeats them: a request that
    # hit the cache (12,410 in, 12,000 of them cached) then one that missed it (12,903 in, none cached) is a history
    # that grew; summed, the second looked 11,507 tokens smaller than the first, and its reply was not trained
    folder = tmp_path / "1765000000000"
    shutil.copytree(ROOT / "sample_logs" / "cline_task" / "1765000000000", folder)
    ui = json.loads((folder / "ui_messages.json").read_text(encoding="utf-8"))
    requests = [m for m in ui if m.get("say") == "api_req_started"]
    for message, counts in zip(requests[1:], [(12410, 0, 12000), (12903, 0, 0)], strict=True):
        info = json.loads(message["text"])
        info["tokensIn"], info["cacheWrites"], info["cacheReads"] = counts
        message["text"] = json.dumps(info)
    (folder / "ui_messages.json").write_text(json.dumps(ui), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (3, {})


def test_a_task_folder_of_claude_dev_before_cline_2_is_read_with_its_claude_messages_json(tmp_path: Path) -> None:
    # Cline renames claude_messages.json to ui_messages.json when it opens an older task; one never opened again
    # keeps the old name (before, the folder was not a unit: the UI file a reject, the history read alone)
    folder = tmp_path / "1765000000000"
    shutil.copytree(FIXTURES / "cline-task" / "1765000000000", folder)
    (folder / "ui_messages.json").rename(folder / "claude_messages.json")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (4, {"context_unknown": 2})
    assert stats.records_read == 3 and not stats.records_rejected


def test_a_crush_summary_is_known_by_its_message_flag_in_later_schemas(tmp_path: Path) -> None:
    # later migrations mark the summary on the message (is_summary_message) and number messages (seq)
    db = tmp_path / "crush.db"
    con = sqlite3.connect(db)
    con.executescript((FIXTURES / "crush-sessions.sql").read_text(encoding="utf-8"))
    con.executescript(
        "ALTER TABLE messages ADD COLUMN is_summary_message INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE messages ADD COLUMN seq INTEGER;"
        "UPDATE messages SET is_summary_message = 1 WHERE id = 'm-08';"
        "UPDATE messages SET seq = CAST(substr(id, 3) AS INTEGER);"
        "UPDATE sessions SET summary_message_id = NULL;"
    )
    con.close()
    _, stats, _ = convert_file(db, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (5, {"interrupted": 1, "context_unknown": 1})


def test_a_transcript_beside_aiders_llm_history_trains_none_of_the_replies_the_history_trains() -> None:
    # both files in one repository: the LLM history trains each reply in the request aider logged; the transcript's
    # copies of them (no system prompt, no files) are kept as context, counted apart, never a second training
    folder = FIXTURES / "aider-llm-history"
    _, history, _ = convert_file(folder / ".aider.llm.history", SETTINGS)
    _, transcript, _ = convert_file(folder / ".aider.chat.history.md", SETTINGS)
    assert history.turns_trained == 3
    assert (transcript.turns_trained, dict(transcript.turns_dropped), transcript.history_copies) == (0, {}, 2)


def test_an_unreadable_opencode_part_is_a_reject_and_the_replies_after_it_wait_for_a_compaction(tmp_path: Path) -> None:
    # a part file cut short: its reply and every later request held a part the log lost, until the compaction's new
    # branch, which holds none of it
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    glob = next(p for p in (folder / "part" / "msg_0002").glob("*.json") if '"glob"' in p.read_text(encoding="utf-8"))
    glob.write_text(glob.read_text(encoding="utf-8")[:40], encoding="utf-8")
    _, stats, rejects = convert_file(folder, SETTINGS)
    assert [json.loads(r)["file"] for r in rejects] == [str(glob)]
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (3, {"context_unknown": 5, "interrupted": 1})
    assert stats.records_read == 56 and sum(stats.records_rejected.values()) == 1


def test_an_opencode_compaction_that_keeps_a_tail_puts_it_after_the_summary(tmp_path: Path) -> None:
    # tail_start_id: the requests after the summary hold the compaction prompt, the summary, the kept tail (from that
    # message to the prompt) and what follows (filterCompacted's order); before, those replies were not trained
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    marker = next((folder / "part" / "msg_0007").glob("*.json"))
    part = json.loads(marker.read_text(encoding="utf-8"))
    part["tail_start_id"] = "msg_0005"
    marker.write_text(json.dumps(part), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (8, {"interrupted": 1})
    after = next(c for c in contexts(folder) if c[-1] == ("assistant", [("bash", {"command": "ruff check"})]))
    assert [m[1] if isinstance(m[1], str) else m[0] for m in after][:3] == [
        "What did we do so far?",
        "We found that test_cart loaded a missing fixture and pointed it at tests/data/cart.json.",
        "Try again, please.",
    ]
    assert [m[0] for m in after[3:]] == ["assistant", "tool", "assistant", "user", "assistant"]


def test_a_carried_reply_reports_the_prompt_of_the_context_it_was_sampled_in_not_of_its_branch() -> None:
    # a compaction's new branch re-creates the summary and a kept tail as context: their reported prompts are those
    # of the long history they were sampled after, so a reply after them is compared with sampled replies only
    graph = MessageGraph(graph_id="g")
    graph.append(text_message("user", "What did we do so far?"))
    graph.append(_reply("We fixed the fixture path.", 10400), origin=Origin.CARRIED)
    graph.append(text_message("user", "Now run the linter."))
    graph.append(_reply("The linter passes.", 2300))
    assert carry_replies_after_shrunk_prompt(graph) == 0
    assert _origins(graph) == ["carried", "sampled"]


def test_a_cline_range_first_stamped_on_a_request_cuts_from_the_request_before_it(tmp_path: Path) -> None:
    # the range Cline stamps is the one in force when a UI message is made; the request that cut the history changed
    # it in its setup, after its own api_req_started: a range first seen on a request's api_req_started (no message
    # of the request before it stamped) was set by the request before
    folder = tmp_path / "1765000000000"
    shutil.copytree(FIXTURES / "cline-task" / "1765000000000", folder)
    ui = json.loads((folder / "ui_messages.json").read_text(encoding="utf-8"))
    requests = [i for i, m in enumerate(ui) if m.get("say") == "api_req_started"]
    for i, message in enumerate(ui):
        message.pop("conversationHistoryDeletedRange", None)
        if i >= requests[5]:
            message["conversationHistoryDeletedRange"] = [2, 5]
    (folder / "ui_messages.json").write_text(json.dumps(ui), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (4, {"context_unknown": 2})


def test_an_unreadable_opencode_summary_keeps_the_replies_after_its_compaction_out_of_training(tmp_path: Path) -> None:
    # the summary's text part cut short: every request after the compaction held that summary, which the log lost;
    # before, the compaction cleared the taint of a record it keeps, and those replies were trained without it
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    text = next(p for p in (folder / "part" / "msg_0008").glob("*.json") if '"text"' in p.read_text(encoding="utf-8"))
    text.write_text(text.read_text(encoding="utf-8")[:40], encoding="utf-8")
    _, stats, rejects = convert_file(folder, SETTINGS)
    assert [json.loads(r)["file"] for r in rejects] == [str(text)]
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (5, {"context_unknown": 2, "interrupted": 1})
    trained = contexts(folder)
    assert not any(m == ("user", "What did we do so far?") for c in trained for m in c)
    assert [len(c) for c in trained] == [2, 4, 7, 9, 2]  # the four before the compaction, the sub-agent's answer


def test_a_failed_opencode_turn_trains_its_finished_calls_on_a_branch_later_requests_do_not_hold(
    tmp_path: Path,
) -> None:
    # a turn whose second call failed mid-stream (an error on the message, no step-finish after the call's text):
    # OpenCode leaves the turn out of later requests; its first call was sampled in an exact context and is trained
    # there, the failing call's partial text is counted; before, both were gone without a count
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    info = folder / "message" / "ses_5a1b2c3d4e0001" / "msg_0002.json"
    message = json.loads(info.read_text(encoding="utf-8"))
    message["error"] = {"name": "APIError", "data": {"message": "Overloaded", "isRetryable": True}}
    info.write_text(json.dumps(message), encoding="utf-8")
    finishes = sorted(
        p for p in (folder / "part" / "msg_0002").glob("*.json") if '"step-finish"' in p.read_text(encoding="utf-8")
    )
    finishes[-1].unlink()
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (7, {"interrupted": 2}, 0)
    trained = contexts(folder)
    assert trained[0] == [
        ("user", trained[0][0][1]),
        ("assistant", [("glob", {"pattern": "**/cart.json"})]),
    ]
    # the next turn's requests hold the user's messages without the failed turn
    edit = next(c for c in trained if c[-1][1] and isinstance(c[-1][1], list) and c[-1][1][0][0] == "edit")
    assert [m[0] for m in edit] == ["user", "user", "user", "assistant"]


def test_aiders_llm_history_trains_no_reply_aider_did_not_keep_whole() -> None:
    # aider logs a response in send()'s finally: also a reply the user stopped (^C), one cut at the output limit, a
    # failed call (no line) and one that failed mid-stream; before, each was trained as a finished reply (the failed
    # call as an empty answer), with an end of turn the model never sampled
    path = FIXTURES / "aider-llm-cut-replies" / ".aider.llm.history"
    _, stats, _ = convert_file(path, SETTINGS)
    # trained: "Yes." and the one-line explanation; interrupted: the ^C reply, the reply cut at the limit, the reply
    # whose request was sent again; context: aider's canned answer to ^C, the continuation after the prefill, and
    # the whole reply aider kept from the two
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (
        2,
        {"interrupted": 3, "context_unknown": 3},
        0,
    )
    assert dict(stats.records_skipped) == {"aider_empty_response": 1} and not stats.records_rejected
    trained = contexts(path)
    assert [c[-1] for c in trained] == [("assistant", "Yes."), ("assistant", "It sums the prices of the items.")]
    assert trained[0][2:5] == [
        ("assistant", "The module defines total(), which sums the"),
        ("user", "^C KeyboardInterrupt"),
        ("assistant", "I see that you interrupted my previous reply."),
    ]
    assert trained[1][-3][1] == "cart.py\n```\ndef total(items):\n    return sum(i.price for i in items)\n```"


def test_aiders_reasoning_wrapper_is_reasoning_in_the_llm_history_and_its_transcript_copy_is_known(
    tmp_path: Path,
) -> None:
    # a reasoning model: aider logs the API's reasoning in its own <thinking-content-...> tag before the answer (in
    # the LLM history and the transcript alike) and strips it from later requests; before, the history trained the
    # tag and the reasoning as answer text, and the transcript's copy (its answer alone) was trained a second time
    folder = tmp_path / "repo"
    shutil.copytree(FIXTURES / "aider-llm-history", folder)
    tag = "thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b"
    history = folder / ".aider.llm.history"
    text = history.read_text(encoding="utf-8")
    first = text.index("LLM RESPONSE")
    first = text.index("\n", first) + 1
    wrapped = f"ASSISTANT <{tag}>\nASSISTANT \nASSISTANT Items may have price None; filter them.\nASSISTANT \n"
    history.write_text(text[:first] + wrapped + f"ASSISTANT </{tag}>\nASSISTANT \n" + text[first:], encoding="utf-8")
    transcript = folder / ".aider.chat.history.md"
    text = transcript.read_text(encoding="utf-8")
    at = text.index("src/cart.py\n```")
    reasoning = f"<{tag}>\n\nItems may have price None; filter them.\n\n</{tag}>\n\n"
    transcript.write_text(text[:at] + reasoning + text[at:], encoding="utf-8")
    (graph, *_) = graphs(history)
    replies = [n.message for n in graph.nodes.values() if n.origin is Origin.SAMPLED]
    assert [type(p).__name__ for p in replies[0].parts] == ["ReasoningPart", "TextPart"]
    assert replies[0].parts[0].text == "Items may have price None; filter them."
    assert replies[0].text.startswith("src/cart.py\n```") and tag not in replies[0].text
    _, copies, _ = convert_file(transcript, SETTINGS)
    assert (copies.turns_trained, copies.history_copies) == (0, 2)


def test_an_earlier_crush_summary_restarts_the_requests_where_no_column_flags_it(tmp_path: Path) -> None:
    # a session summarized twice in a schema without is_summary_message (Go OpenCode's opencode.db, Crush before the
    # column): summary_message_id names only the latest summary; the earlier one is the assistant message Summarize
    # appended after the agent's last reply. Before, it was trained after the whole history, and the replies between
    # the two summaries were trained in the whole history while the agent sent [the first summary as user, ...]
    db = tmp_path / "opencode.db"
    con = sqlite3.connect(db)
    con.executescript((FIXTURES / "crush-sessions.sql").read_text(encoding="utf-8"))
    row = "INSERT INTO messages VALUES ('{}', '8c1e2f30-0001', '{}', '{}', {}, {}, {}, NULL);"
    text = '[{{"type":"text","data":{{"text":"{}"}}}},{{"type":"finish","data":{{"reason":"end_turn","time":0}}}}]'
    con.executescript(
        row.format("m-07a", "assistant", text.format("Switching to select_related."), "'m-1'", 1765000111, 1765000111)
        + row.format(
            "m-13",
            "assistant",
            text.format("Summary 2: the orders query joins customers."),
            "'m-1'",
            1765000300,
            1765000300,
        )
        + row.format("m-14", "user", '[{"type":"text","data":{"text":"Add a test."}}]', "NULL", 1765000310, 1765000310)
        + row.format("m-15", "assistant", text.format("Added tests/test_orders.py."), "'m-1'", 1765000311, 1765000311)
        + "UPDATE sessions SET summary_message_id = 'm-13' WHERE id = '8c1e2f30-0001';"
    )
    con.close()
    _, stats, _ = convert_file(db, SETTINGS)
    # trained: the grep call, the diagnosis, the reply to "Go on", the edit and its report, the test, the sub-agent's
    # answer; the canceled reply and both summaries are context
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (7, {"interrupted": 1, "context_unknown": 2})
    trained = contexts(db)
    edit = next(c for c in trained if c[-1][0] == "assistant" and c[-1][1] and c[-1][1][0][0] == "edit")
    assert [m[0] for m in edit] == ["user", "user", "assistant"]
    assert edit[0][1].startswith("Summary: the orders page ran")
    last = next(c for c in trained if c[-1] == ("assistant", "Added tests/test_orders.py."))
    assert last[:2] == [("user", "Summary 2: the orders query joins customers."), ("user", "Add a test.")]
    assert not any(c[-1][1] and str(c[-1][1]).startswith("Summary") for c in trained)


def test_a_reply_cut_at_the_output_limit_is_context_in_opencode_and_crush(tmp_path: Path) -> None:
    # OpenCode's step-finish reason (the AI SDK's finishReason "length") and Crush's finish "max_tokens": the model
    # did not end the reply, so no end of turn was sampled; the reply stays in later requests. Before, both were
    # trained as finished replies
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    finishes = sorted(
        p for p in (folder / "part" / "msg_0002").glob("*.json") if '"step-finish"' in p.read_text(encoding="utf-8")
    )
    part = json.loads(finishes[-1].read_text(encoding="utf-8"))
    part["reason"] = "length"
    finishes[-1].write_text(json.dumps(part), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (7, {"interrupted": 2})
    cut = "The fixture lives in tests/data/, but the test loads fixtures/cart.json."
    trained = contexts(folder)
    assert cut not in [c[-1][1] for c in trained]
    assert any(("assistant", cut) in c for c in trained)  # later requests hold it
    db = tmp_path / "crush.db"
    con = sqlite3.connect(db)
    con.executescript((FIXTURES / "crush-sessions.sql").read_text(encoding="utf-8"))
    con.execute("UPDATE messages SET parts = replace(parts, '\"end_turn\"', '\"max_tokens\"') WHERE id = 'm-04'")
    con.commit()
    con.close()
    _, stats, _ = convert_file(db, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (4, {"interrupted": 2, "context_unknown": 1})


def test_a_cline_reply_cline_stopped_reading_is_context_not_a_finished_reply(tmp_path: Path) -> None:
    # Task.abortStream keeps the partial text with Cline's notice after it ("\n\n[Response interrupted by user]"),
    # and the task resumes with a user message; before, the partial reply and the notice were trained with an end of
    # turn the model never sampled
    folder = tmp_path / "1765000000000"
    shutil.copytree(ROOT / "sample_logs" / "cline_task" / "1765000000000", folder)
    file = folder / "api_conversation_history.json"
    history = json.loads(file.read_text(encoding="utf-8"))
    partial = "I'll read the scr\n\n[Response interrupted by user]"
    history[1]["content"] = [{"type": "text", "text": partial}]
    history[2]["content"] = [{"type": "text", "text": "[TASK RESUMPTION] This task was interrupted just now."}]
    file.write_text(json.dumps(history), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (2, {"interrupted": 1})
    trained = contexts(folder)
    assert all(c[-1][1] != partial for c in trained)
    assert trained[0][1] == ("assistant", partial)  # later requests hold it as Cline stored it


def test_a_reply_whose_stream_never_ended_is_context_in_opencode_and_crush(tmp_path: Path) -> None:
    # OpenCode writes a step-finish part, Crush / Go OpenCode a finish part, whenever a call's stream ends (or is
    # canceled or fails); a reply without one was cut while it streamed (the agent stopped). Before, it was trained
    # as a finished reply
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    finishes = sorted(
        p for p in (folder / "part" / "msg_0002").glob("*.json") if '"step-finish"' in p.read_text(encoding="utf-8")
    )
    finishes[-1].unlink()
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (7, {"interrupted": 2})
    cut = "The fixture lives in tests/data/, but the test loads fixtures/cart.json."
    trained = contexts(folder)
    assert cut not in [c[-1][1] for c in trained] and any(("assistant", cut) in c for c in trained)
    db = tmp_path / "crush.db"
    con = sqlite3.connect(db)
    con.executescript((FIXTURES / "crush-sessions.sql").read_text(encoding="utf-8"))
    parts = json.loads(con.execute("SELECT parts FROM messages WHERE id = 'm-04'").fetchone()[0])
    kept = json.dumps([p for p in parts if p["type"] != "finish"])
    con.execute("UPDATE messages SET parts = ? WHERE id = 'm-04'", (kept,))
    con.commit()
    con.close()
    _, stats, _ = convert_file(db, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (4, {"interrupted": 2, "context_unknown": 1})


def test_clines_stand_in_for_a_call_that_returned_nothing_is_not_trained(tmp_path: Path) -> None:
    # a call that returned no text and no tool use: Cline stores "Failure: I did not provide a response." as the
    # assistant message and asks again ("You did not use a tool"); before, that text was trained as the model's reply
    folder = tmp_path / "1765000000000"
    shutil.copytree(ROOT / "sample_logs" / "cline_task" / "1765000000000", folder)
    file = folder / "api_conversation_history.json"
    history = json.loads(file.read_text(encoding="utf-8"))
    stand_in = [
        {"role": "assistant", "content": [{"type": "text", "text": "Failure: I did not provide a response."}]},
        {"role": "user", "content": [{"type": "text", "text": "[ERROR] You did not use a tool."}]},
    ]
    file.write_text(json.dumps(history[:1] + stand_in + history[1:]), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (3, {"context_unknown": 1})
    trained = contexts(folder)
    assert all(c[-1][1] != "Failure: I did not provide a response." for c in trained)
    assert trained[0][1] == ("assistant", "Failure: I did not provide a response.")


def test_an_opencode_turn_aborted_after_its_last_call_ended_trains_that_call(tmp_path: Path) -> None:
    # the user aborted the turn after its call's stream had ended (a step-finish written): the reply was sampled
    # whole; only a call cut while it streamed (no step-finish) is interrupted
    folder = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode-storage", folder)
    finish = {
        "id": "prt_0099z",
        "sessionID": "ses_5a1b2c3d4e0001",
        "messageID": "msg_0012",
        "type": "step-finish",
        "reason": "stop",
        "cost": 0,
        "tokens": {"input": 9000, "output": 5, "reasoning": 0, "cache": {"read": 0, "write": 0}},
    }
    (folder / "part" / "msg_0012" / "prt_0099z.json").write_text(json.dumps(finish), encoding="utf-8")
    _, stats, _ = convert_file(folder, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped)) == (9, {})


def test_a_cline_history_file_named_on_its_own_is_read_by_its_task_folders_rules(tmp_path: Path) -> None:
    # The history file alone (a user passes it, or shares it under another name): before, the Anthropic reader read
    # it and trained Cline's interruption notice with the partial text as a finished reply
    history = json.loads((ROOT / "sample_logs" / "cline_task" / "1765000000000" / HISTORY).read_text(encoding="utf-8"))
    partial = "I'll read the scr\n\n[Response interrupted by user]"
    history[1]["content"] = [{"type": "text", "text": partial}]
    history[2]["content"] = [{"type": "text", "text": "[TASK RESUMPTION] This task was interrupted just now."}]
    alone = tmp_path / "task-history.json"
    alone.write_text(json.dumps(history, indent=1), encoding="utf-8")
    assert detect_format(alone).name == "cline_task"
    _, stats, rejects = convert_file(alone, SETTINGS)
    assert not rejects and (stats.turns_trained, dict(stats.turns_dropped)) == (2, {"interrupted": 1})
    assert all(c[-1][1] != partial for c in contexts(alone))
    (graph,) = graphs(alone)
    assert set(graph.metadata["context_incomplete"]["missing"]) == {"system_prompt", "tools"}


def test_a_cline_history_file_named_inside_its_task_folder_uses_the_folders_ui_messages(tmp_path: Path) -> None:
    # named inside its task folder, the file is read with the UI messages beside it (the truncation they record),
    # and the same turns as the folder are trained; the files beside it are not records of this input
    folder = tmp_path / "1765000000000"
    shutil.copytree(FIXTURES / "cline-task" / "1765000000000", folder)
    _, whole, _ = convert_file(folder, SETTINGS)
    _, alone, rejects = convert_file(folder / HISTORY, SETTINGS)
    assert not rejects and (alone.turns_trained, dict(alone.turns_dropped)) == (4, {"context_unknown": 2})
    assert (alone.turns_trained, alone.turns_dropped) == (whole.turns_trained, whole.turns_dropped)
    assert contexts(folder / HISTORY) == contexts(folder)
    assert not alone.records_skipped


def test_a_list_of_call_records_holding_clines_blocks_is_not_a_cline_history(tmp_path: Path) -> None:
    # per-call records a proxy logged for Cline hold its <environment_details> too, but they are not its history
    calls = [
        {
            "request": {
                "model": "m-1",
                "messages": [
                    {
                        "role": "user",
                        "content": f"<task>\nStep {i}\n</task>\n<environment_details>\n</environment_details>",
                    }
                ],
            },
            "response": {"choices": [{"message": {"role": "assistant", "content": f"Done {i}."}}]},
        }
        for i in range(3)
    ]
    path = tmp_path / "calls.json"
    path.write_text(json.dumps(calls), encoding="utf-8")
    assert detect_format(path).name != "cline_task"


def test_a_cline_history_file_named_on_its_own_is_converted_again_when_its_ui_messages_change(tmp_path: Path) -> None:
    # the UI messages beside the history are its partners: the part of a run is keyed by them, so a truncation
    # recorded after a first run is read by --resume (before, the part built without it was reused, and the replies
    # after Cline's truncation stayed trained in the whole history)
    from msgtrain.cli import main

    folder = tmp_path / "1765000000000"
    shutil.copytree(ROOT / "sample_logs" / "cline_task" / "1765000000000", folder)
    out = tmp_path / "out"
    args = ["convert", str(folder / HISTORY), "-o", str(out), "-q"]
    assert main(args) == 0
    first = json.loads((out / "report.json").read_text(encoding="utf-8"))["turns"]
    ui = json.loads((folder / "ui_messages.json").read_text(encoding="utf-8"))
    requests = [i for i, m in enumerate(ui) if m.get("say") == "api_req_started"]
    for message in ui[requests[-1] + 1 :]:  # the last request's setup removed a range: its reply is after a cut
        message["conversationHistoryDeletedRange"] = [1, 2]
    (folder / "ui_messages.json").write_text(json.dumps(ui), encoding="utf-8")
    assert main([*args, "--resume"]) == 0
    again = json.loads((out / "report.json").read_text(encoding="utf-8"))["turns"]
    assert first["dropped_by_reason"] == {} and again["dropped_by_reason"] == {"context_unknown": 1}
    assert again["trained"] == first["trained"] - 1
