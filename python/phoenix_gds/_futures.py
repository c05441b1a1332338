# SPDX-License-Identifier: MIT
"""The futures of the package's asynchronous I/O, and the bookkeeping that
lets a close wait for every one of them.

A future runs on one thread pool of the package.  Each object that makes
futures (a File, a CuFile) keeps the set of its own that have not finished;
its close() waits for them, queued or running, so that a write nobody awaits
still reaches the file and a read made inside a ``with`` block still has
its file.  Every future is also in one set of the whole package, which
Device.close() and Registration.close() wait for: a queued I/O may use the
memory they are about to deregister.
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import threading
from typing import Any, Callable, List, Optional, Set, TypeVar

from ._phoenix import ArgumentError

T = TypeVar("T")

_MAX_THREADS = 1024


class IOFuture(concurrent.futures.Future):
    """The result of an asynchronous I/O (``File.pread_async``, ``CuFile.pread``...).

    A :class:`concurrent.futures.Future`, so ``concurrent.futures.wait`` and
    ``as_completed`` take it; ``get(timeout=None)`` (kvikio's name) waits and
    returns the bytes moved (a list of them for a batch) or raises the I/O's
    OSError; ``done()`` asks without waiting.
    """

    def __init__(self) -> None:
        super().__init__()
        self._observed = False
        self._failed = False

    def get(self, timeout: Optional[float] = None) -> Any:
        """Waits (at most ``timeout`` seconds: TimeoutError) and returns the result."""
        return self.result(timeout)

    def result(self, timeout: Optional[float] = None) -> Any:
        self._observed = True
        return super().result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        self._observed = True
        return super().exception(timeout)

    def set_exception(self, exception: Optional[BaseException]) -> None:
        self._failed = True
        super().set_exception(exception)

    @property
    def unobserved_failure(self) -> bool:
        """Failed, and nobody has asked for its result or exception."""
        return self._failed and not self._observed

    def __repr__(self) -> str:
        return f"<IOFuture {'done' if self.done() else 'pending'}>"


class Pending:
    """The futures of one owner that have not finished, and the failures
    nobody has looked at yet."""

    def __init__(self, closed_message: str, keep_failures: bool = True) -> None:
        self._keep_failures = keep_failures
        self._lock = threading.Lock()
        self._futures: Set[IOFuture] = set()
        self._unobserved_failures: List[IOFuture] = []
        self._closing = False
        self._closed_message = closed_message

    def add(self, future: IOFuture) -> None:
        with self._lock:
            if self._closing:
                raise ValueError(self._closed_message)
            self._futures.add(future)

    def finished(self, future: IOFuture) -> None:
        with self._lock:
            self._futures.discard(future)
            if self._keep_failures and future.unobserved_failure:
                self._unobserved_failures.append(future)

    def drain(self, closing: bool) -> Optional[BaseException]:
        """Waits for every future added so far; with ``closing``, refuses new
        ones from now on.  Returns the first failure that no caller has
        looked at (get, result or exception), or None."""
        with self._lock:
            self._closing = self._closing or closing
            waiting = list(self._futures)
        concurrent.futures.wait(waiting)
        with self._lock:
            failures = [f for f in self._unobserved_failures if f.unobserved_failure]
            self._unobserved_failures.clear()
        return failures[0].exception() if failures else None


# Every future of the package, for Device and Registration closes.
everything = Pending("", keep_failures=False)

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def pool_threads() -> int:
    """PHX_PY_THREADS, checked: 1 to 1024; unset or empty: four per CPU, at most 32."""
    text = os.environ.get("PHX_PY_THREADS", "")
    if text.strip() == "":
        return min(32, (os.cpu_count() or 1) * 4)
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if not 1 <= threads <= _MAX_THREADS:
        raise ArgumentError(errno.EINVAL, f"PHX_PY_THREADS={text!r}: expected a thread count "
                                          f"from 1 to {_MAX_THREADS}")
    return threads


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(pool_threads(),
                                                          thread_name_prefix="phoenix_gds")
        return _pool


def submit(owner: Pending, call: Callable[..., T], *args: Any) -> IOFuture:
    """Runs ``call(*args)`` on the pool; the future is the owner's until it ends."""
    executor = _executor()
    future = IOFuture()
    owner.add(future)
    everything.add(future)

    def finished(f: IOFuture) -> None:
        owner.finished(f)
        everything.finished(f)

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call(*args))
        except BaseException as error:  # the future carries it, whatever it is
            future.set_exception(error)

    future.add_done_callback(finished)
    try:
        executor.submit(run)
    except BaseException:
        future.cancel()
        raise
    return future
