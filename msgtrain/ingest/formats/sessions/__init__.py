"""Agent sessions: coding agents' and agent frameworks' own session logs."""
