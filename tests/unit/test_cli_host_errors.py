"""A host that cannot run the request (not root) exits 1, as the CLI's doc says; bad
input exits 2. Passes once ``run`` and ``doctor`` raise HostError for a non-root user."""

from __future__ import annotations

import pytest

from testbed.core import cli


@pytest.mark.parametrize("argv", [["doctor"], ["run", "agents-vs-training", "--duration", "5"]])
def test_not_root_is_a_host_problem(argv, monkeypatch, capsys):
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("testbed: ") and "root" in err and err.count("\n") == 1
