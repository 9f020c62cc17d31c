"""Replies whose context the log does not show as it was sent: counted, never trained in the wrong context.

The fixtures are hand-made in the shapes of tests/fixtures/unseen/PROVENANCE.md; every count is by hand."""

from __future__ import annotations

from msgtrain.model.completeness import SHRUNK_PROMPT, carry_replies_after_shrunk_prompt
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
