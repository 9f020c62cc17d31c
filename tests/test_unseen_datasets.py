"""Post-training datasets and agent-trajectory datasets on the Hub no other test reads (tests/fixtures/unseen/
PROVENANCE.md, "Datasets" section), hand-written in the shapes their rows have (texts ours): each file's books
against a count made by hand, and the context each trained reply sits after."""

from __future__ import annotations

from pathlib import Path

import pytest

from msgtrain.ingest.common.content_parts import pythonic_calls
from msgtrain.ingest.detect import detect_format
from tests.unseen_books import FIXTURES, books, contexts, graphs


def test_an_axolotl_turn_marked_training_false_is_context_not_a_trained_reply() -> None:
    # axolotl `type: chat_template` rows with `message_field_training: training`: a boolean per message that
    # overrides roles_to_train. Before, the openai_chat reader trained the `"training": false` reply too (2 trained).
    path = FIXTURES / "axolotl-training-flags.jsonl"
    assert detect_format(path).name == "openai_chat"
    assert books(path) == (1, 1, 0)
    assert contexts(path) == [
        [
            ("system", "Answer as a ship's cook."),
            ("user", "What is for dinner?"),
            ("assistant", "Fish stew, as always."),
            ("user", "Again?"),
            ("assistant", "The sea gives what it gives."),
        ]
    ]


def test_a_sharegpt_turn_marked_training_false_is_context_not_a_trained_reply() -> None:
    # the same flag on ShareGPT turns (`field_messages: conversations`, `message_field_role: from`); the last reply,
    # flagged false, is not trained either. Before: all three replies trained.
    path = FIXTURES / "axolotl-sharegpt-training-flags.jsonl"
    assert detect_format(path).name == "sharegpt"
    assert books(path) == (1, 2, 0)
    assert contexts(path) == [
        [
            ("system", "Answer as a lighthouse keeper."),
            ("user", "Any ships tonight?"),
            ("assistant", "Two, both far out."),
            ("user", "Is the lamp lit?"),
            ("assistant", "Since dusk."),
        ]
    ]


def test_an_axolotl_reply_masked_in_part_by_train_detail_is_not_trained_whole() -> None:
    # axolotl's `message_field_training_detail: train_detail`: spans {begin_offset, end_offset, train} of a turn's
    # text; a reply with a span marked false is trained in part by axolotl, which one trained turn cannot be, so it is
    # context (never its masked text trained); a reply whose spans are all true is trained. Before: both trained.
    path = FIXTURES / "axolotl-train-detail.jsonl"
    assert books(path) == (1, 1, 0)
    assert contexts(path) == [
        [("user", "Name two fruits."), ("assistant", "Apple and pear."), ("user", "One more."), ("assistant", "Plum.")]
    ]


def test_an_openhermes_system_prompt_column_heads_the_conversation_it_sits_beside() -> None:
    # teknium/OpenHermes-2.5 rows: `conversations` of {from, value, weight: null} beside a `system_prompt` column
    # (set, empty or null) and a dozen metadata columns. Before, a set system_prompt was lost: the reply was trained
    # after no system message. An empty or null one adds nothing; a system turn of its own stays.
    path = FIXTURES / "openhermes-system-column.jsonl"
    assert detect_format(path).name == "sharegpt"
    assert books(path) == (3, 0, 0)
    assert contexts(path) == [
        [("system", "Answer in one word."), ("user", "Name a planet with rings."), ("assistant", "Saturn.")],
        [
            ("system", "You are a patient teacher."),
            ("user", "Why is the sky blue?"),
            ("assistant", "Air scatters blue light more than red."),
        ],
        [("user", "Two plus two?"), ("assistant", "Four.")],
    ]


def test_a_swe_smith_trajectory_of_json_text_trains_each_action_once_after_its_observations() -> None:
    # SWE-bench/SWE-smith-trajectories rows: `messages` a JSON string of SWE-agent history items (content a list of
    # text parts, `agent`, `message_type`, `thought` / `action` beside `tool_calls`, tool results naming their calls
    # by `tool_call_ids`), beside `instance_id`, `resolved`, `model`, `traj_id`, `patch`; no tool schemas.
    path = FIXTURES / "swe-smith-trajectories.jsonl"
    assert books(path) == (3, 0, 0)
    system = ("system", "You solve issues in a repository with the tools given.")
    issue = ("user", "<issue>mean() of an empty list raises.</issue> Fix it.")
    grep = ("assistant", [("bash", {"command": "grep -n 'def mean' stats.py"})])
    found = ("tool", ("bash", "OBSERVATION:\n3:def mean(xs): return sum(xs) / len(xs)"))
    edit = ("assistant", [("bash", {"command": "sed -i 's/return sum/return 0.0 if not xs else sum/' stats.py"})])
    ran = ("tool", ("bash", "Your command ran successfully and did not produce any output."))
    assert contexts(path) == [
        [system, issue, grep],
        [system, issue, grep, found, edit],
        [system, issue, grep, found, edit, ran, ("assistant", [("submit", {})])],
    ]
    (graph,) = graphs(path)
    replies = [n.message for n in graph.nodes.values() if n.origin.value == "sampled"]
    assert [m.parts[0].text for m in replies] == [
        "First I read the function.",
        "I guard the empty case.",
        "Done; submitting.",
    ]
    assert graph.metadata["context_incomplete"]["missing"] == ["tools"]


