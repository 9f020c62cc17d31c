"""``python -m msgtrain``: the ``msgtrain`` command."""

from msgtrain.cli import run

if __name__ == "__main__":
    run()
