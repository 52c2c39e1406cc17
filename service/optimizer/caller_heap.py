"""The heap a request finds in its caller's process, kept out of the collector's sight while the
request runs. An in-process caller (a notebook, a jit wrapper, a torch.compile backend) holds
torch, JAX and transformers: 600k objects that every full collection walks, 0.27-0.57 s a request
once or twice per Hugging Face model. Frozen on the way in (`gc.freeze`, which moves lists, not
objects) and given back on the way out (`gc.unfreeze`), the process is left as it was: nothing is
kept alive or dropped that would not have been, only the walks are skipped. A process that froze
its own heap (a server's worker after warm-up) is left alone."""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CallerHeap:
    """Frozen while any request of this process runs (concurrent and nested ones share it)."""

    def __init__(self) -> None:
        self.lock, self.holds, self.froze = threading.Lock(), 0, False

    @contextmanager
    def out_of_sight(self) -> Iterator[None]:
        with self.lock:
            if self.holds == 0:
                self.froze = gc.get_freeze_count() == 0
                if self.froze:
                    gc.freeze()
            self.holds += 1
        try:
            yield
        finally:
            with self.lock:
                self.holds -= 1
                if self.holds == 0 and self.froze:
                    gc.unfreeze()
                    self.froze = False


CALLER_HEAP = CallerHeap()  # process-wide, as the collector is
