"""Every built page, opened in headless Chromium with nothing but the book's own server.

Each page must load with no script errors, no failed or 4xx/5xx requests and no request that
leaves 127.0.0.1; its maths must be typeset by MathJax 3, its images decoded and its widgets
rendered. In a 1,300-pixel-wide window no line of code or printed output may wrap onto a second
screen line (`book/static/xfl.css` keeps each whole: a long one scrolls inside its own box), no
table may break a word or be cut off, and the page itself may not scroll sideways (nor at phone
width). The search box must find a chapter. Chapter 1's page is saved as a screenshot
under `_build/screenshots/` for the README.
"""

from __future__ import annotations

import os
import re
import shutil
from functools import partial
from http.server import SimpleHTTPRequestHandler
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from conftest import REPO_ROOT, numbered_files, toc_files
from helpers import local_http_server

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1300, "height": 860}  # a laptop; sideways scrolling checked at this width
PHONE = {"width": 390, "height": 844}  # a phone: the page itself must not scroll sideways either
SCREENSHOT = REPO_ROOT / "_build" / "screenshots" / "chapter.png"
EXTRA_PAGES = ["index", "genindex", "search"]  # pages Sphinx writes besides the toc's
TYPESET_TIMEOUT_MS = 15_000

# Errors every Jupyter Book 1 page reports although nothing a reader sees is wrong. Exact texts
# only: anything else fails the page.
ALLOWED_PAGE_ERRORS = frozenset({
    # sphinx-thebe (always loaded by JB1) writes its config snippet twice; thebe is not used.
    "Identifier 'THEBE_JS_URL' has already been declared",
    # The widget manager calls MathJax 2's MathJax.Hub.Queue; the book runs MathJax 3, and the
    # widgets render regardless (checked on a page with a slider and a dropdown).
    "Cannot read properties of undefined (reading 'Queue')",
})
# The widget manager asks for its icon fonts relative to the page (<chapter>/@jupyter-widgets/
# html-manager/dist/<hash>.woff2 ...), where the offline book does not serve them (it serves them
# from _static). Widgets render without them; only these exact font files may fail.
WIDGET_ICON_FONT = re.compile(r"/@jupyter-widgets/html-manager/dist/[0-9a-f]{20}\.(woff2|woff|ttf|eot|svg)$")
ALLOWED_CONSOLE_ERRORS = frozenset({
    # pydata-sphinx-theme on a first visit, before a light/dark mode is stored.
    "Got invalid theme mode: . Resetting to auto.",
})


