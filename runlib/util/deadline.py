"""A deadline for a block of the main thread: an exception raised in it after so many seconds (SIGALRM).

    with deadline(300.0, lambda: TrackDeadline()):   # runlib.track.resync: the whole MLflow resync
    with deadline(120.0, lambda: PartTimeout("..."), rearm_s=1.0):   # runlib.bench.gpu_check: one part

The timer is the process's ITIMER_REAL: its SIGALRM interrupts a blocked system call (a socket read, a
flock), and the handler's exception ends it; PEP 475 retries an interrupted call only when the handler
returns. Python code alone is interrupted: a long C call (a CUDA kernel launch, a BLAS call) returns
first. Outside the main thread, or where there is no SIGALRM, the block runs without a deadline (signal
handlers run only in the main thread). The previous handler and a disarmed timer are restored on exit.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def deadline(seconds: float | None, error: Callable[[], BaseException], rearm_s: float | None = None) -> Iterator[None]:
    """Raise error() in the main thread once `seconds` have passed inside the block (None: no deadline).

    rearm_s: the timer is set again for this many seconds as it fires, so that an exception dropped where
    Python prints and discards it (raised inside a finalizer or a weakref callback) is raised again; the
    exit disarms it. None: the deadline fires once."""
    usable = (
        seconds is not None and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    )
    if not usable or seconds is None:
        yield
        return

    def fire(signum: int, frame: FrameType | None) -> None:
        if rearm_s is not None:
            signal.setitimer(signal.ITIMER_REAL, rearm_s)
        raise error()

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
