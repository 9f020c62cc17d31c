"""RL trainers' rollout dumps no other test reads (tests/fixtures/unseen/PROVENANCE.md, "Rollouts" section),
hand-written in the shapes their writers produce: each file's books against a count made by hand, the context each
trained reply sits after, and the reward each rollout keeps."""

from __future__ import annotations

import json
from pathlib import Path

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.structure.structural import table_rows
from msgtrain.run.parts import convert_file
from tests.unseen_books import FIXTURES, SETTINGS, books, contexts, graphs

MATH = "You are a careful math tutor. Think, then answer in \\boxed{}."
HELPFUL = "You are a helpful assistant."


def _extras(path: Path) -> list[dict]:
    return [e.extras for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]


def test_an_atropos_group_trains_each_rollout_once_after_the_shared_prompt_with_its_own_score() -> None:
    # Atropos process mode (--env.data_path_to_save_groups): one ScoredDataGroup a line, `messages` a list of the
    # group's rollouts (each a whole message list) beside `tokens` / `masks` / `scores` lists in the same order
    path = FIXTURES / "atropos-groups.jsonl"
    assert detect_format(path).name == "structural"
    assert books(path) == (4, 0, 0)
    prompt = [("system", MATH), ("user", "What is 7 times 6?")]
    prime = [("system", MATH), ("user", "Name a prime above 10.")]
    assert contexts(path) == [
        [*prompt, ("assistant", "7 x 6 = 42, so \\boxed{42}.")],
        [*prompt, ("assistant", "I think it is \\boxed{36}.")],
        [*prime, ("assistant", "\\boxed{11}")],
        [*prime, ("assistant", "\\boxed{13}")],
    ]
    extras = _extras(path)
    assert [x["reward"] for x in extras] == [1.0, -1.0, 1.0, 1.0]
    groups = [x["rollout_group"] for x in extras]
    assert groups[0] == groups[1] != groups[2] == groups[3]


def test_a_verl_generations_dump_trains_each_output_after_the_prompt_its_decoded_input_renders() -> None:
    # verl's trainer.rollout_data_dir / validation_data_dir: `{step}.jsonl`, one sample a line, `input` the prompt
    # ids decoded with special tokens skipped (ChatML role lines left bare), `output` the response, `score` the reward
    path = FIXTURES / "verl-generations.jsonl"
    assert detect_format(path).name == "structural"
    assert books(path) == (2, 0, 0)
    prompt = [("system", HELPFUL), ("user", "Compute 3+4. Put the answer after ####.")]
    assert contexts(path) == [
        [*prompt, ("assistant", "3+4=7\n#### 7")],
        [*prompt, ("assistant", "It is 8.\n#### 8")],
    ]
    assert [x["reward"] for x in _extras(path)] == [1.0, 0.0]


def test_a_completions_table_trains_each_row_after_the_rendered_prompt_of_its_row() -> None:
    # a W&B Table's JSON (TRL's GRPO / RLOO log_completions: columns step, prompt (the chat template's text),
    # completion, one per reward function, advantage). Before: the file was one record holding no conversation
    # (no_conversation), its rows lost.
    path = FIXTURES / "trl-completions.table.json"
    assert detect_format(path).name == "structural"
    assert books(path) == (4, 0, 0)
    cat = [("system", HELPFUL), ("user", "Spell 'cat' backwards.")]
    dog = [("system", HELPFUL), ("user", "Spell 'dog' backwards.")]
    assert contexts(path) == [
        [*cat, ("assistant", "tac")],
        [*cat, ("assistant", "tca")],
        [*dog, ("assistant", "god")],
        [*dog, ("assistant", "god")],
    ]
    assert [x["advantage"] for x in _extras(path)] == [0.5, -0.5, 0.0, 0.0]


