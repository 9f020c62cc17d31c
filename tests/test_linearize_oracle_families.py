"""Token-exactness on more real chat-template families (tests/template_families.py: llama.cpp's copies of the
models' own templates over Qwen3's vocabulary with their control tokens added), replayed through the oracle of
tests/test_linearize_oracle.py in engine mode (every call logged with its ids) and rendered mode (msgtrain renders
the template).

Loading a vocabulary costs seconds, so the suite runs one seed per mode of the families whose templates exercise a
mechanism no other family in the suite does; ``python -m tests.oracle_sweep --families <name>`` sweeps any family
over many seeds (docs/template-families.md has the table).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.template_families import FAMILIES
from tests.test_linearize_oracle import check_rows, run_per_call

MODES = {"engine": 1.0, "rendered": 0.0}
SUITE = [
    "kimi-k3",  # <|close|> closes a section of the message; the turn ends at <|end_of_msg|>
    "cohere2moe",  # <|END_TEXT|> before the declared end of turn; the prompt ends inside the model's turn
    "minimax-m2",  # a <think> prefill that history renders only before a message's reasoning
    "deepseek-v3.2",  # a "<think></think>" prefill whose closing part history renders as the message's start
    "solar-open",  # tool-call turns stop on <|calls|>, text turns on <|end|>
    "gigachat3",  # tool calls rendered as a role of their own inside the assistant's turn
    "reka-edge",  # tool-call arguments printed with tojson(ensure_ascii=True): escaped content marks
]
# The seed a family's case replays (7 unless its mechanism shows up in another: Reka's escaping needs control text
# in a tool call's arguments, which seed 0 has).
SEEDS = {"reka-edge": 0}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", SUITE)
def test_more_real_template_families_train_every_sampled_turn_once_after_exactly_its_prompt(
    family: str, mode: str, tmp_path: Path
) -> None:
    assert family in FAMILIES
    rows, expected = run_per_call(family, SEEDS.get(family, 7), tmp_path, MODES[mode])
    assert len(expected) >= 3
    check_rows(rows, expected, engine_logprobs=True)
