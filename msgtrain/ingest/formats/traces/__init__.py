"""Traces and spans: OpenTelemetry GenAI spans and the other tracing conventions."""
