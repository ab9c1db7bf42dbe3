"""planners: turn a question (+ memory hits) into a ``Plan`` of sub-questions with budgets.

Imports only agentrt's shared vocabulary (types, protocols, errors, budget); the model is reached
through a ``complete(messages, params)`` callable the runtime passes in.
"""

from planners.heuristic import HeuristicPlanner
from planners.llm import LLMPlanner, plan_schema
from planners.plan import Plan, PlanError, Step, check_quality, validate_plan

__all__ = ["HeuristicPlanner", "LLMPlanner", "Plan", "PlanError", "Step", "check_quality", "plan_schema",
           "validate_plan"]
