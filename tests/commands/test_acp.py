"""`crow acp`'s command: what it checks before it serves an editor (crow's app in this process, `crow_here`)."""

from __future__ import annotations

import pytest

from tests.support import crow_here


def test_yes_with_the_read_only_policy_is_a_usage_error_before_any_session(capsys: pytest.CaptureFixture[str]) -> None:
    # `crow acp --approval read-only --yes` started, then failed every session/new with -32603: the start and
    # each session decide it in one place (`approval.start_policy`)
    code = crow_here("acp", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-test", "--model", "m",
                     "--approval", "read-only", "--yes")
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "--yes conflicts with the approval policy 'read-only'" in err
