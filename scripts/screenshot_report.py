"""The README's picture of the report: ``artifacts/nightly/report.html`` (written by ``make report``)
opened in a Chromium-family browser driven by Playwright, its top saved as ``docs/images/report.png``.

    python scripts/screenshot_report.py [--report HTML] [--out PNG] [--height PX]

The browser is the one ``WB_CHROMIUM`` names, else the first of the paths the browser tests use
(Debian's ``/usr/bin/chromium`` first); Playwright never downloads one. Exit codes: 0 written, 2 no
report or no browser (the message says which and how to get it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = (
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/usr/bin/google-chrome-stable",
    "/opt/google/chrome/chrome",
)


def browser() -> str | None:
    """WB_CHROMIUM when set, else the first of BROWSERS that is an executable file."""
    named = os.environ.get("WB_CHROMIUM")
    candidates = (named,) if named else BROWSERS
    return next((b for b in candidates if Path(b).is_file() and os.access(b, os.X_OK)), None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", type=Path, default=ROOT / "artifacts" / "nightly" / "report.html", help="the report")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "report.png", help="the PNG written")
    ap.add_argument("--height", type=int, default=1100, help="pixels of the page's top kept (width 1280)")
    args = ap.parse_args(argv)
    if not args.report.is_file():
        print(f"no report at {args.report}: run `make report` first", file=sys.stderr)
        return 2
    exe = browser()
    if exe is None:
        print(f"no browser: set WB_CHROMIUM or install one of {', '.join(BROWSERS)}", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright  # the dev extra's; only this command needs it

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            page = b.new_page(viewport={"width": 1280, "height": args.height})
            page.goto(args.report.resolve().as_uri())
            page.screenshot(path=str(args.out), clip={"x": 0, "y": 0, "width": 1280, "height": args.height})
        finally:
            b.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    from workbench.run.supervisor import exits_on_sigterm

    sys.exit(exits_on_sigterm("scripts/screenshot_report.py", main))
