"""The run's declared inputs on the page: each has a control, counts under the conditions the page shows it under,
and one the template does not place still reaches the page, under Advanced."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.web import form, pages
from app.web.labels import DECLARED_CONTROLS

client = TestClient(app)
TEMPLATE = form._PAGE.read_text(encoding="utf-8")
_CONTROL = re.compile(r'm\.(?:text|select|checkbox|radios)\("(\w+)"')
_SHOWN = re.compile(r'm\.shown\((?:"([^"]+)"|(\w+))\)')


def _template_conditions() -> dict[str, tuple[str, ...]]:
    """Each control the template places, with the conditions of the fieldsets around it, outermost first."""
    variables = {"loop_shown": form.LOOP_SHOWN}
    stack: list[str | None] = []
    found: dict[str, tuple[str, ...]] = {}
    for line in TEMPLATE.splitlines():
        if "<fieldset" in line:
            shown = _SHOWN.search(line)
            stack.append(None if shown is None else shown[1] or variables[shown[2]])
        for control in _CONTROL.findall(line):
            found[control] = tuple(condition for condition in stack if condition)
        stack = stack[:len(stack) - line.count("</fieldset>")] if "</fieldset>" in line else stack
    return found


def test_the_table_of_conditions_is_the_templates():
    placed = _template_conditions()
    for control in DECLARED_CONTROLS:
        if control in placed:
            assert placed[control] == form.SHOWN_WHEN.get(control, ()), control


def test_every_condition_names_a_declared_control():
    assert set(form.SHOWN_WHEN) <= set(DECLARED_CONTROLS)


@pytest.mark.parametrize("control", DECLARED_CONTROLS)
def test_every_declared_input_has_a_control_on_the_page(control):
    assert f'name="{control}"' in client.get("/").text


def test_a_control_the_template_does_not_place_is_shown_under_advanced(monkeypatch):
    # As a new declared integer would be: here an existing one, listed as not placed.
    monkeypatch.setattr(pages, "EXTRA_CONTROLS", (("loss_chunks", "int"), ("loop", "choice")))
    page = client.get("/").text
    advanced = page.index("<summary>Advanced</summary>")
    for control in ("loss_chunks", "loop"):
        assert page.count(f'id="f-{control}"') == 2  # where the template places it, and again under Advanced
        assert page.rindex(f'id="f-{control}"') > advanced


def test_a_hidden_control_does_not_count():
    # Recomputing every 2nd layer is read only under full recomputation; hidden, the API's default stands.
    parsed = form.parse_form({"recompute_every": "2", "activation_checkpointing": "none"})
    assert parsed.ok and parsed.job is not None and parsed.job.training.recompute_every == 1
    parsed = form.parse_form({"recompute_every": "2", "activation_checkpointing": "full"})
    assert parsed.ok and parsed.job is not None and parsed.job.training.recompute_every == 2
