"""``evaluate``: roll a trained policy out on every robot of a fleet and measure success.

    evaluate --checkpoint runs/bc --robots 100 --episodes 10 --out runs/eval
    evaluate --checkpoint runs/bc --compare                 # the scripted expert beside it
    evaluate --expert --task reach --robots 30              # the expert alone: the upper bound
    evaluate --checkpoint runs/mt10 --robots 10 --episodes 10 --compare --positions fixed   # many tasks

A multi-task checkpoint (or --expert --task metaworld/mt10) is evaluated on each of its tasks,
robot k running the task collect gave it; --episodes then counts episodes per task (LeRobot's
protocol: 10 per task), and success is reported per task and per difficulty group too.

Episode seeds are held out from training; --robot-offset evaluates robots that were
never in the training data. Writes EVAL/eval_info.json, per_robot.csv, success.png
(and videos/ with --videos K) and prints the inputs the policy reads, then success per site
and for the fleet.
"""

from __future__ import annotations

import sys

from core.errors import fail, quiet_closed_pipes
from core.options import parse_config
from eval.config import EvalConfig
from eval.engine import run_evaluation
from eval.report import format_comparison, format_table, format_task_table, headline

INTERRUPTED_EXIT = 130


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    config = parse_config(EvalConfig, __doc__, argv)
    try:
        info = run_evaluation(config)
    except ValueError as error:
        fail(str(error))
    except RuntimeError as error:
        fail(str(error).splitlines()[0], code=1)
    except KeyboardInterrupt:
        print("\ninterrupted: nothing was written", file=sys.stderr)
        raise SystemExit(INTERRUPTED_EXIT) from None
    if not config.quiet:
        print(headline(info))
        if config.compare:
            print(format_comparison(info))
        print(format_table(info))
        if "per_group" in info:
            print(format_task_table(info))
        print(f"wrote {config.out}/eval_info.json, per_robot.csv, success.png"
              + (f" and {len(info['video_paths'])} videos" if info["video_paths"] else ""))


if __name__ == "__main__":
    main()
