"""The report's Markdown as HTML: escaped first, then only the forms the report uses."""

from __future__ import annotations

from app.web.markdown import to_html


def test_escapes_before_marking_up():
    html = to_html("A <script>alert(1)</script> & `x < y` **bold** *em* [link](https://example.org/a)")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<code>x &lt; y</code>" in html and "<strong>bold</strong>" in html and "<em>em</em>" in html
    assert '<a href="https://example.org/a">link</a>' in html


def test_unsafe_link_targets_stay_text():
    html = to_html("[x](javascript:alert(1)) ![y](data:image/svg+xml,abc)")
    assert "href" not in html and "<img" not in html


def test_headings_tables_lists_and_images():
    text = "# Title here\n\nPara one\ncontinues.\n\n| a | b |\n| --- | ---: |\n| 1 | `2` |\n\n- one\n- two\n\n![chart](c.svg)\n"
    html = to_html(text, url=lambda target: "/r/" + target)
    assert '<h1 id="title-here">Title here</h1>' in html
    assert "<p>Para one continues.</p>" in html
    assert '<th scope="col">a</th>' in html and "<td><code>2</code></td>" in html and "---" not in html
    assert "<ul><li>one</li><li>two</li></ul>" in html
    assert '<img src="/r/c.svg" alt="chart" loading="lazy">' in html
