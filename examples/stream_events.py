"""Watch a run as typed events: route decision, each model call, the budget, the answer."""

from agentrt import Agent
from agentrt.core.events import Answer, BudgetUpdate, RouteDecided, RunStarted, StepFinished, StepStarted

agent = Agent()
for event in agent.stream("What is 17 + 25?", budget=300, thinking_cap=32):
    if isinstance(event, RunStarted):
        print(f"run {event.run_id} (budget {event.budget})")  # route "": the router decides next
    elif isinstance(event, RouteDecided):
        print(f"route: {event.route} ({event.reason})")
    elif isinstance(event, StepStarted):
        print(f"  {event.name}: started ({event.prompt_tokens} prompt tokens)")
    elif isinstance(event, StepFinished):
        print(f"  {event.kind} {event.name}: done in {event.latency_s:.2f}s")
    elif isinstance(event, BudgetUpdate):
        print(f"  budget: {event.spent}/{event.total}")
    elif isinstance(event, Answer):
        print("answer:", event.answer)
