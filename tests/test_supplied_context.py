"""Supplied context: the system prompt and tool schemas a log does not hold, from the user's files, per source.

The oracle renders each trained turn's context with ``apply_chat_template`` from the files' own content (the
prompt text, the tools written by hand in the OpenAI shape the Anthropic file stands for), never through msgtrain's
renderer.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from msgtrain.cli import main
from msgtrain.errors import ConfigError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.supplied import glob_matches, glob_pattern, load_rules, with_supplied_context
from msgtrain.linearize import linearize_graph
from msgtrain.linearize.content_format import detect_content_format, joined_text
from msgtrain.model.completeness import missing_context
from msgtrain.model.graph import MessageGraph
from msgtrain.model.openai import to_openai_message
from msgtrain.model.supply import supply_context
from tests.conftest import load_named_tokenizer

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
CLAUDE = SAMPLES / "claude_code" / "session.jsonl"
PROMPT = "You are Claude Code, Anthropic's official CLI for Claude.\n\nBe concise."
# Anthropic's tool shape (as Claude Code sends it), and the OpenAI function tools a template is given for it.
ANTHROPIC_TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
    },
]
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
    }
    for t in ANTHROPIC_TOOLS
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROMPT + "\n", encoding="utf-8")  # the final newline an editor adds is not the prompt's
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(ANTHROPIC_TOOLS, indent=2), encoding="utf-8")
    return prompt, tools


def read_graphs(path: Path, rules: list[Any] | None = None, source: str | None = None) -> list[ReadGraph]:
    reader = detect_format(path)
    events = read_events(reader, path)
    if rules is not None:
        events = with_supplied_context(events, rules, reader.name, source or str(path))
    return [ev for ev in events if isinstance(ev, ReadGraph)]


def root_texts(graph: MessageGraph) -> list[str]:
    return [graph.nodes[r].message.text for r in graph.children[None]]


def branch_paths(graph: MessageGraph) -> set[tuple[str, ...]]:
    return {tuple(n.message.canonical_json() for n in b.nodes) for b in graph.branches()}


@pytest.mark.parametrize("template", ["qwen2.5", "demo"])
def test_supplied_prompt_and_tools_are_the_context_apply_chat_template_renders(
    files: tuple[Path, Path], template: str
) -> None:
    tok = load_named_tokenizer(template)
    rules = load_rules([], *files)
    (plain,) = read_graphs(CLAUDE)
    (ev,) = read_graphs(CLAUDE, rules)
    graph = ev.graph
    # The log's own structure is kept whole, under the supplied system message.
    system = graph.nodes[graph.children[None][0]].message
    assert graph.children[None] == [graph.children[None][0]] and system.role == "system" and system.text == PROMPT
    assert {p[1:] for p in branch_paths(graph)} == branch_paths(plain.graph)
    assert len(graph.edges) == len(plain.graph.edges) and len(graph.nodes) == len(plain.graph.nodes) + 1
    result = linearize_graph(graph, tok, extras=ev.extras)
    unsupplied = linearize_graph(plain.graph, tok)
    assert result.samples and result.drops == unsupplied.drops
    assert sum(len(s.turn_ids) for s in result.samples) == sum(len(s.turn_ids) for s in unsupplied.samples)
    for sample in result.samples:
        start = sample.turn_spans[0][0]
        context = graph.path(sample.turn_ids[0])[1:-1]
        messages = [
            {"role": "system", "content": PROMPT},
            *(to_openai_message(n.message, for_template=True) for n in context),
        ]
        if detect_content_format(tok.hf.chat_template) == "string":  # list content joined, as a serving engine does
            messages = [
                {**m, "content": joined_text(m["content"])} if isinstance(m.get("content"), list) else m
                for m in messages
            ]
        expected = tok.hf.apply_chat_template(messages, tools=OPENAI_TOOLS, add_generation_prompt=True, tokenize=False)
        assert tok.hf.decode(sample.input_ids[:start].tolist()) == expected
        assert {"system_prompt_supplied", "tools_supplied"} <= set(sample.flags)
        assert "context_incomplete" not in sample.flags
        assert sample.metadata["context_supplied"] == {"system_prompt": str(files[0]), "tools": str(files[1])}


def test_what_the_log_holds_is_kept_and_only_the_missing_part_is_supplied(files: tuple[Path, Path]) -> None:
    g = MessageGraph(tools=OPENAI_TOOLS[:1])
    g.append({"role": "system", "content": "The log's own prompt."})
    g.append({"role": "user", "content": "hi"})
    g.append({"role": "assistant", "content": "hello"})
    prompt_and_tools = {"system_prompt": PROMPT, "tools": OPENAI_TOOLS}
    assert supply_context(g, **prompt_and_tools) is g  # both held: nothing supplied, not even a rebuild

    no_tools = MessageGraph([{"role": "system", "content": "Own."}, {"role": "user", "content": "hi"}])
    no_tools.metadata["context_incomplete"] = {"missing": ["tools"], "why": "not logged"}
    out = supply_context(no_tools, **prompt_and_tools)
    assert [m.text for m in out.messages()] == ["Own.", "hi"] and list(out.env.tools) == OPENAI_TOOLS
    assert out.metadata["context_supplied"] == {"tools": "supplied"} and missing_context(out) == []

    no_prompt = MessageGraph([{"role": "user", "content": "hi"}], tools=OPENAI_TOOLS[:1])
    no_prompt.metadata["context_incomplete"] = {"missing": ["system_prompt", "tools"], "why": "not logged"}
    out = supply_context(no_prompt, **prompt_and_tools)
    assert [m.text for m in out.messages()] == [PROMPT, "hi"] and list(out.env.tools) == OPENAI_TOOLS[:1]
    # Tools were not supplied (the log had some): the mark keeps saying what still lacks.
    assert missing_context(out) == ["tools"]


def test_supplying_only_a_prompt_leaves_a_session_context_incomplete_for_its_tools(files: tuple[Path, Path]) -> None:
    (ev,) = read_graphs(CLAUDE, load_rules([], files[0], None))
    assert missing_context(ev.graph) == ["tools"]
    result = linearize_graph(ev.graph, load_named_tokenizer("demo"))
    assert all({"context_incomplete", "system_prompt_supplied"} <= set(s.flags) for s in result.samples)
    assert not any("tools_supplied" in s.flags for s in result.samples)


def test_edits_and_compactions_keep_their_versions_and_cuts_under_a_supplied_prompt(files: tuple[Path, Path]) -> None:
    path = SAMPLES / "native" / "edit_and_compaction.graph.jsonl"
    tok = load_named_tokenizer("demo")
    (plain,) = read_graphs(path)
    roots = [plain.graph.nodes[r].message.role for r in plain.graph.children[None]]
    assert "system" in roots  # the edit of the system prompt is the log's own: kept, nothing goes above it
    g = MessageGraph([{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Sunny."}])
    g.append({"role": "user", "content": "And Rome?"})
    g.append({"role": "assistant", "content": "Rainy."})
    g[0] = {"role": "user", "content": "Weather in Madrid?"}  # an edit at the root, after sampled turns
    g.append({"role": "assistant", "content": "Hot."})
    out = supply_context(g, system_prompt=PROMPT)
    (edge,) = out.edges
    system_id = out.children[None][0]
    assert out.children[None] == [system_id] and edge.anchor == system_id  # both versions hang from the prompt
    before, after = linearize_graph(g, tok), linearize_graph(out, tok)
    assert sorted(s.cut_reason for s in after.samples) == sorted(s.cut_reason for s in before.samples)
    assert sum(len(s.turn_ids) for s in after.samples) == sum(len(s.turn_ids) for s in before.samples) == 3


def test_entries_apply_by_format_and_glob_in_order_first_match_wins(tmp_path: Path, files: tuple[Path, Path]) -> None:
    other = tmp_path / "other.txt"
    other.write_text("Other prompt.", encoding="utf-8")
    entries = [
        {"glob": "team-a/*.jsonl", "system_prompt": str(other)},
        {"format": "claude_code", "system_prompt": str(files[0]), "tools": str(files[1])},
        {"format": "openai_chat", "tools": str(files[1])},
    ]
    rules = load_rules(entries)
    team_a = tmp_path / "logs" / "team-a" / "session.jsonl"
    team_a.parent.mkdir(parents=True)
    shutil.copy(CLAUDE, team_a)
    (a,) = read_graphs(team_a, rules)
    (b,) = read_graphs(CLAUDE, rules)
    assert root_texts(a.graph) == ["Other prompt."] and list(a.graph.env.tools) == OPENAI_TOOLS
    assert root_texts(b.graph) == [PROMPT]
    # openai_chat conversations: the third entry gives tools only to those that record none; no prompt is supplied.
    for ev in read_graphs(SAMPLES / "openai_chat" / "conversations.jsonl", rules):
        assert "system_prompt" not in ev.graph.metadata.get("context_supplied", {})


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("*.jsonl", "logs/a/b.jsonl", True),
        ("a/*.jsonl", "logs/a/b.jsonl", True),
        ("a/*.jsonl", "logs/xa/b.jsonl", False),
        ("logs/*.jsonl", "logs/a/b.jsonl", False),
        ("logs/**/*.jsonl", "logs/a/b/c.jsonl", True),
        ("logs/**/*.jsonl", "./logs/c.jsonl", True),
        ("**/.claude/projects/**", "/home/u/.claude/projects/p/s.jsonl", True),
        ("/data/*.json", "/data/x.json", True),
        ("/data/*.json", "/other/data/x.json", False),
        ("run-[0-9].json", "out/run-7.json", True),
        ("run-[!0-9].json", "out/run-7.json", False),
        ("s3://bucket/claude/*", "s3://bucket/claude/s.jsonl", True),
    ],
)
def test_globs_match_the_end_of_the_input_path_at_a_folder_boundary(glob: str, path: str, matches: bool) -> None:
    assert glob_matches(glob_pattern(glob), path) is matches


def test_a_changed_prompt_file_reconverts_on_resume_and_an_unchanged_one_is_reused(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    out = tmp_path / "out"
    args = ["convert", str(CLAUDE), "-o", str(out), "-q", "--resume", "--system-prompt", str(files[0])]
    code = main(args)  # 3 where the demo template cannot render a turn (the session's image): dropped, listed
    assert code in (0, 3) and main(args) == code
    assert json.loads((out / "report.json").read_text())["flags"]["system_prompt_supplied"] > 0
    files[0].write_text("You are another assistant.\n", encoding="utf-8")
    assert main(args) == code
    import pyarrow.parquet as pq

    from msgtrain.linearize import load_tokenizer

    table = pq.read_table(next((out / "data").glob("*.parquet")))
    text = load_tokenizer(None).hf.decode(table.column("input_ids")[0].as_py())
    assert "You are another assistant." in text and "Be concise." not in text


def test_resume_reuses_parts_only_while_the_supplied_files_are_unchanged(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.pipeline import convert

    def run() -> dict[str, Any]:
        cfg = ConvertConfig(inputs=[str(CLAUDE)], output=str(tmp_path / "out"), resume=True, tools=str(files[1]))
        return convert(cfg)

    assert run()["resume"]["converted"] == 1
    assert run()["resume"]["reused"] == 1
    files[1].write_text(json.dumps(ANTHROPIC_TOOLS[:1]), encoding="utf-8")
    again = run()
    assert again["resume"]["converted"] == 1 and again["resume"]["reused"] == 0
    assert again["context_supplied"]["samples"]["tools"] == again["samples"]["written"]


def test_the_report_counts_supplied_samples_and_warns_of_a_glob_matching_no_input(
    tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "convert.yaml"
    config.write_text(
        "context:\n"
        f"  - {{format: claude_code, system_prompt: {files[0]}, tools: {files[1]}}}\n"
        f"  - {{glob: 'nowhere/*.jsonl', system_prompt: {files[0]}}}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    assert main(["convert", str(CLAUDE), "-o", str(out), "--config", str(config)]) in (0, 3)  # 3: a dropped turn
    report = json.loads((out / "report.json").read_text())
    supplied = report["context_supplied"]
    written = report["samples"]["written"]
    assert supplied["samples"] == {"system_prompt": written, "tools": written}
    assert supplied["unmatched_globs"] == ["nowhere/*.jsonl"]
    assert "context_incomplete" not in report["flags"]
    shown = " ".join(capsys.readouterr().err.split())  # the summary goes to stderr when stdout is not a terminal
    assert "glob matching no input: nowhere/*.jsonl" in shown


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "file not found"),
        ('[{"name": "Bash",', "not valid JSON"),
        ('{"name": "Bash"}', "a tools file holds a JSON list"),
        ("[]", "holds no tool schema"),
        ('[{"description": "no name", "parameters": {}}]', "has no name"),
        ('["Bash"]', "tools[0] is not an object"),
    ],
)
def test_a_bad_tools_file_is_a_usage_error_naming_the_file(tmp_path: Path, content: str | None, expected: str) -> None:
    tools = tmp_path / "tools.json"
    if content is not None:
        tools.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(expected)) as info:
        load_rules([], None, tools)
    assert str(tools) in str(info.value)
    code = main(["convert", str(CLAUDE), "-o", str(tmp_path / "out"), "-q", "--tools", str(tools)])
    assert code == 2


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"format": "claude_cod", "system_prompt": "p.txt"}, "did you mean 'claude_code'"),
        ({"glob": "*.jsonl"}, "supplies nothing"),
        ({"globs": "*.jsonl", "tools": "t.json"}, "unknown key 'globs'"),
        ({"glob": 3, "tools": "t.json"}, "glob must be a string or a list"),
    ],
)
def test_a_bad_context_entry_is_a_config_error_naming_the_entry(entry: dict[str, Any], expected: str) -> None:
    from msgtrain.run.config import ConvertConfig

    with pytest.raises(ConfigError, match=expected) as info:
        ConvertConfig(context=[{"tools": "t.json"}, entry])
    assert "context[1]" in str(info.value)


def test_a_session_log_that_holds_its_system_prompt_keeps_it_and_only_the_tools_are_supplied(
    files: tuple[Path, Path],
) -> None:
    codex = SAMPLES / "codex" / "rollout.jsonl"
    (plain,) = read_graphs(codex)
    assert root_texts(plain.graph)[0].startswith("You are Codex")  # the rollout logs its own instructions
    (ev,) = read_graphs(codex, load_rules([], *files))
    assert root_texts(ev.graph) == root_texts(plain.graph)
    assert list(ev.graph.env.tools) == OPENAI_TOOLS and missing_context(ev.graph) == []
    assert ev.extras["context_supplied"] == {"tools": str(files[1])}
    result = linearize_graph(ev.graph, load_named_tokenizer("demo"), extras=ev.extras)
    assert result.samples and all("system_prompt_supplied" not in s.flags for s in result.samples)
    assert all("tools_supplied" in s.flags for s in result.samples)


def test_inspect_shows_the_supplied_prompt_at_the_root_of_the_tree(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(CLAUDE), "--system-prompt", str(files[0]), "--max-turns", "1"]) == 0
    out = capsys.readouterr().out
    assert f"[System] {PROMPT.splitlines()[0]}" in out


def test_a_run_whose_samples_mostly_lack_their_context_suggests_supplying_it() -> None:
    from msgtrain.run.report_hints import next_step

    report: dict[str, Any] = {
        "samples": {"written": 4, "dropped_by_reason": {}},
        "tokens": {"trained": 50, "total": 100},
        "flags": {"context_incomplete": 3},
    }
    hint = next_step(report)
    assert hint is not None and "--system-prompt FILE --tools FILE" in hint and "3 of 4" in hint
    report["flags"] = {"context_incomplete": 1}
    assert next_step(report) is None
