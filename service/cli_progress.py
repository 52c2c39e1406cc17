"""The `optu` command's live progress on a terminal (rich, on stderr): the stage, the e-graph's size,
the best estimate so far and the elapsed time, as the optimizer reports them (a job's status, or
service/optimizer/progress.py's facts in-process)."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from service.jobqueue.states import JobStatusJSON, StatusListener
from service.optimizer.progress import Progress


class _ProgressLine:
    """Rendered at every refresh, so the elapsed time moves while a stage runs."""

    def __init__(self, label: str) -> None:
        self.label, self.facts, self.start = label, {}, time.monotonic()

    def update(self, status: JobStatusJSON | Progress) -> None:
        """A job status ({state, progress: {...}}) or the optimizer's own facts ({stage: ...})."""
        facts = {**status.get("progress", {}), **{k: v for k, v in status.items() if k not in ("progress", "id")}}
        self.facts.update({k: v for k, v in facts.items() if v is not None})

    def __rich__(self) -> Text:
        f = self.facts
        parts = [f.get("point") and f"point {f['point']}", f.get("state"), f.get("stage"),
                 f.get("egraph_nodes") is not None and f"{f['egraph_nodes']:,} e-nodes",
                 f.get("best_estimate_s") is not None and f"best {f['best_estimate_s'] * 1e6:.3f} us",
                 f"{time.monotonic() - self.start:.1f} s"]
        return Text(f"{self.label}  " + "  ".join(p for p in parts if p))


@contextmanager
def live_progress(label: str, console: Console | None = None) -> Iterator[StatusListener]:
    """A listener for progress reports, shown live on `console` (stderr by default) until the block
    ends; the line is cleared then, so stdout keeps only the result."""
    line = _ProgressLine(label)
    with Live(Spinner("dots", text=line), console=console or Console(stderr=True),
              refresh_per_second=8, transient=True):
        yield line.update
