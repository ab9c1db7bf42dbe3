"""Talk to `agentrt serve` with the official openai client (start the server first:
`agentrt serve --port 8000`; AGENTRT_URL overrides the address)."""

import os

from openai import OpenAI

client = OpenAI(base_url=os.environ.get("AGENTRT_URL", "http://127.0.0.1:8000/v1"), api_key="unused")

resp = client.chat.completions.create(
    model="agentrt",
    messages=[{"role": "user", "content": "What is the capital of Italy?"}],
    extra_body={"budget": 300},  # agentrt's own fields: budget, route, samples
)
print(resp.choices[0].message.content)
print("agentrt:", resp.model_extra["agentrt"])  # route, reason, status, trajectory_id, budget

stream = client.chat.completions.create(
    model="agentrt", stream=True, extra_body={"budget": 300, "route": "direct"},
    stream_options={"include_agentrt_events": True},  # agentrt's run events as choices-less chunks
    messages=[{"role": "user", "content": "Name a fruit."}],
)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
    elif chunk.model_extra.get("agentrt_event"):
        print(f"[{chunk.model_extra['agentrt_event']['type']}]", end=" ", flush=True)
print()
