"""Ctrl-C and SIGTERM for the ``attnflow`` program: either ends it whenever it comes (status 130, 143), and none
is lost, whatever the machine's load.

Python runs a signal's handler in the main thread between two bytecodes, wherever that thread is. Where it is a
garbage-collection callback or a finalizer (JAX runs one at every collection), the exception the handler raises
is only reported as ignored (``sys.unraisablehook``): the program would go on as if nothing had been pressed.
``Interrupts`` keeps such an interrupt as pending (a flag) and sends the signal again to the main thread
(``signal.pthread_kill``, so that a blocking call there returns) every ``RESEND_S`` until the handler has raised
it in the main thread's own code, where the command's clean-up catches it; no timer decides whether it arrives.
``check`` raises a pending interrupt at a safe point (the command's end at the latest).

SIGTERM (``kill``, a batch system's stop) is raised as ``Terminated``, a KeyboardInterrupt, so that what cleans up
after Ctrl-C (a run being written, a sweep's manifest) cleans up for it too.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

RESEND_S = 0.02
"""How often a pending interrupt is sent again to the main thread until it is raised there."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is: what cleans up after an interrupt cleans up for it too; exit status 143."""


def raised(signum: int) -> KeyboardInterrupt:
    """The exception of a signal: ``Terminated`` for SIGTERM, KeyboardInterrupt for SIGINT."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class Interrupts:
    """The program's handlers of SIGINT and SIGTERM and its ``sys.unraisablehook`` (``install``)."""

    def __init__(self) -> None:
        self.previous_hook = sys.unraisablehook
        self.pending: int | None = None  # a signal whose exception was lost, until it is raised again
        self.resent = False  # a signal sent again by the resender, not (yet) seen by the handler
        self.wake = threading.Event()
        self.main = threading.main_thread().ident

    def install(self) -> None:
        sys.unraisablehook = self.hook
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self.handler)
        threading.Thread(target=self.resend, name="attnflow-interrupts", daemon=True).start()

    def handler(self, signum, frame) -> None:
        if self.resent and self.pending is None:
            self.resent = False  # a resend that crossed the delivery it repeats: delivered already
            return
        self.resent, self.pending = False, None
        raise raised(signum)

    def hook(self, unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            # lost where it was raised: pending until the handler raises it again in the main thread's code
            self.pending = signal.SIGTERM if issubclass(unraisable.exc_type, Terminated) else signal.SIGINT
            self.wake.set()
            return
        self.previous_hook(unraisable)

    def resend(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            while (signum := self.pending) is not None:
                self.resent = True
                signal.pthread_kill(self.main, signum)  # type: ignore[arg-type]  # the main thread has an ident
                time.sleep(RESEND_S)

    def check(self) -> None:
        """Raise a pending interrupt now (a safe point of the main thread)."""
        signum, self.pending = self.pending, None
        if signum is not None:
            raise raised(signum)
