"""The htmx update sends only what differs from the setup the page shows (``HX-Current-URL``), and everything
where that setup cannot be trusted to be on the page."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.web import update
from app.web.pages import rendered_update

HX = {"HX-Request": "true"}
BASE = {"preset": "llama-3-8b", "seq_len": "4096"}
ORIGIN = "http://testserver"
OOB = ' hx-swap-oob="true"'
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app)


class _Elements(HTMLParser):
    """Every element with an id: its outer HTML, and whether it sits at the top level of the markup."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=False)
        self.html = html
        self.lines = [0]
        for line in html.splitlines(keepends=True):
            self.lines.append(self.lines[-1] + len(line))
        self.open: list[tuple[str, str | None, int]] = []
        self.outer: dict[str, str] = {}
        self.top: list[str] = []
        self.feed(html)
        self.close()

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.lines[line - 1] + column

    def handle_starttag(self, tag, attrs):
        ident = dict(attrs).get("id")
        start = self._offset()
        if tag in VOID:
            self._found(ident, start, start + len(self.get_starttag_text() or ""), depth=len(self.open))
        else:
            self.open.append((tag, ident, start))

    def handle_startendtag(self, tag, attrs):
        start = self._offset()
        self._found(dict(attrs).get("id"), start, start + len(self.get_starttag_text() or ""), depth=len(self.open))

    def handle_endtag(self, tag):
        while self.open:
            name, ident, start = self.open.pop()
            if name == tag:
                self._found(ident, start, self.html.index(">", self._offset()) + 1, depth=len(self.open))
                return

    def _found(self, ident: str | None, start: int, end: int, *, depth: int) -> None:
        if ident is None:
            return
        assert ident not in self.outer, f"id {ident} twice"
        self.outer[ident] = self.html[start:end]
        if depth == 0:
            self.top.append(ident)


def _get(client: TestClient, params: dict[str, str], shown: str | bytes | None = None, **headers: str):
    sent = {name.encode(): value.encode() for name, value in (HX | headers).items()}
    if shown is not None:
        sent[b"HX-Current-URL"] = shown if isinstance(shown, bytes) else shown.encode()
    return client.get("/", params=params, headers=sent)


def _url(params: dict[str, str]) -> str:
    return f"{ORIGIN}/?{urlencode(params)}"


def _applied(shown: _Elements, changes: _Elements) -> dict[str, str]:
    """What htmx makes of the page's regions (the top-level elements of a whole update) with `changes` swapped in."""
    regions = {ident: shown.outer[ident] for ident in shown.top}
    for ident in changes.top:
        html = changes.outer[ident]
        if ident in regions or ident not in shown.outer:
            regions[ident] = html
            continue
        assert html.count(OOB) >= 1 and ident not in changes.outer[changes.top[0]], ident
        inner = html.replace(OOB, "", 1)
        holder = next(region for region in regions if shown.outer[ident] in regions[region])
        assert regions[holder].count(shown.outer[ident]) == 1
        regions[holder] = regions[holder].replace(shown.outer[ident], inner)
    return regions


@pytest.mark.parametrize("change", [{"seq_len": "4104"}, {"optimizer": "sgd"}, {"gpu": "a100-40gb"}, {"data": "8"},
                                    {"precision": "fp32"}, {"unit": "GB"}, {"source": "custom"}])
def test_a_change_sends_fewer_fragments_and_the_rest_is_what_the_page_shows(client, change):
    before, after = BASE, BASE | change
    whole_before, whole_after = _get(client, before), _get(client, after)
    diff = _get(client, after, _url(before))
    assert diff.status_code == whole_after.status_code == 200 and "hx-reswap" not in diff.headers
    shown, whole, changes = _Elements(whole_before.text), _Elements(whole_after.text), _Elements(diff.text)
    assert len(changes.top) < len(whole.top) and len(diff.content) < len(whole_after.content)
    assert changes.top[0] == whole.top[0] == "summary" and changes.outer["summary"] == whole.outer["summary"]
    # Every region of the whole update is, once the changes are swapped in, what the page would hold.
    applied = _applied(shown, changes)
    for ident in whole.top:
        if ident in applied:
            assert applied[ident] == whole.outer[ident], ident
        else:  # a field's message that the page holds inside a fieldset
            assert sum(whole.outer[ident].replace(OOB, "", 1) in html for html in applied.values()) == 1, ident
    # What was left out is byte for byte the previous setup's.
    for ident in set(whole.top) - set(changes.top):
        if not any(ident != sent and sent in whole.outer[ident] for sent in changes.top):
            assert whole.outer[ident] == shown.outer[ident], ident


