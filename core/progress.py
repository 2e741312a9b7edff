"""The commands' progress bars."""

from __future__ import annotations

import sys

from tqdm import tqdm

LOG_REDRAW_S = 60.0  # a progress bar's redraw interval when stderr is a file or a pipe


def progress_bar(**options) -> tqdm:
    """A tqdm bar (``options`` are tqdm's) that redraws up to ten times a second on a terminal and once
    a minute when stderr is a file or a pipe, where every redraw is one more copy of the bar in the log."""
    redraw_s = 0.1 if sys.stderr.isatty() else LOG_REDRAW_S
    # maxinterval: tqdm's monitor thread would otherwise redraw a slow bar every 10 s
    return tqdm(mininterval=redraw_s, maxinterval=max(redraw_s, 10.0), **options)
