"""A multi-turn conversation: each turn sees the earlier ones (within half of its budget)."""

from agentrt import Agent

chat = Agent().session(budget=400)
print(chat.ask("My name is Ada and I like chess.", route="direct").answer)
reply = chat.ask("What game do I like?", route="direct")
print(reply.answer)
print(f"{len(chat.turns)} turns remembered; the last one sent {reply.usage.prompt_tokens} prompt tokens")
# the next turn gets the kept turns as messages (history), not folded into its question
print([f"{m.role}: {m.content}" for m in chat.history_for()])