def test_slimorca_turn_weights_train_the_weighted_reply_after_its_system_turn() -> None:
    # Open-Orca/SlimOrca rows: `conversations` of {from, value, weight}, the system turn's weight null, the human's 0.0,
    # gpt's 1.0: each row one trained reply, after its own system prompt
    path = FIXTURES / "slimorca-weights.jsonl"
    assert books(path) == (2, 0, 0)
    assert contexts(path) == [
        [
            ("system", "You are an AI assistant. Think step by step and justify your answer."),
            ("user", "Is 91 a prime number?"),
            ("assistant", "No: 91 = 7 x 13."),
        ],
        [
            ("system", "You are a helpful assistant who answers briefly."),
            ("user", "Translate 'cat' to French."),
            ("assistant", "Chat."),
        ],
    ]


def test_an_apigen_mt_conversation_trains_its_calls_and_replies_after_the_policy_and_tools() -> None:
    # Salesforce/APIGen-MT-5k rows: `conversations` of {from: human | gpt | function_call | observation, value}, the
    # calls JSON text, `tools` a JSON string, `system` the domain policy: four replies, two of them calls
    path = FIXTURES / "apigen-mt-conversations.jsonl"
    assert books(path) == (4, 0, 0)
    policy = (
        "system",
        "# Retail agent policy\nYou help users with their orders. Confirm before any action that changes an order.",
    )
    ask = ("user", "Please cancel my order #W100, I ordered it by mistake.")
    look = ("assistant", [("get_order_details", {"order_id": "#W100"})])
    pending = ("tool", ("get_order_details", '{"order_id": "#W100", "status": "pending"}'))
    confirm = ("assistant", "Order #W100 is pending. Shall I cancel it for the reason 'ordered by mistake'?")
    cancel = ("assistant", [("cancel_pending_order", {"order_id": "#W100", "reason": "ordered by mistake"})])
    cancelled = ("tool", ("cancel_pending_order", '{"order_id": "#W100", "status": "cancelled"}'))
    assert contexts(path) == [
        [policy, ask, look],
        [policy, ask, look, pending, confirm],
        [policy, ask, look, pending, confirm, ("user", "Yes."), cancel],
        [
            policy,
            ask,
            look,
            pending,
            confirm,
            ("user", "Yes."),
            cancel,
            cancelled,
            ("assistant", "Done: order #W100 is cancelled."),
        ],
    ]
    (graph,) = graphs(path)
    assert [t["function"]["name"] for t in graph.env.tools] == ["get_order_details", "cancel_pending_order"]


def test_a_magpie_row_trains_its_conversation_once_not_its_first_turn_again_from_the_instruction_columns() -> None:
    # Magpie-Align multi-turn rows: `instruction` / `response` (the first turn) beside `conversations` (all turns),
    # with the generator's configs (`pre_query_template`) and labels: two replies, each trained once
    path = FIXTURES / "magpie-multi-turn.jsonl"
    assert books(path) == (2, 0, 0)
    first = [("user", "How many legs does a spider have?"), ("assistant", "Eight.")]
    assert contexts(path) == [first, [*first, ("user", "And an ant?"), ("assistant", "Six.")]]


