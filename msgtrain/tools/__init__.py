"""Tools people look at: ``audit-template``, ``stats``, ``validate``, ``inspect`` (CLI in ``msgtrain.cli_tools``).

audit.py + battery.py (probe a chat template) · stats.py (an exported dataset in numbers) · validate_cmd.py
(readers + validation rules, no conversion) · inspect_cmd.py, tree.py, sample_view.py, html_page.py (a graph and
its samples, in a terminal or a self-contained HTML page) · tokenizer.py (local-only tokenizer loading).
They sit on top of the stages and import them; no stage imports them.
"""
