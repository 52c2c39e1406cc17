"""The `optu` command's own behaviour, calling its main() in-process: a bad OPTU_* setting stops it at
once with one line naming the setting (a container would otherwise restart in a loop on a
traceback); bad input is one line naming the equation or field and exit 2; live progress only on a
terminal and never with --json; `optu debug` marks the first divergent kernel and refuses programs
whose signatures differ."""
from __future__ import annotations

import copy
import json
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from service.cli import main
from service.cli_debug import debug_table
from service.http.settings import get_settings
from wire.capture import capture


def test_an_invalid_setting_is_one_line_naming_it_and_a_nonzero_exit(monkeypatch, capsys):
    monkeypatch.setenv("OPTU_PORT", "abc")
    get_settings.cache_clear()
    try:
        assert main(["serve"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid setting OPTU_PORT='abc'" in err and "integer" in err


ARGS = (np.ones((8, 16), np.float32), np.ones((16, 4), np.float32))


def _layer(a, w):
    return jnp.tanh(a * 1.0) @ w


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _on_a_terminal(monkeypatch):
    """stderr reports a terminal, as when a person runs the command; called in the test's body, where
    sys.stderr is capsys's (during fixture setup it is another capture's)."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)


def test_optimize_on_a_terminal_shows_progress_on_stderr_and_the_summary_on_stdout(tmp_path, capsys, monkeypatch):
    _on_a_terminal(monkeypatch)
    assert main(["optimize", _write(tmp_path, "p.json", capture(_layer, *ARGS))]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("hardware")
    assert "optimize p.json" in err and "e-nodes" in err and "best" in err  # accumulated: in the last frame


def test_optimize_with_json_on_a_terminal_prints_only_the_json(tmp_path, capsys, monkeypatch):
    _on_a_terminal(monkeypatch)
    assert main(["optimize", _write(tmp_path, "p.json", capture(_layer, *ARGS)), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["validation"]["status"] in ("passed", "identical") and err == ""


def test_sweep_on_a_terminal_shows_the_grid_point(tmp_path, capsys, monkeypatch):
    _on_a_terminal(monkeypatch)
    path = _write(tmp_path, "p.json", capture(_layer, *ARGS))
    assert main(["sweep", path, "--param", "gemm.rows=64,128"]) == 0
    out, err = capsys.readouterr()
    assert "2 point(s)" in out and "sweep p.json" in err and "point 2/2" in err


def test_a_program_that_does_not_type_check_is_one_line_naming_the_equation_and_exit_2(tmp_path, capsys):
    program = capture(_layer, *ARGS)
    dot = next(i for i, e in enumerate(program["eqns"]) if e["op"] == "dot_general")
    program["eqns"][dot]["out"][0]["shape"] = [8, 5]
    assert main(["optimize", _write(tmp_path, "bad.json", program), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"optu: eqn {dot}")


def test_invalid_json_is_one_line_naming_where_and_exit_2(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text('{"format": ')
    assert main(["optimize", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid JSON at line 1" in err


def test_calibrate_checking_a_program_that_does_not_type_check_exits_2_before_measuring(tmp_path, capsys):
    program = capture(_layer, *ARGS)
    dot = next(i for i, e in enumerate(program["eqns"]) if e["op"] == "dot_general")
    program["eqns"][dot]["out"][0]["shape"] = [8, 5]
    profile = tmp_path / "cpu.toml"
    assert main(["calibrate", "--output", str(profile), "--check", _write(tmp_path, "bad.json", program)]) == 2
    assert capsys.readouterr().err.startswith(f"optu: eqn {dot}") and not profile.exists()


def test_a_sweep_over_an_unknown_field_is_one_line_naming_it_and_exit_2(tmp_path, capsys):
    assert main(["sweep", _write(tmp_path, "p.json", capture(_layer, *ARGS)), "--param", "gemm.nope=1,2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gemm.nope" in err


def test_the_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as done:
        main(["debug", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--bisect-rules" in out and "2  bad input" in out and "1  the work failed" in out


def test_debug_of_programs_with_different_signatures_exits_2_naming_the_mismatch(tmp_path, capsys):
    original = _write(tmp_path, "original.json", capture(_layer, *ARGS))
    other = _write(tmp_path, "other.json", capture(lambda a, w: _layer(a, w[:, :2]), *ARGS))
    assert main(["debug", original, other]) == 2
    err = capsys.readouterr().err
    assert err == "optu: optimized.outputs[0]: float32[8, 2] where the original has float32[8, 4]\n"


@pytest.mark.slow  # the debugger runs both programs in float64
def test_debug_of_a_broken_program_exits_1_marking_the_kernel_that_computes_the_wrong_op(tmp_path, capsys):
    program = capture(_layer, *ARGS)
    assert main(["optimize", _write(tmp_path, "p.json", program), "--json"]) == 0
    response = json.loads(capsys.readouterr().out)
    broken = copy.deepcopy(response)
    tanh = next(e for e in broken["program"]["eqns"] if e["op"] == "tanh")
    tanh["op"] = "sin"
    for kernel in broken["kernels"]:
        kernel["ops"] = ["sin" if op == "tanh" else op for op in kernel["ops"]]
    assert main(["debug", _write(tmp_path, "p.json", program), _write(tmp_path, "opt.json", broken)]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "FIRST DIVERGENT" in line)
    assert "sin" in row and "validation: failed" in out


def test_a_bisection_out_of_time_is_shown_as_rules_to_blame_not_as_no_failure():
    report = {"kernels": [], "first_divergent": None, "summary": "every kernel agrees",
              "validation": {"status": "failed", "reason": "output 0 differs"},
              "bisection": {"status": "time_limit", "rules": ["mul-one", "add-zero"], "configurations": 3,
                            "kernel": None}}
    last = debug_table(report).splitlines()[-1]
    assert last.startswith("bisect: mul-one, add-zero make validation fail") and "out of time" in last
