"""The page's model select: every preset once, grouped by its Hub organisation."""

from __future__ import annotations

from html.parser import HTMLParser

from fastapi.testclient import TestClient

from app import core
from app.main import app


class _PresetSelect(HTMLParser):
    """The optgroups of the select named preset, each with its options' values."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = False
        self.groups: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "select":
            self.inside = found.get("name") == "preset"
        elif self.inside and tag == "optgroup":
            self.groups.append((found["label"] or "", []))
        elif self.inside and tag == "option":
            self.groups[-1][1].append(found["value"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self.inside = False


def test_the_presets_are_grouped_by_organisation_each_once():
    select = _PresetSelect()
    select.feed(TestClient(app).get("/").text)
    labels = [label for label, _ in select.groups]
    assert len(labels) == len(set(labels)) and {"meta-llama", "Qwen", "google", "EleutherAI"} <= set(labels)
    values = [value for _, group in select.groups for value in group]
    assert sorted(values) == sorted(core.model_presets())
    for label, group in select.groups:
        assert {core.get_preset(value).hub_id.split("/")[0] for value in group} == {label}  # type: ignore[union-attr]


def test_a_hub_id_preset_is_chosen_on_the_page():
    page = TestClient(app).get("/", params={"preset": "google/gemma-2-9b", "gpu": "h100-80gb"})
    assert page.status_code == 200
    assert '<option value="google/gemma-2-9b" selected>Gemma 2 9B</option>' in page.text
    assert "9,241,705,984" in page.text  # its parameters, as transformers counts Gemma2ForCausalLM from the config


def test_a_presets_hub_id_in_the_address_selects_the_preset():
    page = TestClient(app).get("/", params={"preset": "meta-llama/Meta-Llama-3-8B"})
    assert '<option value="llama-3-8b" selected>Llama 3 8B</option>' in page.text
