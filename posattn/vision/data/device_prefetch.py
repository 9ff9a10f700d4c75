"""Batches put on the devices ahead of the step that takes them (big_vision's `prefetch_iterator`).

A background thread takes host batches from the input pipeline, puts each on the devices (`put`: host
arrays -> global jax.Arrays, `posattn.mesh.global_batch`) and queues up to `size` of them, so that the
transfer of step t + 1's batch overlaps step t and a step waits for data only when the pipeline is
slower than the device. The batches come out in the pipeline's order; an error of the pipeline or of
`put` is raised in the caller at the batch where it happened.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

_DONE = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def prefetch(batches: Iterator, put: Callable, size: int = 2) -> Iterator:
    """`put(b)` for every b of `batches`, computed up to `size` batches ahead in a thread; `size` 0: in
    the caller's thread, one at a time. Closing the returned iterator stops the thread, then closes
    `batches` (its worker processes, if any)."""
    if size <= 0:
        try:
            yield from (put(b) for b in batches)
        finally:
            _close(batches)
        return
    ready: queue.Queue = queue.Queue(maxsize=size)
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():  # a bounded wait, so that a stop is seen while the queue is full
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def fill():
        try:
            for b in batches:
                if not offer(put(b)):
                    return
            offer(_DONE)
        except BaseException as e:  # noqa: BLE001 (handed to the caller, raised there)
            offer(_Failed(e))

    thread = threading.Thread(target=fill, name="posattn-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()  # it finishes the batch it is reading, sees the stop and returns
        _close(batches)


def _close(batches) -> None:
    close = getattr(batches, "close", None)
    if close is not None:
        close()
