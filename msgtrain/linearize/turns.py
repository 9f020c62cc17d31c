"""Graph → sampled turns, each with the exact context it was generated from.

Invariants:
- A turn is one node with origin ``sampled`` whose message is an assistant message; its context is the
  root-to-parent path and the environment (tools, template kwargs) of that node.
- Turns come in a deterministic order: by depth, then node creation order; a prefix turn always precedes the turns
  that extend it (a prefix is shorter).
- ``group_id`` is shared by turns sampled from the same context (n>1 siblings): hash of parent node and env, and of
  the graph, or of the group of rollouts the graph is one of (``ROLLOUT_GROUP``: n samples of one context read as n
  graphs, each with its reward).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from msgtrain.model.graph import ROLLOUT_GROUP, Env, MessageGraph, Node
from msgtrain.model.message import DEFAULT_POLICY, Generation


@dataclass(frozen=True)
class Turn:
    index: int  # position in the graph's turn order
    node: Node
    path: tuple[Node, ...]  # root .. turn (inclusive)
    env: Env
    generation: Generation | None
    policy: str
    group_id: str

    @property
    def node_id(self) -> str:
        return self.node.id

    @property
    def context(self) -> tuple[Node, ...]:
        return self.path[:-1]


def turn_policy(graph: MessageGraph, node: Node) -> str:
    p = node.message.policy
    return graph.policy if p == DEFAULT_POLICY else p


def collect_turns(graph: MessageGraph) -> list[Turn]:
    order = {nid: i for i, nid in enumerate(graph.nodes)}
    sampled = [n for n in graph.nodes.values() if n.sampled and n.is_assistant]
    sampled.sort(key=lambda n: (n.depth, order[n.id]))
    turns = []
    for i, node in enumerate(sampled):
        env = graph.env_of(node.id)
        basis = graph.metadata.get(ROLLOUT_GROUP) or graph.graph_id
        group = hashlib.blake2b(f"{basis}\0{node.parent}\0{env.id}".encode(), digest_size=8).hexdigest()
        turns.append(
            Turn(
                i,
                node,
                tuple(graph.path(node.id)),
                env,
                graph.generation(node.id),
                turn_policy(graph, node),
                group,
            )
        )
    return turns
