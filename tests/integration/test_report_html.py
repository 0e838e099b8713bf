"""report.html rendered by a real browser (Debian's headless Chromium): tables and figures are there.

The test only looks for an installed chromium, chromium-browser or google-chrome on PATH and skips
when there is none; `make browser` installs one (tests never install anything).
"""
from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const tables = [...document.querySelectorAll('table.results')];
  const out = {tables: tables.map(t => [t.dataset.table, t.querySelectorAll('tbody tr').length,
                                        t.getBoundingClientRect().width]),
               images: imgs.map(i => [i.dataset.figure, i.complete, i.naturalWidth, i.naturalHeight,
                                      i.getBoundingClientRect().width])};
  const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


pytestmark = pytest.mark.browser
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The first installed browser of BROWSERS; never installs one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium is not installed: run `make browser`")


def run_chromium(binary, tmp_path, *args) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120)


def test_report_renders_with_tables_and_figures(chromium, tiny_report, tmp_path):
    page = (tiny_report / "report.html").read_text()
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>"))
    r = run_chromium(chromium, tmp_path, "--virtual-time-budget=10000", "--window-size=1280,900", "--dump-dom",
                     probed.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert found, f"no probe output; chromium said: {r.stderr[-2000:]}"
    seen = json.loads(html_lib.unescape(found.group(1)))
    kinds = [t[0] for t in seen["tables"]]
    assert {"verdicts", "mirage", "tarf", "purge", "ec", "layers"} <= set(kinds)
    assert all(rows >= 1 and width > 100 for _, rows, width in seen["tables"]), seen["tables"]
    assert sorted(i[0] for i in seen["images"]) == ["layerwise", "runtime", "separability", "trilemma"]
    for name, complete, w, h, shown in seen["images"]:
        assert complete and w > 200 and h > 150 and shown > 200, (name, w, h, shown)
    mirage = next(t for t in seen["tables"] if t[0] == "mirage")
    assert mirage[1] == 7  # Acc_r, y_u, LPR, ΔLPR, CKA, F, verdict

    shot = tmp_path / "first-screen.png"
    r = run_chromium(chromium, tmp_path, "--window-size=1280,800", f"--screenshot={shot}",
                     (tiny_report / "report.html").as_uri())
    assert shot.is_file(), r.stderr[-2000:]
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (800, 1280) and pixels.std() > 0.05  # drawn, not a blank page
