"""Environments a trainer can step (OpenEnv's reset / step / state): ``suite:NAME``, ``search:CORPUS``, ``strategy``.

See docs/environments.md."""
