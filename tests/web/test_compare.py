"""Comparing with a pinned setup: the pin's query, the differences at the peak, and messages for a bad pin."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlparse

from app import core
from app.web.compare import MAX_PIN_CHARS, MINUS, pin, pin_value, what_changed
from app.web.form import parse_form
from app.web.view import format_bytes


def _query(href: str) -> dict[str, str]:
    return dict(parse_qsl(urlparse(href).query, keep_blank_values=True))


def _pin(params: dict[str, str]):
    form = parse_form(params)
    return pin(params, form, form.unit)


def test_a_pin_holds_the_setups_query_and_is_never_empty():
    assert pin_value({}, "preset") == "source=preset"
    assert pin_value({"seq_len": "4096", "pin": "x", "fill": "preset"}, "preset") == "source=preset&seq_len=4096"
    nothing = _pin({"seq_len": "4096"})
    assert nothing.value is None and nothing.comparison is None and nothing.unpin_href is None
    assert _query(nothing.pin_href) == {"seq_len": "4096", "pin": "source=preset&seq_len=4096"}


def test_the_comparison_is_this_setup_minus_the_pinned_one_at_the_peak():
    params = {"seq_len": "8192", "gpu": "h100-80gb", "precision": "bf16", "pin": "seq_len=4096&gpu=h100-80gb&precision=bf16"}
    shown = _pin(params)
    pinned = parse_form(_query("/?" + params["pin"])).estimate
    current = parse_form(params).estimate
    assert pinned is not None and current is not None
    c = shown.comparison
    by_category = {row.category: row for row in c.rows}
    now, then = current.peak.breakdown["activations"], pinned.peak.breakdown["activations"]
    assert now is not None and then is not None
    activations = now - then
    assert activations > 0
    assert by_category["activations"].difference == "+" + format_bytes(activations, "GiB")
    assert by_category["activations"].sign == "more"
    assert by_category["weights"].difference == "same" and by_category["weights"].sign == "same"
    assert c.total.pinned == format_bytes(pinned.peak.bytes, "GiB") and c.total.current == format_bytes(current.peak.bytes, "GiB")
    assert c.total.difference == "+" + format_bytes(current.peak.bytes - pinned.peak.bytes, "GiB")
    assert c.changes == ("Sequence length: 4,096 → 8,192",) and not c.same
    # The bars share one scale: the larger peak (or the capacity) is the whole width.
    widths = [sum(float(s.width) for s in bar.segments) for bar in c.bars]
    assert max(widths) <= 100.001
    # Swapping makes the pinned setup current and pins this one.
    swapped = _query(shown.swap_href)
    assert swapped["seq_len"] == "4096" and _query("/?" + swapped["pin"])["seq_len"] == "8192"
    assert "pin" not in _query(shown.unpin_href)


def test_less_memory_reads_with_a_minus_sign_and_the_same_setup_as_no_change():
    params = {"seq_len": "1024", "pin": "seq_len=4096"}
    total = _pin(params).comparison.total
    assert total.sign == "less" and total.difference.startswith(MINUS)
    same = _pin({"seq_len": "4096", "pin": "seq_len=4096"}).comparison
    assert same.same and same.changes == ()


def test_only_changes_that_count_are_listed():
    def request(params):
        return parse_form(params).request
    # 1 GiB and 1,073,741,824 bytes are the same overhead; a ZeRO stage without data parallelism does nothing.
    assert what_changed(request({"framework_overhead_bytes": "1073741824", "zero_stage": "3"}),
                        request({"framework_overhead_bytes": "1 GiB"})) == ()
    assert what_changed(request({"data": "4", "zero_stage": "1"}), request({"data": "4", "zero_stage": "3"})) == (
        "ZeRO stage: 1 → 3",)
    assert what_changed(request({"optimizer": "adamw"}), request({"optimizer": "sgd"}))[0].startswith("Optimizer: AdamW → ")


def test_a_pin_that_cannot_be_estimated_is_a_message_not_an_error():
    for raw, expected in (("seq_len=abc", "Sequence length: Enter a number, e.g. 4096 or 4k"),
                          ("tensor=3", "divisible by the tensor-parallel degree (3)"),
                          ("gpu=not-a-gpu", "GPU:")):
        shown = _pin({"pin": raw})
        assert shown.comparison is None and shown.message.startswith("The pinned setup cannot be estimated:"), raw
        assert expected in shown.message, (raw, shown.message)
        assert shown.unpin_href == "/" and shown.value == raw
    long = _pin({"pin": "seq_len=" + "1" * MAX_PIN_CHARS})
    assert long.message.startswith("The pinned setup is too long") and long.value is None
    # Nonsense that is still a query: the defaults, compared.
    assert _pin({"pin": "%%%&&&==&x"}).comparison is not None


def test_with_the_current_setup_invalid_the_pin_is_kept_without_a_comparison():
    shown = _pin({"tensor": "3", "pin": urlencode({"seq_len": "4096"})})
    assert shown.value == "seq_len=4096" and shown.comparison is None and shown.message is None


def test_a_bare_parameter_count_compares_model_states_only():
    shown = _pin({"source": "params", "num_params": "7B", "pin": "source=params&num_params=13B"})
    categories = [row.category for row in shown.comparison.rows]
    assert "activations" not in categories and "weights" in categories
    assert core.CATEGORIES[0] == categories[0]
