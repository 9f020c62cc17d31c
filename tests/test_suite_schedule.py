"""How the suite is spread over test workers (tests/conftest.py): the files that share a session's Ray cluster are
scheduled as one unit, so that one worker starts one cluster."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import RAY_CLUSTER_FILES

TESTS = Path(__file__).resolve().parent


def test_every_test_file_that_uses_the_ray_cluster_is_scheduled_with_the_others() -> None:
    users = {
        path.name
        for path in TESTS.glob("test_*.py")
        if re.search(r"\bray_cluster\b", path.read_text(encoding="utf-8")) and path.name != Path(__file__).name
    }
    assert users == set(RAY_CLUSTER_FILES), "list the files that use ray_cluster in conftest.RAY_CLUSTER_FILES"
