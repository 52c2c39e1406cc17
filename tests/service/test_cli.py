"""The `optu` command's own behaviour: a bad OPTU_* setting stops it at once with one line naming
the setting (a container would otherwise restart in a loop on a traceback)."""
from __future__ import annotations

from service.cli import main
from service.http.settings import get_settings


def test_an_invalid_setting_is_one_line_naming_it_and_a_nonzero_exit(monkeypatch, capsys):
    monkeypatch.setenv("OPTU_PORT", "abc")
    get_settings.cache_clear()
    try:
        assert main(["serve"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid setting OPTU_PORT='abc'" in err and "integer" in err
