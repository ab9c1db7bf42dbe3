"""Ask one question on the embedded model (SmolLM2-135M, CPU) within a 300-token budget."""

from agentrt import Agent

agent = Agent()  # settings from $AGENTRT_HOME/config.toml, env, or keyword overrides: Agent(budget=512)
result = agent.run("What is the capital of France?", budget=300)
print(result.answer)
print(f"route={result.route} ({result.reason}) tokens={result.usage.total_tokens}/{result.budget} "
      f"trajectory={result.trajectory_id}")
