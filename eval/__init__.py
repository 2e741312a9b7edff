"""eval: the fleet evaluator. Roll a checkpoint's policy (or the scripted expert) out on a fleet.

    from eval import EvalConfig, run_evaluation
    info = run_evaluation(EvalConfig(checkpoint="runs/bc", robots=30, episodes=10, out="runs/eval"))
    info["fleet"]["pc_success"], info["per_site"]["office"]["ci95"]

Modules, in the order a run uses them: ``config`` (the options), ``plan`` (checkpoint
checks, robots, held-out seeds; ``tasks``: which task each robot runs when there are many),
``engine`` (dask tasks, progress), ``rollout`` (one robot's episodes as envs in lockstep),
``video``, ``report`` (figures and tables), ``output`` (the EVAL directory), ``cli`` (the
``evaluate`` command).
"""

from eval.config import EvalConfig
from eval.engine import run_evaluation

__all__ = ["EvalConfig", "run_evaluation"]
