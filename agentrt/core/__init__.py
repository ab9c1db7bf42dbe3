"""The core: agentrt's small shared vocabulary (types, errors, protocols, budget, config, tokens).

It imports nothing else of ours; every other layer and room (planners/, memory/, tools/) may import it.
"""
