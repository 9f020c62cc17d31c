"""`msgtrain audit-template` on real templates (../shared) and on small hand-written ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.cli import main
from msgtrain.errors import ConfigError
from msgtrain.tools.audit import parse_template_kwargs
from msgtrain.tools.audit_cmd import audit_template
from tests.conftest import (
    ADDED_TOKENS,
    REAL,
    SHAPED,
    TEMPLATES,
    load_named_tokenizer,
    shaped_tokenizer_folder,
    shared_path,
)
from tests.gguf_vocab import GGUF_FAMILIES, record_added_tokens, require_family_folder
from tests.template_families import FAMILIES
from tests.test_linearize_oracle_families import SUITE as FAMILIES_SUITE


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["audit-template", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def probe(report: dict[str, Any], feature: str) -> dict[str, Any]:
    return next(p for p in report["probes"] if p["feature"] == feature)


@pytest.fixture(scope="module")
def qwen3() -> Path:
    return shared_path("tokenizers", "qwen3")


@pytest.fixture(scope="module")
def phi3() -> Path:
    return shared_path("tokenizers", "phi-3-mini-instruct")


def test_qwen3_is_not_prefix_stable_because_earlier_reasoning_is_removed(
    capsys: pytest.CaptureFixture[str], qwen3: Path
) -> None:
    code, report = run_json(capsys, "--tokenizer", str(qwen3))
    assert code == 3 and not report["ok"] and not report["prefix_stable"]
    reasoning = probe(report, "reasoning")
    assert reasoning["status"] == "breaks"
    assert "reasoning" in reasoning["divergence"]["cause"]
    # The turn as sampled opened with its thinking; the later render goes straight to the answer.
    assert reasoning["divergence"]["expected"][0] == "<think>"
    assert "<think>" not in reasoning["divergence"]["found"]
    # Plain multi-turn breaks too: the empty think block of the latest turn disappears from earlier ones.
    assert probe(report, "multi_turn")["status"] == "breaks"
    assert "empty <think></think>" in probe(report, "multi_turn")["detail"]
    # Within one user query Qwen3 keeps reasoning, so reasoning + tool calls there is append-only.
    assert probe(report, "reasoning_tools")["status"] == "stable"
    assert report["end_of_turn"]["ok"] and report["end_of_turn"]["tokens"] == ["<|im_end|>"]
    assert any(f.startswith("prefix_stable") for f in report["failures"])


def test_gpt_oss_is_not_prefix_stable_because_of_the_date_and_the_dropped_analysis_channel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = run_json(capsys, "--tokenizer", str(shared_path("tokenizers", "gpt-oss")))
    assert code == 3 and not report["prefix_stable"]
    date = probe(report, "date")
    assert date["status"] == "breaks" and "date" in date["detail"]
    # The frozen clocks (2025-03-14 sampled, 2025-04-15 re-rendered) make the difference visible and stable.
    assert "".join(date["divergence"]["expected"]).startswith("03-14")
    assert "".join(date["divergence"]["found"]).startswith("04-15")
    reasoning = probe(report, "reasoning")
    assert reasoning["status"] == "breaks" and "analysis channel" in reasoning["detail"]
    assert "17 has no divisor between 2 and 4. (t1)" in reasoning["dropped"]
    # The render ends turns with <|end|> while generation stops on <|return|>: reported, not a failure.
    assert report["end_of_turn"]["ok"] and "<|return|>" in report["end_of_turn"]["detail"]


def test_qwen25_template_is_prefix_stable_for_tools_and_multi_turn(
    capsys: pytest.CaptureFixture[str], qwen3: Path
) -> None:
    template = shared_path("tokenizers", "qwen2.5-instruct", "tokenizer_config.json")
    features = ["multi_turn", "system_prompt", "multi_user", "tool_calls", "parallel_tool_calls"]
    args = ["--tokenizer", str(qwen3), "--chat-template", str(template)]
    code, report = run_json(capsys, *args, *(a for f in features for a in ("--feature", f)))
    assert code == 0 and report["ok"] and report["prefix_stable"]
    assert [p["feature"] for p in report["probes"]] == features
    assert all(p["status"] == "stable" for p in report["probes"])
    # Every sampled turn of every probe ends with a trained <|im_end|>.
    assert all(t == "<|im_end|>" for p in report["probes"] for t in p["end_of_turn"])


def test_features_a_template_cannot_render_are_reported_not_raised(
    capsys: pytest.CaptureFixture[str], qwen3: Path, tmp_path: Path
) -> None:
    template = tmp_path / "no_tools.jinja"
    template.write_text(
        "{% for message in messages %}{% if message.role == 'tool' %}{{ raise_exception('no tool role') }}"
        "{% endif %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        encoding="utf-8",
    )
    code, report = run_json(capsys, "--tokenizer", str(qwen3), "--chat-template", str(template))
    tools = probe(report, "tool_calls")
    assert tools["status"] == "unsupported" and "no tool role" in tools["detail"]
    # It knows nothing of reasoning: it is dropped, which is not a prefix failure for a non-reasoning model.
    assert probe(report, "reasoning")["status"] == "dropped"
    assert code == 0 and report["ok"]


def test_a_string_template_renders_list_content_as_its_text_parts_joined_as_vllm_does(
    capsys: pytest.CaptureFixture[str], qwen3: Path
) -> None:
    # Qwen2.5's template concatenates ``message.content``: vLLM detects the "string" content format and hands it
    # the text parts joined with a newline, so the image probe renders (the image left out) instead of failing.
    template = shared_path("tokenizers", "qwen2.5-instruct", "tokenizer_config.json")
    code, report = run_json(capsys, "--tokenizer", str(qwen3), "--chat-template", str(template), "-f", "images")
    assert code == 0 and report["content_format"] == "string"
    assert probe(report, "images")["status"] == "stable"
    # Qwen3's own template loops over no content either; a template that does is "openai".
    code, report = run_json(capsys, "--tokenizer", str(qwen3), "-f", "multi_turn")
    assert report["content_format"] == "string"


def test_terminal_report_names_the_breaking_features_and_the_differing_tokens(
    capsys: pytest.CaptureFixture[str], qwen3: Path
) -> None:
    assert main(["audit-template", "--tokenizer", str(qwen3), "-f", "reasoning", "-f", "date"]) == 3
    out = capsys.readouterr().out
    assert "prefix-stable (append-only): NO" in out
    assert "breaks on reasoning" in out
    assert "expected '<think>'" in out
    assert "result: FAIL (prefix_stable)" in out


def test_content_spelling_control_tokens_is_encoded_as_text_by_msgtrain(qwen3: Path) -> None:
    report = audit_template(qwen3, features=["multi_turn"])
    special = report.special_tokens
    assert special.naive_control_tokens > 0, "a plain encode must turn the injected text into control tokens"
    assert special.split_safe
    assert "<|im_start|>" in special.injected_text


# Every tokenizer folder the tests have: ../shared's (template-only folders paired with qwen3's vocabulary), the
# shaped families and the real templates of tests/conftest.py, the real vocabularies of tests/gguf_vocab.py, and the
# families of tests/template_families.py the oracle suite replays.
# Ordered so that load_bundle's few kept tokenizers serve the folders the tests around this one audit too (a large
# vocabulary takes about a second to load through transformers): the ../shared folders the tests above audited first,
# the shaped families the tests right below audit again last. The order changes no test's outcome, only its cost.
AUDITED_AGAIN = [n for n in ("rerender-tooluse", "calls-only", "role-headers", "drops-calls") if n in SHAPED]
AUDITED = [
    "qwen3",
    "qwen2.5",
    "gpt-oss",
    "phi3",
    "smollm3",
    "deepseek-r1-distill",
    *(n for n in [*SHAPED, *REAL, *GGUF_FAMILIES, *FAMILIES_SUITE] if n not in AUDITED_AGAIN),
    *AUDITED_AGAIN,
]


@pytest.mark.parametrize("name", AUDITED)
def test_audit_template_reports_on_every_tokenizer_folder_the_tests_have(name: str, tmp_path: Path) -> None:
    template = None
    if name in SHAPED or name in REAL or name in FAMILIES:
        folder = shaped_tokenizer_folder(name)
    elif name in GGUF_FAMILIES:
        folder = require_family_folder(name)
    elif name in ADDED_TOKENS:  # its vocabulary is built in memory: audited as the folder it saves
        folder = tmp_path / name
        load_named_tokenizer(name).hf.save_pretrained(str(folder))
        record_added_tokens(folder)
    else:
        shared_folder, shared_template = TEMPLATES[name]
        folder = shared_path(shared_folder)
        template = shared_path(shared_template) if shared_template else None
    report = audit_template(folder, template)
    assert report.probes and all(p.status in {"stable", "breaks", "dropped", "unsupported"} for p in report.probes)
    # Every one of these templates ends its turns with a token the linearizer trains.
    assert report.end_of_turn.ok and report.end_of_turn.tokens, report.end_of_turn.detail


def test_a_template_that_ends_tool_call_turns_with_no_token_trains_eos_there() -> None:
    report = audit_template(shaped_tokenizer_folder("rerender-tooluse"))
    assert report.end_of_turn.ok, report.end_of_turn.detail
    assert report.end_of_turn.tokens == ["<|END_OF_TURN_TOKEN|>"]
    assert "tool_calls turn 1" in report.end_of_turn.eos_appended
    assert "multi_turn turn 1" not in report.end_of_turn.eos_appended


def test_a_template_that_needs_tools_is_audited_and_its_special_token_check_renders_with_tools() -> None:
    report = audit_template(shaped_tokenizer_folder("calls-only"))
    assert report.special_tokens.naive_control_tokens > 0 and report.special_tokens.split_safe
    assert probe_of(report, "tool_calls").status in {"breaks", "dropped"}


def test_role_headers_that_stop_generation_count_as_the_trained_end_of_turn() -> None:
    report = audit_template(shaped_tokenizer_folder("role-headers"))
    assert report.end_of_turn.ok, report.end_of_turn.detail
    assert {"<|user|>", "<|observation|>"} <= set(report.end_of_turn.tokens)


def test_a_template_that_drops_tool_calls_is_reported_as_dropping_them() -> None:
    report = audit_template(shaped_tokenizer_folder("drops-calls"))
    assert probe_of(report, "tool_calls").status == "dropped"
    assert any(d.startswith("tool_calls:") for d in report.drops)


def test_phi3_trains_its_end_token_and_warns_that_eos_is_a_different_token(
    capsys: pytest.CaptureFixture[str], phi3: Path
) -> None:
    code, report = run_json(capsys, "--tokenizer", str(phi3), "-f", "multi_turn", "-f", "tool_calls")
    assert code == 0
    assert report["end_of_turn"]["tokens"] == ["<|end|>"]
    assert report["end_of_turn"]["stop_tokens"] == ["<|endoftext|>"]
    assert "also stops on <|end|>" in report["end_of_turn"]["detail"]
    # Phi-3's template has no tool role: the tool results vanish from the render.
    assert probe(report, "tool_calls")["status"] == "dropped"
    assert "Sunny, 21 C (r1)" in probe(report, "tool_calls")["dropped"]


def test_a_template_without_an_end_of_turn_token_fails_the_audit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, phi3: Path
) -> None:
    template = tmp_path / "plain.jinja"
    template.write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    code, report = run_json(capsys, "--tokenizer", str(phi3), "--chat-template", str(template), "-f", "multi_turn")
    assert code == 3
    assert not report["end_of_turn"]["ok"]
    assert report["end_of_turn"]["missing"] == ["multi_turn turn 1", "multi_turn turn 2", "multi_turn turn 3"]
    assert any(f.startswith("end_of_turn") for f in report["failures"])


def test_generation_blocks_are_detected_and_their_mask_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, phi3: Path
) -> None:
    template = tmp_path / "masked.jinja"
    template.write_text(
        "{% for m in messages %}{% if m.role == 'assistant' %}<|assistant|>\n"
        "{% generation %}{{ m.content }}<|end|>{% endgeneration %}\n"
        "{% else %}<|user|>\n{{ m.content }}<|end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    code, report = run_json(capsys, "--tokenizer", str(phi3), "--chat-template", str(template), "-f", "multi_turn")
    masks = report["generation_masks"]
    assert masks["supported"] and masks["masked_tokens"] > 0 and masks["includes_end_of_turn"] is True
    assert code == 0 and report["prefix_stable"]

    code, report = run_json(capsys, "--tokenizer", str(phi3), "-f", "multi_turn")
    assert report["generation_masks"]["supported"] is False
    assert "no {% generation %} blocks" in report["generation_masks"]["detail"]


def test_a_template_only_folder_is_refused_with_the_command_that_works(capsys: pytest.CaptureFixture[str]) -> None:
    folder = shared_path("tokenizers", "qwen2.5-instruct")
    with pytest.raises(ConfigError, match="no tokenizer vocabulary") as err:
        audit_template(folder)
    assert "--chat-template" in (err.value.hint or "")
    assert main(["audit-template", "--tokenizer", str(folder)]) == 2  # a bad --tokenizer: usage
    assert "no tokenizer vocabulary" in capsys.readouterr().err


def test_a_missing_tokenizer_is_not_looked_up_on_the_network(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tokenizer folder not found"):
        audit_template(str(tmp_path / "no-such-tokenizer"))


def test_unknown_features_are_a_config_error_listing_the_known_ones(phi3: Path) -> None:
    with pytest.raises(ConfigError, match="unknown feature") as err:
        audit_template(phi3, features=["telepathy"])
    assert "reasoning_tools" in (err.value.hint or "")


def test_template_kwargs_parse_json_values_and_keep_other_text() -> None:
    assert parse_template_kwargs(["enable_thinking=false", "reasoning_effort=high", "n=3"]) == {
        "enable_thinking": False,
        "reasoning_effort": "high",
        "n": 3,
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_template_kwargs(["enable_thinking"])


def test_template_kwargs_reach_the_template(capsys: pytest.CaptureFixture[str], tmp_path: Path, phi3: Path) -> None:
    template = tmp_path / "kw.jinja"
    template.write_text(
        "{% if stamp is not defined %}{{ raise_exception('this template needs stamp') }}{% endif %}"
        "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    with pytest.raises(ConfigError, match="this template needs stamp"):
        audit_template(phi3, template, features=["multi_turn"])
    args = ["--tokenizer", str(phi3), "--chat-template", str(template), "-f", "multi_turn"]
    code, report = run_json(capsys, *args, "--template-kwarg", 'stamp="v2"')
    assert code == 0 and report["template_kwargs"] == {"stamp": "v2"}
    assert probe(report, "multi_turn")["status"] == "stable"


def probe_of(report: Any, feature: str) -> Any:
    return next(p for p in report.probes if p.feature == feature)