def test_a_split_oriented_frame_is_read_row_by_row(tmp_path: Path) -> None:
    # pandas' to_json(orient="split"): the same header-and-rows layout, beside an index
    frame = {"columns": ["prompt", "completion"], "index": [0, 1], "data": [["Hi?", "Hello."], ["Bye?", "Bye."]]}
    path = tmp_path / "frame.json"
    path.write_text(json.dumps(frame), encoding="utf-8")
    assert contexts(path) == [[("user", "Hi?"), ("assistant", "Hello.")], [("user", "Bye?"), ("assistant", "Bye.")]]


def test_only_a_header_of_distinct_names_over_rows_as_long_is_a_table() -> None:
    assert table_rows({"columns": ["a", "b"], "data": [[1, 2]]}) == [{"a": 1, "b": 2}]
    assert table_rows({"columns": ["a", "b"], "data": [[1, 2], [3]]}) is None  # a row of another length
    assert table_rows({"columns": ["a", "a"], "data": [[1, 2]]}) is None  # names that repeat
    assert table_rows({"columns": ["a", 2], "data": [[1, 2]]}) is None
    assert table_rows({"columns": ["a"], "data": []}) is None
    assert table_rows({"columns": [{"name": "a"}], "data": [[1]]}) is None  # a schema, not a header
    assert table_rows([["a"], [1]]) is None


NEMO_GAME = [
    ("system", "Play the guessing game. Guess with <guess>N</guess>."),
    ("user", "I picked a number from 1 to 4."),
]


def test_a_nemo_rl_training_data_log_trains_each_reply_after_the_rendered_messages_before_it() -> None:
    # NeMo RL's train_data_step{N}.jsonl: one sample a line, `content` the texts of its messages as the chat template
    # rendered each (the prompt's with the assistant's opening, each reply's with its end token), in order, beside
    # `rewards` (the sample's number), `generation_logprobs`, `prev_logprobs`, `input_lengths`. Before: no key held a
    # message list or a text, and every sample was skipped as no conversation.
    path = FIXTURES / "nemo-rl-train-data-step.jsonl"
    assert detect_format(path).name == "structural"
    assert books(path) == (4, 0, 0)
    prompt = [
        ("system", "Solve the problem and put the final answer in \\boxed{}."),
        ("user", "What is 15 divided by 3?"),
    ]
    assert contexts(path) == [
        [*prompt, ("assistant", "15 / 3 = 5, so the answer is \\boxed{5}.")],
        [*prompt, ("assistant", "It is \\boxed{3}.")],
        [*NEMO_GAME, ("assistant", "<guess>2</guess>")],
        [*NEMO_GAME, ("assistant", "<guess>2</guess>"), ("user", "Higher."), ("assistant", "<guess>3</guess>")],
    ]
    assert [x["reward"] for x in _extras(path)] == [1.0, 0.0, 1.0]


def test_a_sample_whose_observation_was_written_without_the_templates_markup_is_refused_with_the_reason() -> None:
    # line 4: the environment's answer logged as raw text between two replies: where the first reply ends and what
    # the second was sampled after are not what the markup says, so the sample is refused, not trained nor dropped
    path = FIXTURES / "nemo-rl-train-data-step.jsonl"
    events = list(read_events(detect_format(path), path))
    refused = [e for e in events if not isinstance(e, ReadGraph)]
    assert len(refused) == 1
    assert "texts, joined, at $.content hold chatml" in str(refused[0])


def test_texts_that_are_each_a_whole_conversation_stay_each_a_rollout(tmp_path: Path) -> None:
    # the same list shape holding whole rendered rollouts (an RL group's) is not one conversation joined
    one = "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>"
    two = "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\nHey.<|im_end|>"
    path = tmp_path / "group.jsonl"
    path.write_text(json.dumps({"content": [one, two], "rewards": [1.0, 0.0]}) + "\n", encoding="utf-8")
    assert contexts(path) == [[("user", "Hi?"), ("assistant", "Hello.")], [("user", "Hi?"), ("assistant", "Hey.")]]

    # as apply_chat_template writes them: each closed by the newline after its end token (Qwen's ChatML); joined, they
    # read as one dialogue with the second rollout after the first
    group = {"step": 3, "rollouts": [one + "\n", two + "\n"], "rewards": 1.0}
    path.write_text(json.dumps(group) + "\n", encoding="utf-8")
    assert contexts(path) == [[("user", "Hi?"), ("assistant", "Hello.")], [("user", "Hi?"), ("assistant", "Hey.")]]


