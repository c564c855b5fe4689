"""Everything that chooses actions, behind one interface (:mod:`cube_jax.agents.base`).

Batched JAX policies (:class:`RandomPolicy`, :class:`HeuristicPolicy`, :class:`TeamPolicy`,
trained checkpoints) act for every agent of thousands of worlds at once; decision makers
(:class:`Agent`: the planners, scripted agents, policies inside mixed teams, language-model
agents and people) act for one agent each in the CPU episode loop.
"""
from cube_jax.agents.base import (
    Agent,
    BatchedPolicy,
    CallLedger,
    Decision,
    DecisionContext,
    Message,
    ModelCall,
    NegotiationView,
    OpenLedger,
    OutgoingMessage,
    PartnerState,
    Plan,
    PlanProgress,
    Purpose,
    Reason,
    Stage,
    TaskEvidence,
    TopologyView,
    fallback_plan,
    idle_plan,
)
from cube_jax.agents.negotiator import NegotiatorAgent, negotiator_team
from cube_jax.agents.planners import HeuristicAgent, TeamAgent, TeamBrain, heuristic_team, team_planner_team
from cube_jax.agents.policies import HeuristicPolicy, PolicyAgent, RandomPolicy, TeamPolicy, policy_agents
from cube_jax.agents.scripted import ScriptedAgent
from cube_jax.agents.views import BlockView, FaceView, WorldView

__all__ = [
    "Agent",
    "BatchedPolicy",
    "BlockView",
    "CallLedger",
    "Decision",
    "DecisionContext",
    "FaceView",
    "HeuristicAgent",
    "HeuristicPolicy",
    "Message",
    "ModelCall",
    "NegotiationView",
    "NegotiatorAgent",
    "OpenLedger",
    "OutgoingMessage",
    "PartnerState",
    "Plan",
    "PlanProgress",
    "PolicyAgent",
    "Purpose",
    "RandomPolicy",
    "Reason",
    "ScriptedAgent",
    "Stage",
    "TaskEvidence",
    "TeamAgent",
    "TeamBrain",
    "TeamPolicy",
    "TopologyView",
    "WorldView",
    "fallback_plan",
    "heuristic_team",
    "negotiator_team",
    "idle_plan",
    "policy_agents",
    "team_planner_team",
]