def test_a_one_field_change_leaves_out_the_fields_and_messages(client):
    diff = _Elements(_get(client, BASE | {"seq_len": "4104"}, _url(BASE)).text)
    assert "arch-fields" not in diff.top and "dtype-fields" not in diff.top
    assert not [ident for ident in diff.top if ident.startswith("error-")]
    # Of the explanation, only the groups whose numbers moved.
    assert "explanation" not in diff.top
    assert "explain-activations-group" in diff.top and "explain-weights-group" not in diff.top


def test_the_same_setup_again_sends_only_the_summary(client):
    diff = _get(client, BASE, _url(BASE))
    assert _Elements(diff.text).top == ["summary"]


@pytest.mark.parametrize("shown", [
    None, "", "not a url", "http://[::1", "/?seq_len=4096", f"{ORIGIN}/docs?seq_len=4096",
    f"{ORIGIN}/import", "http://elsewhere.example/?preset=llama-3-8b&seq_len=4096",
    "ftp://testserver/?preset=llama-3-8b&seq_len=4096", f"{ORIGIN}/?preset=llama-3-8b&seq_len=4096&x=\u00e9".encode(),
])
def test_without_an_address_of_this_page_everything_comes(client, shown):
    after = BASE | {"seq_len": "4104"}
    assert _get(client, after, shown).text == _get(client, after).text


def test_after_invalid_input_the_page_is_not_what_its_address_says_so_everything_comes(client):
    """An invalid change moves the address on (htmx pushes it before it learns there is nothing to swap)
    while the last good result stays: the next answer cannot lean on that address."""
    invalid = BASE | {"tensor": "3"}
    assert _get(client, invalid, _url(BASE)).headers["hx-reswap"] == "none"
    after = BASE | {"seq_len": "4104"}
    assert _get(client, after, _url(invalid)).text == _get(client, after).text


def test_invalid_input_sends_only_its_message_and_the_notice(client):
    response = _get(client, BASE | {"tensor": "3"}, _url(BASE))
    assert response.headers["hx-reswap"] == "none"
    assert _Elements(response.text).top == ["results-status", "error-tensor"]
    assert "Out of date" in response.text and "divisible by the tensor-parallel degree (3)" in response.text


def test_the_address_is_compared_with_the_host_not_a_forwarded_one(client):
    """X-Forwarded-Host reaches the page only as the Host, from a proxy the server trusts (app.serve)."""
    shown = "https://calc.example.com/?" + urlencode(BASE)
    after = BASE | {"seq_len": "4104"}
    whole = _get(client, after).text
    assert _get(client, after, shown).text == whole
    assert _get(client, after, shown, **{"X-Forwarded-Host": "calc.example.com"}).text == whole
    assert len(_get(client, after, shown, Host="calc.example.com").text) < len(whole)


def test_the_answer_varies_on_the_address_and_never_carries_the_marks(client):
    for response in (_get(client, BASE), _get(client, BASE | {"seq_len": "4104"}, _url(BASE)), client.get("/")):
        assert "HX-Current-URL" in response.headers["vary"]
        for mark in (update.CUT, update.PART, update.END, "<!--part"):
            assert mark not in response.text


