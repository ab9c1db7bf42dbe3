"""Async runs with per-run overrides: route, budget, an event hook and callbacks."""

import asyncio

from agentrt import Agent


async def main() -> None:
    agent = Agent()
    seen: list[str] = []
    results = await asyncio.gather(
        agent.arun("Name a primary colour.", route="direct", budget=200, on_event=lambda e: seen.append(e.type)),
        agent.arun("Is 7 a prime number?", route="reason", budget=400, thinking_cap=32,
                   approve_plan=lambda plan: True,  # consulted by the plan route before it runs a plan
                   ask_user=lambda question: "no preference"),  # answers the ask_user tool
    )
    for r in results:
        print(f"[{r.route}] {r.answer!r} ({r.usage.total_tokens}/{r.budget} tokens, {r.status})")
    print("events of the first run:", sorted(set(seen)))


asyncio.run(main())
