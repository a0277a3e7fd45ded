"""The headless-browser checker (tests/browser.py) itself: it must fail a page with a script error, a console
error, an image that does not decode or a request outside the file, and pass a good page with a real screenshot.
Chromium is installed by scripts/install.sh; without it these tests fail (no skip: the HTML reports are unchecked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import PageCheck, check_page

GOOD = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>t</title></head><body><h1>Report</h1>" \
       "<p>figures</p>{extra}</body></html>"
# 1x1 PNG, valid
PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMI"
         "QAAAABJRU5ErkJggg==")


def page(tmp_path: Path, extra: str = "") -> PageCheck:
    p = tmp_path / "report.html"
    p.write_text(GOOD.format(extra=extra))
    return check_page(p)


def test_a_good_page_passes_with_a_real_screenshot(tmp_path: Path) -> None:
    check = page(tmp_path, f"<img alt='plot' src='{PIXEL}'><script>document.title = 'ok';</script>")
    assert check.problems() == [], check.problems()
    w, h = check.screenshot_size
    assert w >= 800 and h >= 600 and len(check.screenshot) > 2000


@pytest.mark.parametrize(("extra", "words"), [
    ("<script>undefinedFunction();</script>", "undefinedFunction is not defined"),
    ("<script>window.addEventListener('load', () => { null.x; });</script>", "TypeError"),
    ("<script>setTimeout(() => { throw new Error('late boom'); }, 0);</script>", "late boom"),
    ("<script>console.error('drawing failed');</script>", "drawing failed"),
    ("<script>function (</script>", "SyntaxError"),
])
def test_a_script_error_fails_the_page(tmp_path: Path, extra: str, words: str) -> None:
    problems = page(tmp_path, extra).problems()
    assert any(p.startswith("script error:") and words in p for p in problems), problems


def test_an_image_that_does_not_decode_fails_the_page(tmp_path: Path) -> None:
    problems = page(tmp_path, "<img alt='sweep plots' src='data:image/png;base64,AAAA'>").problems()
    assert "image not rendered: sweep plots" in problems, problems


def test_a_request_outside_the_file_fails_the_page(tmp_path: Path) -> None:
    # loopback port 9 (discard): nothing leaves the machine, the request is still made and reported
    problems = page(tmp_path, "<img alt='remote' src='http://127.0.0.1:9/x.png'>").problems()
    assert "request outside the file: http://127.0.0.1:9/x.png" in problems, problems


def test_an_empty_page_fails() -> None:
    assert "no text rendered" in PageCheck(screenshot=b"").problems()
    assert any(p.startswith("implausible screenshot") for p in PageCheck(text_chars=5).problems())