def test_every_part_sent_alone_targets_an_element_of_the_page(client):
    page_ids = set(_Elements(client.get("/?" + urlencode(BASE)).text).outer)
    for change in ({"seq_len": "4104"}, {"optimizer": "sgd"}, {"data": "8"}, {"gpu": "a100-40gb"}):
        diff = _Elements(_get(client, BASE | change, _url(BASE)).text)
        assert set(diff.top) <= page_ids, change


def test_head_answers_as_get_does(client):
    head = client.head("/", params=BASE | {"seq_len": "4104"}, headers=HX | {"HX-Current-URL": _url(BASE)})
    assert head.status_code == 200 and head.content == b"" and "HX-Current-URL" in head.headers["vary"]


def test_a_rendered_update_splits_into_the_summary_and_fragments_with_parts():
    rendered = rendered_update(urlencode(BASE))
    assert rendered.swapped and rendered.main.startswith('<div id="summary"')
    fragments = {fragment.id: fragment for fragment in rendered.fragments}
    assert list(fragments)[:3] == ["verdict-bar", "answers", "compare"]
    explanation = fragments["explanation"]
    assert "explain-weights-group" in explanation.parts and "accuracy" in explanation.parts
    for part_id, html in explanation.parts.items():
        assert re.match(rf'<\w+{OOB} [^>]*id="{part_id}"', html), part_id
        assert html.replace(OOB, "", 1) in explanation.html
        assert f"<!--part {part_id}-->" in explanation.frame and html.replace(OOB, "", 1) not in explanation.frame
    assert set(fragments["breakdown"].parts) == {"unit-switch", "bar-1", "bar-2", "legend", "per-param"}
    assert set(fragments["sweeps"].parts) == {"seq-chart", "data-chart"}
    assert fragments["timeline"].parts == {}
    assert rendered.whole == rendered.main + "".join(fragment.html for fragment in rendered.fragments)


def test_a_part_without_an_id_is_refused():
    with pytest.raises(ValueError, match="without an id"):
        update.split(f'<div id="summary"></div>{update.CUT}<div id="a">{update.PART}<p>x</p>{update.END}</div>',
                     swapped=True)


@pytest.mark.parametrize(("url", "query"), [
    ("http://testserver/?a=1&b=2", "a=1&b=2"),
    ("http://testserver/", ""),
    ("http://testserver/?a=1#results", "a=1"),
    ("http://testserver:8000/?a=1", None),
    ("http://testserver/?a=1 b", None),
    ("javascript:alert(1)", None),
])
def test_the_address_is_read_only_where_it_is_this_page(url, query):
    assert update.shown_query(url, path="/", host="testserver") == query


def test_a_paste_that_cannot_be_read_swaps_only_the_paste_box(client):
    response = client.post("/import", data={"config_text": "{not json", "config_kind": "auto", "source": "preset",
                                            "seq_len": "4096"}, headers=HX)
    assert response.status_code == 200 and "hx-push-url" not in response.headers
    assert response.headers["hx-retarget"] == "#paste" and response.headers["hx-reselect"] == "#paste"
    assert 'id="paste"' in response.text


def test_update_gzipped_once_and_the_same_as_sent_plain(client: TestClient) -> None:
    """A client that takes gzip gets the update compressed (kept so, per pair of setups); decompressed it is the
    plain update byte for byte, and caches are told that the encoding varies."""
    query = BASE | {"micro_batch_size": "3"}
    current = f"{ORIGIN}/?{urlencode(BASE)}"
    plain = client.get("/", params=query, headers=HX | {"HX-Current-URL": current, "Accept-Encoding": "identity"})
    packed = client.get("/", params=query, headers=HX | {"HX-Current-URL": current, "Accept-Encoding": "gzip"})
    assert plain.status_code == packed.status_code == 200
    assert "content-encoding" not in plain.headers
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.content == plain.content  # the client decoded it: the same markup
    for response in (plain, packed):
        assert "Accept-Encoding" in response.headers["vary"]
        assert "HX-Current-URL" in response.headers["vary"]
    head = client.head("/", params=query, headers=HX | {"HX-Current-URL": current, "Accept-Encoding": "gzip"})
    assert head.status_code == 200 and head.content == b""
