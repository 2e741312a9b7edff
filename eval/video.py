"""Episode videos: which episodes to record, and writing frames as MP4 (H.264 through PyAV).

PyAV carries its own FFmpeg libraries, so encoding needs nothing from the system
(torchcodec, by contrast, needs FFmpeg installed). Frames come from the env's
``render()`` (``render_mode="rgb_array"``), offscreen.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import av
import numpy as np

from sim.fleet import RobotProfile


def pick_video_episodes(robots: list[RobotProfile], episodes: int, count: int) -> dict[int, tuple[int, ...]]:
    """``count`` (robot id -> episode indices) to record, spread over the sites first.

    Round-robin over sites: the first robot of each site, then the second, ...; once
    every robot has one, second episodes follow. Every site present gets a video as
    soon as ``count`` reaches the number of sites.
    """
    by_site: dict[str, list[int]] = {}
    for profile in robots:
        by_site.setdefault(profile.site, []).append(profile.robot_id)
    order: list[int] = []
    for rank in range(max(len(ids) for ids in by_site.values())):
        order += [ids[rank] for ids in by_site.values() if rank < len(ids)]
    chosen: dict[int, list[int]] = {}
    for n in range(min(count, len(order) * episodes)):
        robot, index = order[n % len(order)], n // len(order)
        chosen.setdefault(robot, []).append(index)
    return {robot: tuple(indices) for robot, indices in chosen.items()}


def write_mp4(path: Path, frames: list[np.ndarray], fps: int) -> None:
    """Encode uint8 H x W x 3 frames as an H.264 MP4; written aside and renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".mp4")
    os.close(handle)
    height, width = frames[0].shape[:2]
    with av.open(temporary, mode="w") as container:
        stream = container.add_stream("libx264", rate=max(1, fps))
        stream.width, stream.height = width - width % 2, height - height % 2  # yuv420p needs even sizes
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            image = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame[: stream.height, : stream.width]),
                                               format="rgb24")
            container.mux(stream.encode(image))
        container.mux(stream.encode())
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
