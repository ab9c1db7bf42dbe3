"""Training from trajectories: GRPO on the policy (``grpo``) and the learned router (``router``)."""
