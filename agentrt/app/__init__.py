"""The app layer: the SDK (agent, session, events), the CLI and its commands, the REPL, the server, tracing."""