def test_a_group_of_rendered_rollouts_with_one_cut_is_refused_not_joined(tmp_path: Path) -> None:
    # two whole rollouts and one cut before its end token (the length limit): not a dialogue of pieces; which text the
    # cut one sampled is not certain, so the record is a reject that says so, counted with its three rollouts
    one = "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
    two = "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\nHey.<|im_end|>\n"
    cut = "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\nWell, let me th"
    path = tmp_path / "group.jsonl"
    lines = [
        {"step": 3, "rollouts": [one, two], "rewards": 1.0},
        {"step": 3, "rollouts": [one, two, cut], "rewards": 1.0},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert stats.turns_trained == 2 and len(rejects) == 1
    assert "2 of the 3 texts at $.rollouts" in json.loads(rejects[0])["message"]


PERU = [
    ("system", HELPFUL),
    ("user", "What is the capital of Peru? Answer in <answer></answer>."),
]


def test_a_skyrl_eval_dump_keeps_why_the_engine_stopped_each_output() -> None:
    # SkyRL's dumped eval results: one sample a line, `input_prompt` the prompt ids decoded (the template's markup
    # kept), `output_response` the response decoded with its end token, `score`, `stop_reason` beside. Before: the
    # second output, stopped at the token limit (stop_reason "length", no end token), was trained with an end of turn
    # the model never sampled.
    path = FIXTURES / "skyrl-eval-dump.jsonl"
    assert detect_format(path).name == "structural"
    assert books(path) == (2, 0, 0)
    assert contexts(path) == [
        [*PERU, ("assistant", "<answer>Lima</answer>")],
        [*PERU, ("assistant", "Let me think about the capitals of South America one by one")],
    ]
    finishes = [
        generation.finish_reason if (generation := graph.generation(n.id)) is not None else None
        for graph in graphs(path)
        for n in graph.nodes.values()
        if n.origin.value == "sampled"
    ]
    assert finishes == ["stop", "length"]
    assert [x["reward"] for x in _extras(path)] == [1.0, 0.0]


def test_a_finish_reason_beside_a_plain_completion_is_the_replys(tmp_path: Path) -> None:
    rows = [{"prompt": "Count to ten.", "completion": "One, two, three", "finish_reason": "length"}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ((generation,),) = [
        [g.generation(n.id) for n in g.nodes.values() if n.origin.value == "sampled"] for g in graphs(path)
    ]
    assert generation is not None and generation.stopped_at_limit


def test_a_tau_bench_result_trains_each_agent_turn_and_says_its_tools_were_not_logged() -> None:
    # tau-bench's results file (a list of {task_id, reward, info, traj, trial}, `traj` the agent's OpenAI messages,
    # the wiki as the system message): three replies, each after the messages before it; the file holds no tool
    # schemas, which the model was sent, so the graph says its context lacks them
    path = FIXTURES / "tau-bench-results.json"
    assert books(path) == (3, 0, 0)
    head = [
        ("system", "# Airline policy\nYou are an airline agent. Verify the user before changes."),
        ("user", "Hi, I want to cancel reservation ABC123."),
        ("assistant", [("get_reservation_details", {"reservation_id": "ABC123"})]),
    ]
    result = ("tool", ("get_reservation_details", '{"reservation_id": "ABC123", "status": "confirmed"}'))
    ask = ("assistant", "I found ABC123. Shall I cancel it? (yes/no)")
    assert contexts(path) == [
        head,
        [*head, result, ask],
        [*head, result, ask, ("user", "yes"), ("assistant", "It is cancelled.")],
    ]
    (graph,) = graphs(path)
    assert graph.metadata["context_incomplete"]["missing"] == ["tools"]
    assert [x["reward"] for x in _extras(path)] == [1.0]


CALC = [("system", "You are a math agent. Use the calc tool."), ("user", "What is 12*13?")]
CALL = ("assistant", '<tool_call>\n{"name": "calc", "arguments": {"expr": "12*13"}}\n</tool_call>')
RESPONSE = ("user", "<tool_response>\n156\n</tool_response>")


def test_a_multi_turn_output_decoded_whole_trains_its_last_reply_after_the_responses_it_holds() -> None:
    # verl's agent loop: the dumped `output` is the response ids decoded whole, the tool response the engine was
    # handed between the two replies inside it (role lines bare, special tokens skipped). Before: the whole output,
    # the tool response included, was trained as one reply the model sampled. Now each reply is trained after the
    # turns before it, the tool response between them context.
    path = FIXTURES / "verl-agent-loop.jsonl"
    assert books(path) == (2, 0, 0)
    assert contexts(path) == [[*CALC, CALL], [*CALC, CALL, RESPONSE, ("assistant", "The answer is 156.")]]
    (graph,) = graphs(path)
    assert [n.origin.value for n in graph.nodes.values()] == ["context", "context", "sampled", "context", "sampled"]


def test_a_multi_turn_output_with_its_control_tokens_is_split_the_same_way(tmp_path: Path) -> None:
    # SkyRL's output_response of a multi-turn rollout keeps the template's control tokens between the turns
    prompt = (
        "<|im_start|>system\nYou are a math agent. Use the calc tool.<|im_end|>\n"
        "<|im_start|>user\nWhat is 12*13?<|im_end|>\n<|im_start|>assistant\n"
    )
    output = (
        '<tool_call>\n{"name": "calc", "arguments": {"expr": "12*13"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n156\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nThe answer is 156.<|im_end|>"
    )
    path = tmp_path / "dump.jsonl"
    row = {"input_prompt": prompt, "output_response": output, "score": 1.0, "stop_reason": "stop"}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert contexts(path) == [[*CALC, CALL], [*CALC, CALL, RESPONSE, ("assistant", "The answer is 156.")]]


def test_a_reply_that_only_mentions_a_role_line_stays_the_reply_it_is(tmp_path: Path) -> None:
    prompt = "system\nYou are terse.\nuser\nWrite the word assistant on its own line.\nassistant\n"
    path = tmp_path / "dump.jsonl"
    path.write_text(json.dumps({"input": prompt, "output": "Here:\nassistant\nDone."}) + "\n", encoding="utf-8")
    assert contexts(path)[0][-1] == ("assistant", "Here:\nassistant\nDone.")


def test_an_agentgym_trajectory_trains_the_turns_marked_for_loss_and_carries_the_fixed_acknowledgement() -> None:
    # AgentGym / AgentInstruct trajectories: `conversations` of {from, loss, value}; the instruction prompt's fixed
    # "OK." from gpt is `loss: false` (written by the data builder, not sampled), each agent step `loss: true`
    path = FIXTURES / "agentgym-traj.jsonl"
    assert books(path) == (2, 1, 0)
    head = [
        ("user", "You are an agent in a shop. Reply with one action per turn: search[...] or click[...]."),
        ("assistant", "OK."),
        ("user", "Instruction: find a red mug under 10 dollars.\n[Search]"),
        ("assistant", "Thought: search first.\nAction: search[red mug]"),
    ]
    assert contexts(path) == [
        head,
        [*head, ("user", "[Back to Search] [B01] Red mug $8"), ("assistant", "Thought: B01 fits.\nAction: click[B01]")],
    ]
    (graph,) = graphs(path)
    assert [n.origin.value for n in graph.nodes.values()] == [
        "context",
        "carried",
        "context",
        "sampled",
        "context",
        "sampled",
    ]
