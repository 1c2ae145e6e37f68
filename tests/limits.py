"""Hang guards for tests that run subprocesses, and for those that run a command in-process under
SIGALRM (tests.helpers.hang_guard).

A guard ends a test that hangs; it is never a timing assertion. It is set far above the slowest run seen
under load (the longest end-to-end test takes about 8 minutes on 2 busy cores), so only a real hang trips
it, and CI's 90 minutes still leave room for the rest of the suite after one. Override with
RUNLIB_TEST_HANG_GUARD_S (seconds), e.g. lower it locally to find a hang quickly.
"""

from __future__ import annotations

import os

HANG_GUARD_S = float(os.environ.get("RUNLIB_TEST_HANG_GUARD_S", "1800"))