def test_a_toolace_row_of_pythonic_calls_trains_each_reply_once_after_its_tool_results() -> None:
    # Team-ACE/ToolACE rows: `system` the instructions with the tools as JSON text, `conversations` of {from: user |
    # assistant | tool, value}, the calls written as a Python list (`[name(key=value), ...]`), the tool turn a JSON
    # list of {name, results}. Before, the tool turn answered no call (a reply of text), so each row trained up to it
    # and kept the replies after it as context (2 of 5, 3 context_unknown); now each reply once, the results context.
    path = FIXTURES / "toolace-pythonic-calls.jsonl"
    assert detect_format(path).name == "sharegpt"
    assert books(path) == (5, 0, 0)
    tides = [
        ("user", "When is high tide in Brest tomorrow, 2025-03-02?"),
        ("assistant", '[tide_times(harbour="Brest", date="2025-03-02")]'),
        ("tool", '[{"name": "tide_times", "results": {"high": ["06:10", "18:32"], "low": ["00:02", "12:20"]}}]'),
        ("assistant", "High tide in Brest on 2025-03-02 is at 06:10 and 18:32."),
    ]
    sun = [
        ("user", "Sunrise in Bergen and Cork?"),
        ("assistant", '[sunrise(place="Bergen"), sunrise(place="Cork")]'),
        (
            "tool",
            '[{"name": "sunrise", "results": {"time": "08:31"}}, {"name": "sunrise", "results": {"time": "07:58"}}]',
        ),
        ("assistant", "Bergen at 08:31, Cork at 07:58."),
        ("user", "Thanks!"),
        ("assistant", "You're welcome."),
    ]
    found = contexts(path)
    assert [c[1:] for c in found] == [tides[:2], tides, sun[:2], sun[:4], sun]
    assert {c[0][0] for c in found} == {"system"}
    assert all(c[0][1].startswith("You are an expert in composing functions.") for c in found)


def test_a_nemotron_post_training_row_trains_its_output_once_after_its_input_under_its_system_prompt() -> None:
    # nvidia/Llama-Nemotron-Post-Training-Dataset rows: `input` the prompt's messages (an earlier reply among them is
    # context given, not sampled here), `output` the reply, `system_prompt` the reasoning switch, labels beside
    path = FIXTURES / "nemotron-post-training.jsonl"
    assert books(path) == (2, 0, 0)
    assert contexts(path) == [
        [
            ("system", "detailed thinking on"),
            ("user", "What is 12 squared?"),
            ("assistant", "<think>\n12 times 12 is 144.\n</think>\n\n144"),
        ],
        [
            ("system", "detailed thinking off"),
            ("user", "Greet me."),
            ("assistant", "Hello!"),
            ("user", "Once more, in French."),
            ("assistant", "Bonjour !"),
        ],
    ]


def test_a_swe_rebench_openhands_trajectory_trains_its_calls_with_the_tools_of_its_json_column() -> None:
    # nebius/SWE-rebench-openhands-trajectories rows: `trajectory` OpenAI messages (every key on every message, null
    # where unused), `tools` the schemas as JSON text, `resolved`, `exit_status`, `model_patch` beside
    path = FIXTURES / "swe-rebench-openhands.jsonl"
    assert books(path) == (2, 0, 0)
    head = [
        ("system", "You are a software agent working in /workspace."),
        ("user", "<uploaded_files>/workspace/calc</uploaded_files>\nThe parser rejects negative numbers."),
        ("assistant", [("execute_bash", {"command": "grep -rn 'def parse' /workspace/calc"})]),
    ]
    assert contexts(path) == [
        head,
        [
            *head,
            ("tool", ("execute_bash", "/workspace/calc/parse.py:4:def parse(s):")),
            ("assistant", [("finish", {"message": "Negative numbers parse now."})]),
        ],
    ]
    (graph,) = graphs(path)
    assert [t["function"]["name"] for t in graph.env.tools] == ["execute_bash", "finish"]
    assert "context_incomplete" not in graph.metadata


@pytest.mark.parametrize(
    "text",
    [
        "[f(1)]",  # a positional argument: not the keyword form
        "[f(x=y)]",  # an argument that is a name, not a literal
        "[f(**kwargs)]",
        "See [f(x=1)]",  # prose around it
        "[f(x=1)] and more",
        "[a (b)]",
    ],
)
def test_text_that_only_resembles_a_pythonic_call_list_is_not_taken_for_calls(text: str) -> None:
    assert not pythonic_calls(text)
    assert pythonic_calls('[f(x=1, y=[1, "a"], z=None), g.h()]')


def test_each_dataset_fixture_is_listed_in_the_provenance_file() -> None:
    listed = (FIXTURES / "PROVENANCE.md").read_text(encoding="utf-8")
    for name in (
        "axolotl-training-flags.jsonl",
        "axolotl-sharegpt-training-flags.jsonl",
        "axolotl-train-detail.jsonl",
        "openhermes-system-column.jsonl",
        "swe-smith-trajectories.jsonl",
        "slimorca-weights.jsonl",
        "apigen-mt-conversations.jsonl",
        "magpie-multi-turn.jsonl",
        "toolace-pythonic-calls.jsonl",
        "nemotron-post-training.jsonl",
        "swe-rebench-openhands.jsonl",
    ):
        assert f"`{name}`" in listed, name
    assert Path(__file__).name in listed
