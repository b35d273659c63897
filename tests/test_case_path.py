"""case_path's expansion: every combination of the parameter values, less those ``unless`` names."""

from __future__ import annotations

from fixtures.case_path import expand


def test_every_combination_less_those_left_out() -> None:
    names, rows, ids = expand("states/{state}/{op}", ["local"], {"state": ["a", "root"], "op": ["read", "mkdir"]},
                              unless=lambda state, op: state == "root" and op == "mkdir")  # fmt: skip
    assert names == ["backend", "state", "op"]
    assert ids == ["local/states/a/read", "local/states/a/mkdir", "local/states/root/read"]
    assert rows[-1] == ("local", "root", "read")


def test_without_unless_the_whole_product() -> None:
    _, rows, _ = expand("x/{a}/{b}", ["synth", "local"], {"a": [1, 2], "b": [3]})
    assert len(rows) == 4
