"""CLI command groups: one module each, each with ``register(subparsers)``."""