def chromium_path() -> str:
    """Chromium from XFL_CHROMIUM, else from PATH (`make browser-deps` installs it)."""
    path = os.environ.get("XFL_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not path:
        pytest.fail("no Chromium found: run `make browser-deps` or set XFL_CHROMIUM", pytrace=False)
    return path


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # keep the test output clean
        pass


@pytest.fixture(scope="module")
def book_url(built_book):
    """The built HTML, served on 127.0.0.1 from a thread of this test process."""
    with local_http_server(partial(QuietHandler, directory=str(built_book.html))) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class WatchedPage:
    """A browser tab that records every problem a reader could notice, offline."""

    def __init__(self, browser):
        self.context = browser.new_context(viewport=VIEWPORT)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.context.route("**/*", self._only_local)
        self.page.on("pageerror", self._page_error)
        self.page.on("console", self._console)
        self.page.on("requestfailed", self._failed)
        self.page.on("response", self._response)

    def _only_local(self, route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.problems.append(f"request leaves 127.0.0.1: {route.request.url}")
            route.abort()

    def _page_error(self, error):
        if error.message not in ALLOWED_PAGE_ERRORS:
            self.problems.append(f"page error: {error.message!r}")

    def _console(self, message):
        if WIDGET_ICON_FONT.search(message.location.get("url", "")):
            return
        if message.type == "error" and message.text not in ALLOWED_CONSOLE_ERRORS:
            self.problems.append(f"console error: {message.text!r}")

    def _failed(self, request):
        if WIDGET_ICON_FONT.search(request.url):
            return
        if urlsplit(request.url).hostname == "127.0.0.1":  # outside ones are reported above
            self.problems.append(f"failed request: {request.url} ({request.failure})")

    def _response(self, response):
        if response.status >= 400 and not WIDGET_ICON_FONT.search(response.url):
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def open(self, url: str):
        self.page.goto(url, wait_until="networkidle")
        return self.page

    def close(self):
        self.context.close()


@pytest.fixture
def tab(browser):
    watched = WatchedPage(browser)
    yield watched
    watched.close()


def unfinished_maths(page) -> list[str]:
    """Wait for MathJax; list the maths it did not typeset (or typeset as an error)."""
    if page.locator(".math").count() == 0:
        return []
    try:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                               timeout=TYPESET_TIMEOUT_MS)
    except PlaywrightTimeout:
        return ["MathJax never started: the page's maths is raw LaTeX"]
    page.evaluate("() => MathJax.startup.promise")
    return page.evaluate("""() => [...document.querySelectorAll('.math')]
        .filter(m => !m.querySelector('mjx-container') || m.querySelector('mjx-merror'))
        .map(m => 'not typeset: ' + m.textContent.slice(0, 80))""")


def broken_images(page) -> list[str]:
    """Sources of images that did not decode (lazy ones are loaded first)."""
    return page.evaluate("""async () => {
        const images = [...document.images];
        images.forEach(img => { img.loading = 'eager'; });
        await Promise.all(images.map(img => img.decode().catch(() => null)));
        return images.filter(img => !(img.complete && img.naturalWidth > 0))
                     .map(img => img.currentSrc || img.src);
    }""")


def unrendered_widgets(page) -> list[str]:
    """A complaint if embedded widget views did not all render (widgets need no kernel)."""
    views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if views == 0:
        return []
    try:
        page.wait_for_selector(".jupyter-widgets", timeout=TYPESET_TIMEOUT_MS)
    except PlaywrightTimeout:
        return [f"none of {views} widgets rendered"]
    rendered = page.locator(".jupyter-widgets").count()
    return [] if rendered >= views else [f"{views} widget views, {rendered} rendered"]


CODE_BLOCKS = "div.cell_input pre, div.cell_output pre, div.highlight pre, div.output pre"


def wrapped_code_lines(page) -> list[str]:
    """Code and output blocks in which a line wraps onto a second screen line (its continuation
    would start at column 0 and lose its indentation, a printed table its columns). Measured:
    each block's height against that of a copy laid out with ``white-space: pre`` (no line can
    wrap), side by side in the same column."""
    return page.evaluate("""(selector) => {
        const found = [];
        for (const pre of document.querySelectorAll(selector)) {
            if (!pre.offsetParent) continue;                      // not displayed
            const copy = pre.cloneNode(true);
            copy.style.whiteSpace = 'pre';
            pre.after(copy);
            const extra = pre.scrollHeight - copy.scrollHeight;
            const lines = Math.max(1, pre.textContent.replace(/\\n$/, '').split('\\n').length);
            const lineHeight = (copy.scrollHeight - parseFloat(getComputedStyle(copy).paddingTop)
                                - parseFloat(getComputedStyle(copy).paddingBottom)) / lines;
            copy.remove();
            if (extra > 1)
                found.push(`about ${Math.round(extra / lineHeight)} screen line(s) of wrapped code or output in: `
                           + pre.textContent.trim().slice(0, 70));
        }
        return found;
    }""", CODE_BLOCKS)


def broken_tables(page) -> list[str]:
    """Tables in cell outputs that lose their columns: a cell's word broken across two screen
    lines (a break after a hyphen is a line break, not a broken word), or a table wider than its
    output that no box lets the reader scroll to."""
    return page.evaluate("""() => {
        const found = [];
        for (const table of document.querySelectorAll('div.cell_output table')) {
            const output = table.closest('div.cell_output');
            let scrolls = false;
            for (let el = table.parentElement; el && el !== output.parentElement; el = el.parentElement)
                scrolls = scrolls || ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
            if (!scrolls && table.getBoundingClientRect().width > output.clientWidth + 1)
                found.push('a table wider than its output, cut off: ' + table.textContent.trim().slice(0, 70));
            const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                for (const word of node.textContent.matchAll(/[^\\s-]+/g)) {
                    const range = document.createRange();
                    range.setStart(node, word.index);
                    range.setEnd(node, word.index + word[0].length);
                    if (new Set([...range.getClientRects()].map(r => Math.round(r.top))).size > 1) {
                        found.push(`a table cell breaks the word ${JSON.stringify(word[0].slice(0, 40))}`);
                        break;
                    }
                }
            }
        }
        return found;
    }""")


def page_scrolls_sideways_at(page, viewport) -> list[str]:
    """A complaint if, laid out at ``viewport``, the page itself is wider than the window; the
    page is left at the laptop width again."""
    page.set_viewport_size(viewport)
    try:
        extra = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    finally:
        page.set_viewport_size(VIEWPORT)
    return [f"the page scrolls sideways by {extra} px"] if extra > 1 else []


def test_every_built_page_is_checked(built_book):
    built = {str(p.relative_to(built_book.html).with_suffix(""))
             for p in built_book.html.rglob("*.html") if "_static" not in p.parts}
    assert built == set(toc_files()) | set(EXTRA_PAGES)


@pytest.mark.parametrize("docname", toc_files() + EXTRA_PAGES)
def test_page_works_offline(tab, book_url, docname):
    page = tab.open(f"{book_url}/{docname}.html")
    found = unfinished_maths(page)
    found += [f"image did not load: {src}" for src in broken_images(page)]
    found += unrendered_widgets(page)
    found += wrapped_code_lines(page)
    found += broken_tables(page)
    found += page_scrolls_sideways_at(page, VIEWPORT)
    found += [f"at phone width: {problem}" for problem in page_scrolls_sideways_at(page, PHONE)]
    page.wait_for_load_state("networkidle")
    problems = tab.problems + found
    assert not problems, "\n".join(problems)
    if numbered_files() and docname == numbered_files()[0]:  # chapter 1, for the README
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT))


def open_search_dialog(page, tries: int = 3):
    """Click the header's search button as a reader does; on a loaded machine the theme's
    handler can attach after the page is idle, so a click that opened nothing is repeated."""
    box = page.locator("#pst-search-dialog input[type=search]")
    for attempt in range(tries):
        page.locator("button.search-button__button:visible").first.click()
        try:
            box.wait_for(state="visible", timeout=10_000)
            return box
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise
    return box


def test_search_finds_a_chapter(tab, book_url):
    page = tab.open(f"{book_url}/{toc_files()[0]}.html")
    box = open_search_dialog(page)
    box.fill("softmax")
    box.press("Enter")
    page.wait_for_url("**/search.html?*")
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(timeout=TYPESET_TIMEOUT_MS)
    linked = page.eval_on_selector_all("#search-results ul.search li a", "as => as.map(a => a.href)")
    assert any("/chapters/" in href for href in linked), linked
    assert not tab.problems, "\n".join(tab.problems)
