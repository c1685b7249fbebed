"""axe-core on the calculator, the API docs and the validation report: nothing serious or critical, light and dark,
desktop and phone.

axe-core is not part of the pages: it comes from the local npm cache, and the test is skipped, saying why, where it
is not there."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Literal

import pytest
from playwright.sync_api import Browser

from tests.web.test_validation_page import VIEWPORTS

pytestmark = pytest.mark.browser
AXE_VERSION = "4.14.1"

# The calculator as it opens, and in the states that show more of it: a custom GPU, a message at a field, a
# config.json waited for, a pinned comparison; then the API docs and the validation report.
PAGES = ("/", "/?gpu=custom&gpu_capacity=24+GiB", "/?micro_batch_size=0", "/?source=config",
         "/?pin=source%3Dpreset%26seq_len%3D4096", "/docs", "/validation")
SERIOUS = """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.id}: ${v.nodes.length}, e.g. ${v.nodes[0].target.join(' ')}`)"""


def _axe(artifacts_dir: Path) -> Path:
    """axe-core, installed from the local npm cache only (no network); the test is skipped when it is not there."""
    script = artifacts_dir / "axe" / "node_modules" / "axe-core" / "axe.min.js"
    if script.exists():
        return script
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("axe-core not available: no npm")
    done = subprocess.run([npm, "install", "--offline", "--no-audit", "--no-fund", "--prefix", str(artifacts_dir / "axe"),
                           f"axe-core@{AXE_VERSION}"], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode or not script.exists():
        pytest.skip(f"axe-core {AXE_VERSION} is not in the npm cache (npm cache add axe-core@{AXE_VERSION} puts it there)")
    return script


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_axe_core_finds_nothing_serious(browser: Browser, base_url: str, artifacts_dir: Path, viewport: str,
                                        scheme: Literal["light", "dark"]):
    script = _axe(artifacts_dir)
    # The pages' policy admits only their own scripts; axe is injected from outside it.
    context = browser.new_context(viewport=VIEWPORTS[viewport], color_scheme=scheme, bypass_csp=True)
    found = {}
    try:
        page = context.new_page()
        for path in PAGES:
            page.goto(base_url + path)
            if path == "/docs":
                page.wait_for_selector(".opblock-summary-control")  # Swagger UI has drawn the operations
            page.add_script_tag(path=str(script))
            found[path] = page.evaluate(SERIOUS)
    finally:
        context.close()
    assert found == {path: [] for path in PAGES}
