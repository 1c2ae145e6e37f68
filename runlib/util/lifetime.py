"""Child processes that die with their parent.

A training stage starts `accelerate launch` (torchrun) in its own process group, and torchrun starts
each worker in a new session (torch/distributed/elastic/multiprocessing/subprocess_handler/
subprocess_handler.py, `start_new_session=True`), so a SIGKILL of the stage's process group, which
nothing can intercept, would leave the launcher and its workers training on and writing into the
stage's directories. Linux's PR_SET_PDEATHSIG (prctl(2)) has the kernel send a signal to a process
when its parent exits; each link of the chain sets it, so the whole tree goes with the stage.
Elsewhere (macOS) this is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent exits; exit now if it already has."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the request: nobody would signal us
        os._exit(128 + sig)


def preexec_die_with_parent() -> None:
    """For subprocess.Popen(preexec_fn=...): the child (after fork, before exec) dies with this process."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
