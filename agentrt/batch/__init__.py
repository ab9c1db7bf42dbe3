"""Batch runs: tasks, resume, and the local and Ray executors that evals and rollouts share."""
