"""CLI commands for looking at data: inspect, stats, validate, audit-template, formats."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the tool commands to the app."""
