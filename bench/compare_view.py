"""The compare view over 10 runs × 100,000 points each: time to its first interactive frame
and to its full frame, in headless Chromium against a real server. Prints the times and
asserts nothing about them (a benchmark, not a timed test).

    .venv/bin/python bench/compare_view.py

The measurement lives in tests/e2e/bench_compare_view.py, which this runs with pytest: it
needs what the browser tests build (a throwaway migrated database loaded with the fixture by
COPY, the uvicorn server on it, a logged-in Debian Chromium page), and its file name keeps it
out of the test suite. Needs PostgreSQL and Redis as the tests do, `make frontend` done and
/usr/bin/chromium; the load takes about 30 s, the two page loads (cold, warm) a few seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    command = [sys.executable, "-m", "pytest", "tests/e2e/bench_compare_view.py", "-s", "-q",
               "-p", "no:cacheprovider", *sys.argv[1:]]  # fmt: skip
    sys.exit(subprocess.call(command, cwd=REPO))
