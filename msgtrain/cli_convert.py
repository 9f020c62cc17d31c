"""CLI command ``convert``: logs → token-exact training data."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the convert command to the app."""
