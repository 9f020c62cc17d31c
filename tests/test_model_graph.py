"""MessageGraph (seed 000): a list of OpenAI dicts on the outside, an immutable content-addressed DAG inside.

Covers the interface exactly as issue 2 shows it, fork-versus-replace edit semantics, origins (only sampled
nodes are turns), environments, nested sub-agent graphs, save/load, the append-only running log and its crash
behaviour, and the seed-004-style pretty printing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import msgtrain
from msgtrain import MessageBuilder, MessageGraph, OptionResultBuilder
from msgtrain.errors import ParseError
from msgtrain.model import EdgeKind, Generation, OptionCallMessage, Origin, ParallelEdge
from msgtrain.model.graphlog import subgraphs
from msgtrain.model.message import text_message

SYSTEM = {"role": "system", "content": "You are helpful."}
USER = {"role": "user", "content": "What is 2+2?"}
ANSWER = {"role": "assistant", "content": "4."}
FOLLOW_UP = {"role": "user", "content": "And 3+3?"}
ANSWER_2 = {"role": "assistant", "content": "6."}
TOOLS = [{"type": "function", "function": {"name": "calculate", "parameters": {"type": "object"}}}]


def _chat(*messages: dict[str, Any], graph_id: str = "g", **kw: Any) -> MessageGraph:
    g = MessageGraph(graph_id=graph_id, **kw)
    for m in messages:
        g.append(m)
    return g


def _contents(g: MessageGraph) -> list[Any]:
    return [m["content"] for m in g]


def _origins(g: MessageGraph) -> list[Origin]:
    return [g.nodes[n].origin for n in g.head]


def _snapshot(g: MessageGraph) -> tuple[Any, ...]:
    return (dict(g.nodes), list(g.edges), list(g.head), dict(g.generations))


def _tree(g: MessageGraph) -> dict[str | None, list[str]]:
    return {parent: sorted(kids) for parent, kids in g.children.items() if kids}


def _leaf_ids(g: MessageGraph) -> list[str]:
    return [branch.leaf.id for branch in g.branches()]


def _assert_same_graph(a: MessageGraph, b: MessageGraph) -> None:
    assert (a.graph_id, a.policy, a.metadata) == (b.graph_id, b.policy, b.metadata)
    assert a.nodes == b.nodes
    assert _tree(a) == _tree(b)
    assert a.edges == b.edges
    assert a.generations == b.generations
    assert a.head == b.head
    assert a.envs == b.envs
    assert a.current_env == b.current_env
    assert sorted(_leaf_ids(a)) == sorted(_leaf_ids(b))
    assert str(a) == str(b)


# ----------------------------------------------------------------------------------------------- list interface


def test_the_graph_reads_like_the_list_of_openai_dicts_it_was_given() -> None:
    g = MessageGraph()
    g.append(SYSTEM)
    g.append(text_message("user", "What is 2+2?"))  # Message objects work too
    g.append(ANSWER)
    assert len(g) == 3
    assert g[0] == SYSTEM
    assert g[1] == USER
    assert g[-1] == ANSWER
    assert g[-3] == g[0]
    assert list(g) == [SYSTEM, USER, ANSWER]
    assert g[0:2] == [SYSTEM, USER]
    assert g == [SYSTEM, USER, ANSWER]
    assert g != [SYSTEM, USER]
    with pytest.raises(IndexError, match="out of range"):
        g[3]
    with pytest.raises(IndexError):
        g[-4]


def test_the_issue_2_snippet_runs_as_written(tmp_path: Path) -> None:
    g = MessageGraph()
    g.append({"role": "system", "content": "..."})
    g.append({"role": "user", "content": "..."})
    g.append({"role": "assistant", "content": "..."})
    sampled = g.head[-1]
    g[1] = {"role": "user", "content": "edited"}
    g[1]["content"] = "edited again"
    g[1:3] = [{"role": "user", "content": "summary"}]
    assert list(g) == [{"role": "system", "content": "..."}, {"role": "user", "content": "summary"}]
    assert len(g) == 2 and g[-1] == {"role": "user", "content": "summary"}
    assert [n.id for n in g.sampled_nodes()] == [sampled]  # the sampled turn survives every edit
    assert [n.message.text for n in g.path(sampled)] == ["...", "...", "..."]
    g.save(tmp_path / "run.graph.jsonl")
    graphs = list(msgtrain.load_graphs(tmp_path / "run.graph.jsonl"))
    assert graphs == [g]


def test_graphs_are_equal_when_their_current_conversations_are_equal() -> None:
    first = _chat(SYSTEM, USER, ANSWER, graph_id="one")
    second = _chat(SYSTEM, USER, ANSWER, graph_id="two")
    assert first == second
    second[1] = FOLLOW_UP
    assert first != second
    second[1] = USER  # history differs now, but the conversation is the same again
    assert first == second


def test_a_graph_can_be_built_from_a_list_and_extended() -> None:
    g = MessageGraph([SYSTEM, USER])
    g.extend([ANSWER, FOLLOW_UP])
    assert list(g) == [SYSTEM, USER, ANSWER, FOLLOW_UP]


def test_a_list_of_messages_comes_back_as_typed_messages() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    assert [m.role for m in g.messages()] == ["system", "user", "assistant"]
    assert g.message(-1).text == "4."


# ----------------------------------------------------------------------------------------------- origins


def test_an_appended_assistant_message_is_a_policy_sample_and_inputs_are_context() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    assert _origins(g) == [Origin.CONTEXT, Origin.CONTEXT, Origin.SAMPLED]
    assert [n.id for n in g.sampled_nodes()] == [g.head[2]]
    assert g.nodes[g.head[2]].sampled


@pytest.mark.parametrize("origin", ["prefill", "injected", "edited", "carried"])
def test_an_assistant_message_marked_otherwise_is_never_a_turn(origin: str) -> None:
    g = _chat(SYSTEM, USER)
    nid = g.append(ANSWER, origin=origin)
    assert g.nodes[nid].origin == Origin(origin)
    assert g.sampled_nodes() == []


def test_only_sampled_nodes_count_as_turns_after_edits() -> None:
    g = _chat(SYSTEM, USER, ANSWER, FOLLOW_UP, ANSWER_2)
    sampled_before = [n.id for n in g.sampled_nodes()]
    g[1] = {"role": "user", "content": "What is 5+5?"}
    g[2] = {"role": "assistant", "content": "10."}
    assert _origins(g) == [Origin.CONTEXT, Origin.CONTEXT, Origin.EDITED, Origin.CONTEXT, Origin.CARRIED]
    assert [n.id for n in g.sampled_nodes()] == sampled_before


def test_a_carried_node_reported_as_sampled_in_the_same_context_becomes_a_turn() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    g[1] = FOLLOW_UP
    carried = g.head[2]
    assert g.nodes[carried].origin is Origin.CARRIED
    assert g.add_node(g.head[1], ANSWER) == carried  # same message, same context: same node
    assert g.nodes[carried].origin is Origin.SAMPLED
    assert g.nodes[carried].message == g.nodes[g.branches()[0].leaf.id].message


def test_a_sampled_node_is_never_downgraded_by_a_later_carry() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    sampled = g.head[2]
    assert g.add_node(g.head[1], ANSWER, origin="carried") == sampled
    assert g.nodes[sampled].origin is Origin.SAMPLED


# ----------------------------------------------------------------------------------------------- edits


def test_editing_before_a_sampled_turn_forks_and_keeps_the_old_branch() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    sys_id, old_user, sampled = g.head
    g[1] = {"role": "user", "content": "edited"}
    assert _contents(g) == ["You are helpful.", "edited", "4."]
    assert g.head[0] == sys_id  # the shared prefix is the same node
    assert old_user in g.nodes and sampled in g.nodes
    assert g.nodes[sampled].origin is Origin.SAMPLED  # history is never mutated
    assert g.edges == [ParallelEdge(EdgeKind.EDIT, (old_user,), (g.head[1],), sys_id)]
    assert _origins(g) == [Origin.CONTEXT, Origin.CONTEXT, Origin.CARRIED]
    assert g.edge_into(g.head[-1]) == g.edges[0]
    assert [[m.text for m in b.messages] for b in g.branches()] == [
        ["You are helpful.", "What is 2+2?", "4."],
        ["You are helpful.", "edited", "4."],
    ]


def test_an_item_edit_records_the_same_fork_as_assigning_the_whole_message() -> None:
    whole = _chat(SYSTEM, USER, ANSWER)
    whole[1] = {"role": "user", "content": "edited"}
    item = _chat(SYSTEM, USER, ANSWER)
    item[1]["content"] = "edited"
    assert list(item) == list(whole)
    assert _snapshot(item) == _snapshot(whole)
    assert item.edges[0].kind is EdgeKind.EDIT


def test_editing_the_sampled_assistant_itself_forks_with_an_edited_node() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    sampled = g.head[2]
    g[2] = {"role": "assistant", "content": "Four."}
    assert g[-1] == {"role": "assistant", "content": "Four."}
    assert g.nodes[g.head[2]].origin is Origin.EDITED
    assert g.edges == [ParallelEdge(EdgeKind.EDIT, (sampled,), (g.head[2],), g.head[1])]
    assert [n.id for n in g.sampled_nodes()] == [sampled]


def test_assigning_a_range_records_a_compaction_edge_over_it() -> None:
    g = _chat(SYSTEM, USER, ANSWER, FOLLOW_UP, ANSWER_2)
    sys_id, user, answer, _, sampled_2 = g.head
    g[1:3] = [{"role": "user", "content": "summary: 2+2 is 4"}]
    assert _contents(g) == ["You are helpful.", "summary: 2+2 is 4", "And 3+3?", "6."]
    assert g.edges == [ParallelEdge(EdgeKind.COMPACTION, (user, answer), (g.head[1],), sys_id)]
    assert _origins(g) == [Origin.CONTEXT, Origin.CONTEXT, Origin.CONTEXT, Origin.CARRIED]
    assert len(g.branches()) == 2
    assert g.nodes[sampled_2].origin is Origin.SAMPLED


def test_replacing_a_one_message_range_by_one_message_is_an_edit() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    g[1:2] = [FOLLOW_UP]
    assert [e.kind for e in g.edges] == [EdgeKind.EDIT]


def test_a_range_can_be_replaced_by_several_messages() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    g[1:2] = [{"role": "user", "content": "part 1"}, {"role": "user", "content": "part 2"}]
    assert _contents(g) == ["You are helpful.", "part 1", "part 2", "4."]
    assert g.edges[0].kind is EdgeKind.COMPACTION
    assert len(g.edges[0].new) == 2


def test_only_contiguous_ranges_can_be_assigned() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    with pytest.raises(ValueError, match="contiguous"):
        g[0:3:2] = [USER, USER]


def test_deleting_before_a_sampled_turn_records_a_delete_edge() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    sys_id, user, _ = g.head
    del g[1]
    assert _contents(g) == ["You are helpful.", "4."]
    assert g.edges == [ParallelEdge(EdgeKind.DELETE, (user,), (), sys_id)]
    assert g.edge_into(g.head[-1]) == g.edges[0]
    assert len(g.branches()) == 2


def test_an_edit_after_the_last_sampled_turn_replaces_in_place() -> None:
    g = _chat(SYSTEM, USER, ANSWER, FOLLOW_UP)
    unseen = g.head[3]
    nodes_before = len(g.nodes)
    g[3] = {"role": "user", "content": "And 4+4?"}
    assert _contents(g)[-1] == "And 4+4?"
    assert g.edges == []
    assert unseen not in g.nodes  # nobody saw it: no history to keep
    assert len(g.nodes) == nodes_before
    assert len(g.branches()) == 1


def test_a_graph_nobody_sampled_from_is_edited_in_place() -> None:
    g = _chat(SYSTEM, USER)
    g[0] = {"role": "system", "content": "Be terse."}
    g[1]["content"] = "2+2?"
    g[0:2] = [{"role": "user", "content": "only this"}]
    assert list(g) == [{"role": "user", "content": "only this"}]
    assert (g.edges, len(g.nodes)) == ([], 1)


def test_assigning_the_message_already_there_is_a_no_op() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    before = _snapshot(g)
    g[2] = dict(ANSWER)  # the seed's case: the same assistant content
    g[1] = dict(USER)
    g[0] = g[0]
    g[1]["content"] = USER["content"]
    assert _snapshot(g) == before


def test_a_second_edit_of_a_fork_keeps_every_version_edge_pointing_at_live_nodes() -> None:
    g = _chat(SYSTEM, USER, ANSWER)
    g[1] = {"role": "user", "content": "edited"}
    g[1]["content"] = "edited again"
    assert _contents(g) == ["You are helpful.", "edited again", "4."]
    named = {n for e in g.edges for n in (*e.old, *e.new)}
    assert named <= set(g.nodes)
    assert g.edge_into(g.head[-1]) is not None
    assert g.edge_into(g.head[-1]).kind is EdgeKind.EDIT  # type: ignore[union-attr]
    assert "[edit] [Human] edited again" in str(g)


# ----------------------------------------------------------------------------------------------- identity


def test_equal_prefixes_are_equal_nodes_across_graphs() -> None:
    first = _chat(SYSTEM, USER, ANSWER, graph_id="a")
    second = _chat(SYSTEM, USER, {"role": "assistant", "content": "Four."}, graph_id="b")
    assert first.head[:2] == second.head[:2]
    assert first.head[2] != second.head[2]


def test_a_node_id_depends_on_its_parent_and_on_the_environment() -> None:
    g = _chat(USER, USER)
    assert g.head[0] != g.head[1]  # same message, different context
    with_tools = _chat(USER, tools=TOOLS)
    with_kwargs = _chat(USER, template_kwargs={"enable_thinking": False})
    assert len({g.head[0], with_tools.head[0], with_kwargs.head[0]}) == 3


def test_branches_share_the_nodes_of_their_common_prefix() -> None:
    g = _chat(SYSTEM, USER, ANSWER, FOLLOW_UP, ANSWER_2)
    g[3] = {"role": "user", "content": "And 5+5?"}
    first, second = g.branches()
    assert [n.id for n in first.nodes[:3]] == [n.id for n in second.nodes[:3]]
    assert len(g.nodes) == 5 + 2


def test_engine_facts_are_kept_but_are_not_part_of_a_node_identity() -> None:
    generation = Generation(token_ids=(19, 13), logprobs=(-0.25, -0.5), model="m", finish_reason="stop")
    with_facts = _chat(SYSTEM, USER)
    nid = with_facts.append(ANSWER, generation=generation)
    without = _chat(SYSTEM, USER, ANSWER)
    assert nid == without.head[-1]
    assert with_facts.generation(nid) == generation
    assert without.generation(nid) is None


def test_a_message_carrying_its_own_generation_records_it_for_its_node() -> None:
    generation = Generation(token_ids=(7,), model="m")
    message = text_message("assistant", "hi").model_copy(update={"generation": generation})
    g = _chat(USER)
    nid = g.append(message)
    assert g.generation(nid) == generation


def test_generations_are_kept_only_for_sampled_nodes() -> None:
    g = _chat(SYSTEM, USER)
    nid = g.append(ANSWER, origin="prefill", generation=Generation(token_ids=(1,)))
    assert g.generation(nid) is None


# ----------------------------------------------------------------------------------------------- environment


def test_the_tools_and_template_kwargs_given_are_what_each_node_saw() -> None:
    g = _chat(SYSTEM, USER, tools=TOOLS, template_kwargs={"enable_thinking": True})
    env = g.env_of(g.head[-1])
    assert list(env.tools) == TOOLS
    assert env.kwargs == {"enable_thinking": True}
    assert g.current_env == env


def test_changing_tools_after_a_sampled_turn_is_a_new_version_with_an_env_change_edge() -> None:
    g = _chat(SYSTEM, USER, ANSWER, tools=TOOLS)
    old_head = list(g.head)
    g.set_env(tools=[], template_kwargs={})
    assert list(g) == [SYSTEM, USER, ANSWER]
    assert g.current_env.tools == ()
    assert set(g.head).isdisjoint(old_head)  # a new environment starts new nodes
    assert g.edges == [ParallelEdge(EdgeKind.ENV_CHANGE, tuple(old_head), tuple(g.head), None)]
    assert _origins(g) == [Origin.CONTEXT, Origin.CONTEXT, Origin.CARRIED]
    assert all(n in g.nodes for n in old_head)
    g.append(FOLLOW_UP)
    assert g.env_of(g.head[-1]).tools == ()


def test_changing_template_kwargs_is_a_new_version_too() -> None:
    g = _chat(SYSTEM, USER, ANSWER, template_kwargs={"enable_thinking": True})
    g.set_env(template_kwargs={"enable_thinking": False})
    assert g.current_env.kwargs == {"enable_thinking": False}
    assert [e.kind for e in g.edges] == [EdgeKind.ENV_CHANGE]
    assert len(g.branches()) == 2


def test_setting_the_same_environment_again_changes_nothing() -> None:
    g = _chat(SYSTEM, USER, ANSWER, tools=TOOLS, template_kwargs={"a": 1})
    before = _snapshot(g)
    g.set_env(tools=TOOLS, template_kwargs={"a": 1})
    assert _snapshot(g) == before


def test_changing_tools_before_anything_was_sampled_just_replaces() -> None:
    g = _chat(SYSTEM, USER, tools=TOOLS)
    old = list(g.head)
    g.set_env(tools=[])
    assert g.edges == []
    assert not any(n in g.nodes for n in old)
    assert list(g) == [SYSTEM, USER]
    assert g.env_of(g.head[0]).tools == ()


# ----------------------------------------------------------------------------------------------- sub-agents


def _graph_with_subagent() -> tuple[MessageGraph, MessageGraph]:
    """Seed 000's picture: a chat response calls a sub-agent; the tool response holds the sub-agent's chat."""
    sub = MessageGraph(graph_id="sub", policy="subagent")
    sub.append({"role": "system", "content": "Subagent call received"})
    sub.append({"role": "user", "content": "Process this request"})
    sub.append({"role": "assistant", "content": "Processing..."})
    g = MessageGraph(graph_id="main", policy="main")
    g.append({"role": "system", "content": "Messages are nodes in a graph"})
    g.append({"role": "user", "content": "But messages aren't the only thing in the graph"})
    builder = MessageBuilder.next_step(0, policy="main")
    builder.add_text("Hello, Here's a subagent call:")
    builder.add_option_call("subagent", {"task": "process"})
    call = builder.to_message()
    assert isinstance(call, OptionCallMessage)
    g.append(call, generation=Generation(sampling={"temperature": 1.0}))
    g.append(OptionResultBuilder.response_to(call).success("Subagent call output", subgraph=sub))
    return g, sub


def test_a_tool_result_can_hold_a_sub_agent_graph_with_its_own_policy() -> None:
    g, sub = _graph_with_subagent()
    (nested,) = subgraphs(g)
    assert nested.policy == "subagent"
    assert nested.graph_id == "sub"
    assert nested == sub
    _assert_same_graph(nested, sub)
    assert [n.id for n in nested.sampled_nodes()] == [sub.head[-1]]
    assert g[-1] == {
        "role": "tool",
        "tool_call_id": g.message(2).calls[0].invocation_id,  # type: ignore[union-attr]
        "name": "subagent",
        "content": "Subagent call output",
    }


def test_the_nested_graph_is_provenance_not_part_of_the_result_identity() -> None:
    g, _ = _graph_with_subagent()
    bare = MessageGraph(graph_id="bare", policy="main")
    for m in g.messages():
        bare.append(m.model_copy(update={"subgraph": None}) if m.kind == "option_result" else m)
    assert bare.head == g.head
    assert subgraphs(bare) == []


def test_a_sub_agent_carried_onto_a_new_branch_is_listed_once() -> None:
    g, sub = _graph_with_subagent()
    g.append({"role": "assistant", "content": "Done."})
    g[1] = {"role": "user", "content": "edited"}
    assert len(g.branches()) == 2
    assert [s.graph_id for s in subgraphs(g)] == [sub.graph_id]


def test_a_graph_without_sub_agents_has_no_subgraphs() -> None:
    assert subgraphs(_chat(SYSTEM, USER, ANSWER)) == []


# ----------------------------------------------------------------------------------------------- steps and branches


def _stepped_graph() -> MessageGraph:
    g = MessageGraph(graph_id="steps")
    g.append(text_message("user", "start", step_num=0))
    g.append(MessageBuilder.next_step(0).add_text("thinking about it").to_message())
    g.append(text_message("user", "go on", step_num=1))
    g.append(MessageBuilder.next_step(1).add_text("done").to_message())
    return g


def test_every_node_keeps_its_step_num_across_forks() -> None:
    g = _stepped_graph()
    g[0] = text_message("user", "begin", step_num=0)
    assert [m.step_num for m in g.messages()] == [0, 1, 1, 2]
    for branch in g.branches():
        assert [m.step_num for m in branch.messages] == [0, 1, 1, 2]


def test_an_item_edit_keeps_what_the_dict_does_not_show() -> None:
    g = MessageGraph(graph_id="steps")
    g.append(text_message("user", "start", step_num=0, metadata={"source": "cli"}))
    g.append(text_message("assistant", "plan", policy="planner", step_num=1))
    g[1]["content"] = "better plan"
    g[0]["content"] = "begin"
    first, second = g.messages()
    assert (first.text, first.step_num, first.metadata) == ("begin", 0, {"source": "cli"})
    assert (second.text, second.step_num, second.policy) == ("better plan", 1, "planner")


def test_branches_are_root_to_leaf_paths_in_the_order_they_were_made() -> None:
    g = _chat(SYSTEM, USER, ANSWER, FOLLOW_UP, ANSWER_2)
    g[3] = {"role": "user", "content": "And 5+5?"}
    g.append({"role": "assistant", "content": "10."})
    g[1] = {"role": "user", "content": "What is 1+1?"}
    branches = g.branches()
    assert [len(b) for b in branches] == [5, 6, 6]
    assert [b.leaf.message.text for b in branches] == ["6.", "10.", "10."]
    for b in branches:
        assert b.nodes[0].parent is None
        assert all(child.parent == parent.id for parent, child in zip(b.nodes, b.nodes[1:], strict=False))
        assert [n.depth for n in b.nodes] == list(range(len(b)))
    assert branches[-1].nodes == tuple(g.path(g.head[-1]))


# ----------------------------------------------------------------------------------------------- save / load


def _rich_graph() -> MessageGraph:
    """Several branches, one version edge of every kind, generations, media, reasoning, calls and a sub-agent."""
    g, _ = _graph_with_subagent()
    g.metadata["run"] = "r1"
    done = Generation(token_ids=(5, 6), logprobs=(-1, -2))
    g.append({"role": "assistant", "content": "Done."}, generation=done)
    image = {"type": "image_url", "image_url": {"url": "https://x/i.png"}}
    g.append({"role": "user", "content": [{"type": "text", "text": "and this?"}, image]})
    g.append({"role": "assistant", "content": "A cat.", "reasoning_content": "looks feline"})
    g[1] = {"role": "user", "content": "edited question"}
    g.append({"role": "assistant", "content": "Anything else?"}, generation=Generation(model="m"))
    g[4:6] = [{"role": "user", "content": "summary"}]
    g.append({"role": "assistant", "content": "Noted."})
    del g[4]
    g.append({"role": "assistant", "content": "Still here."})
    g.set_env(tools=TOOLS, template_kwargs={"enable_thinking": False})
    g.append({"role": "user", "content": "last"})
    return g


def test_save_and_load_round_trip_a_graph_with_branches_edges_and_generations(tmp_path: Path) -> None:
    g = _rich_graph()
    assert {e.kind for e in g.edges} == {
        EdgeKind.EDIT,
        EdgeKind.COMPACTION,
        EdgeKind.DELETE,
        EdgeKind.ENV_CHANGE,
    }
    assert len(g.branches()) == 5
    assert len(g.generations) == 3
    path = tmp_path / "run.graph.jsonl"
    g.save(path)
    (loaded,) = msgtrain.load_graphs(path)
    _assert_same_graph(loaded, g)
    assert loaded == g
    assert {(sub.graph_id, sub.policy) for sub in subgraphs(loaded)} == {("sub", "subagent")}


def test_a_loaded_graph_keeps_working_like_the_original(tmp_path: Path) -> None:
    g = _chat(SYSTEM, USER, ANSWER, tools=TOOLS)
    g.save(tmp_path / "g.jsonl")
    (loaded,) = msgtrain.load_graphs(tmp_path / "g.jsonl")
    for graph in (g, loaded):
        graph[1]["content"] = "changed"
        graph.append(FOLLOW_UP)
    _assert_same_graph(loaded, g)


def test_save_and_load_keep_branches_in_creation_order(tmp_path: Path) -> None:
    g = _rich_graph()
    g.save(tmp_path / "run.graph.jsonl")
    (loaded,) = msgtrain.load_graphs(tmp_path / "run.graph.jsonl")
    assert _leaf_ids(loaded) == _leaf_ids(g)
    assert list(loaded.nodes) == list(g.nodes)


def test_several_graphs_share_one_file_in_order(tmp_path: Path) -> None:
    path = tmp_path / "many.graph.jsonl"
    graphs = [_chat(SYSTEM, USER, ANSWER, graph_id=f"g{i}") for i in range(3)]
    graphs[1][1] = FOLLOW_UP
    graphs[0].save(path)
    for g in graphs[1:]:
        g.save(path, append=True)
    loaded = list(msgtrain.load_graphs(path))
    assert [g.graph_id for g in loaded] == ["g0", "g1", "g2"]
    for original, back in zip(graphs, loaded, strict=True):
        _assert_same_graph(back, original)


# ----------------------------------------------------------------------------------------------- running log


def _load_one(path: Path) -> MessageGraph:
    (g,) = msgtrain.load_graphs(path)
    return g


def test_the_running_log_is_readable_after_every_change(tmp_path: Path) -> None:
    path = tmp_path / "live.graph.jsonl"
    g = MessageGraph(graph_id="live", log=path, tools=TOOLS)
    steps = [
        lambda: g.append(SYSTEM),
        lambda: g.append(USER),
        lambda: g.append(ANSWER, generation=Generation(token_ids=(1, 2), logprobs=(-0.1, -0.2))),
        lambda: g.append(FOLLOW_UP),
        lambda: g.__setitem__(3, {"role": "user", "content": "And 4+4?"}),  # in place: a retract record
        lambda: g.__setitem__(1, {"role": "user", "content": "What is 1+1?"}),  # fork: an edge record
        lambda: g.append(ANSWER_2),
        lambda: g.__setitem__(slice(1, 3), [{"role": "user", "content": "summary"}]),
        lambda: g.set_env(tools=[]),
        lambda: g.append({"role": "user", "content": "bye"}),
    ]
    for step in steps:
        step()
        _assert_same_graph(_load_one(path), g)
    g.close()
    _assert_same_graph(_load_one(path), g)


def test_two_running_graphs_can_log_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.graph.jsonl"
    a = MessageGraph(graph_id="a", log=path)
    b = MessageGraph(graph_id="b", log=path)
    for message in (SYSTEM, USER, ANSWER):
        a.append(message)
        b.append(message)
    b[1] = FOLLOW_UP
    a.close()
    b.close()
    loaded = {g.graph_id: g for g in msgtrain.load_graphs(path)}
    _assert_same_graph(loaded["a"], a)
    _assert_same_graph(loaded["b"], b)


def test_a_crash_mid_line_is_a_parse_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "crashed.graph.jsonl"
    g = MessageGraph(graph_id="crash", log=path)
    for message in (SYSTEM, USER, ANSWER):
        g.append(message)
    complete = path.read_bytes()
    lines = complete.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # killed while writing
    with pytest.raises(ParseError) as info:
        list(msgtrain.load_graphs(path))
    assert info.value.where == f"{path}:{len(lines)}"
    assert info.value.code == "truncated_line"
    assert str(info.value).startswith(f"{path}:{len(lines)}: truncated last line")


def test_a_log_cut_at_a_line_boundary_loads_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "cut.graph.jsonl"
    g = MessageGraph(graph_id="cut", log=path)
    for message in (SYSTEM, USER, ANSWER):
        g.append(message)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))  # the last node record never made it
    loaded = _load_one(path)
    assert list(loaded) == [SYSTEM, USER]
    assert loaded.head == g.head[:2]


def test_the_running_log_knows_the_current_branch_after_an_edit_back(tmp_path: Path) -> None:
    path = tmp_path / "live.graph.jsonl"
    g = MessageGraph(graph_id="live", log=path)
    for message in (SYSTEM, USER, ANSWER, FOLLOW_UP, ANSWER_2):
        g.append(message)
    g[1] = {"role": "user", "content": "What is 1+1?"}
    del g[3:]
    g[1] = USER
    assert list(g) == [SYSTEM, USER, ANSWER]
    assert list(_load_one(path)) == list(g)


# ----------------------------------------------------------------------------------------------- printing


def _seed_004_chat() -> MessageGraph:
    g = MessageGraph(graph_id="demo")
    g.append({"role": "system", "content": "You are helpful."})
    g.append({"role": "user", "content": "What is 2+2?"})
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculate", "arguments": '{"expr": "2+2"}'},
    }
    g.append({"role": "assistant", "content": "Let me calculate.", "tool_calls": [call]})
    g.append({"role": "tool", "tool_call_id": "call_1", "content": "4"})
    g.append({"role": "assistant", "content": "2+2 = 4"})
    return g


def test_str_prints_the_conversation_in_the_seed_004_style() -> None:
    assert str(_seed_004_chat()) == "\n".join(
        [
            "MessageGraph demo (5 nodes, 1 branches, 0 versions)",
            "[System] You are helpful.",
            "[Human] What is 2+2?",
            '[AI] Let me calculate. -> calculate({"expr": "2+2"})  (sampled)',
            "[Tool: calculate (call_id=call_1)] 4",
            "[AI] 2+2 = 4  (sampled)",
        ]
    )


def test_str_shows_branches_as_a_tree_marked_with_their_version_edge() -> None:
    g = _seed_004_chat()
    g[1] = {"role": "user", "content": "What is 3+3?"}
    assert str(g) == "\n".join(
        [
            "MessageGraph demo (9 nodes, 2 branches, 1 versions)",
            "[System] You are helpful.",
            "├─ [Human] What is 2+2?",
            '│  [AI] Let me calculate. -> calculate({"expr": "2+2"})  (sampled)',
            "│  [Tool: calculate (call_id=call_1)] 4",
            "│  [AI] 2+2 = 4  (sampled)",
            "└─ [edit] [Human] What is 3+3?",
            '   [AI] Let me calculate. -> calculate({"expr": "2+2"})  (carried)',
            "   [Tool: calculate (call_id=call_1)] 4",
            "   [AI] 2+2 = 4  (carried)",
        ]
    )


def test_str_shows_steps_policies_reasoning_and_errors() -> None:
    g = MessageGraph(graph_id="misc")
    builder = MessageBuilder.next_step(2, policy="planner").add_reasoning("hmm").add_text("Let me look.")
    builder.add_option_call("fetch", {})
    call = builder.to_message()
    assert isinstance(call, OptionCallMessage)
    g.append(call)
    g.append(OptionResultBuilder.response_to(call).error("Timeout", "too slow"))
    lines = str(g).splitlines()
    assert lines[1] == "[AI] <thinking 3 chars> Let me look. -> fetch({})  (sampled, step 3, policy=planner)"
    invocation = call.calls[0].invocation_id
    assert lines[2] == f"[Tool: fetch (call_id={invocation})] ERROR too slow  (step 3)"


def _rich_text(g: MessageGraph) -> str:
    console = Console(record=True, width=120, color_system=None)
    console.print(g)
    return console.export_text()


def test_rich_rendering_shows_every_message_of_every_branch() -> None:
    g = _seed_004_chat()
    g[1] = {"role": "user", "content": "What is 3+3?"}
    text = _rich_text(g)
    assert text.startswith("MessageGraph demo")
    for label in ("[System] You are helpful.", "[Human] What is 2+2?", "[Human] What is 3+3?", "(carried)"):
        assert label in text
    assert text.count("[Tool: calculate (call_id=call_1)] 4") == 2


def test_rich_rendering_marks_the_version_edge_like_str_does() -> None:
    g = _chat(USER, ANSWER)
    g[0] = FOLLOW_UP
    assert "[edit] [Human] And 3+3?" in _rich_text(g)


def test_a_saved_graph_renders_the_same_tokens_after_reloading(tmp_path: Path) -> None:
    """Tool schemas and call arguments keep their key order through save/load: templates render them with
    ``tojson`` in that order, so sorting them on write would change the tokens of the reloaded graph."""
    import json

    from msgtrain.linearize import linearize_graph
    from tests.conftest import load_named_tokenizer

    tok = load_named_tokenizer("qwen2.5")
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}},
        },
    }
    g = MessageGraph(tools=[tool])
    g.append({"role": "user", "content": "find it"})
    g.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search", "arguments": {"query": "x", "limit": 3}},
                }
            ],
        }
    )
    g.append({"role": "tool", "tool_call_id": "c1", "content": "found"})
    g.append({"role": "assistant", "content": "done"})
    path = tmp_path / "g.graph.jsonl"
    g.save(path)
    (back,) = msgtrain.load_graphs(path)
    assert json.dumps(list(back.env.tools)) == json.dumps([tool])  # same keys in the same order
    before = [s.input_ids.tolist() for s in linearize_graph(g, tok).samples]
    after = [s.input_ids.tolist() for s in linearize_graph(back, tok).samples]
    assert before and before == after
    assert '"properties": {"query"' in tok.decode(after[0])


def test_environments_that_differ_only_in_key_order_have_distinct_ids() -> None:
    from msgtrain.model.graph import Env, _hash, canonical

    a = Env.make([{"name": "t", "description": "d"}])
    b = Env.make([{"description": "d", "name": "t"}])
    assert a.id != b.id
    # Sorted content keeps its version-1 id (logs written before stay comparable).
    assert b.id == _hash("env", canonical({"tools": [{"description": "d", "name": "t"}], "kwargs": {}}))
