"""How fast the simulated robots run, held against the bare physics.

For each task it measures, on one core:

- ``mj_step``: bare ``mujoco.mj_step`` calls per second on the task's model: the limit.
- ``env.step``: control steps per second through ``gymnasium.make``'s env (random actions).
- ``env+expert``: control steps per second with the scripted expert choosing actions.
- ``render``: 96x96 frames per second from the front camera (``mujoco.Renderer``),
  as observation images are rendered (no shadows).

A control step is ``frame_skip`` physics steps, so the physics limit in control steps
per second is ``mj_step / frame_skip``; ``efficiency`` is the fraction of that limit
the env reaches. Writes benchmarks/results/sim_speed.json and appends to the table in
benchmarks/README.md.

    python -m benchmarks.sim_speed [--seconds 3] [--tasks reach push pick_place stack]
"""

from __future__ import annotations

import sim  # first: it selects headless rendering before mujoco loads

import mujoco

from benchmarks.common import benchmark_parser, machine_facts, publish, rate


def measure_task(task: str, seconds: float) -> dict:
    spec = sim.resolve_task(task)
    profile = sim.make_robot(0)

    env = spec.make_env(profile)
    env.reset(seed=0)
    raw = env.unwrapped
    frame_skip = raw.frame_skip
    mj_step = rate(lambda: mujoco.mj_step(raw.model, raw.data), seconds)

    def step_env(policy):
        def step():
            _, _, terminated, truncated, _ = env.step(policy(step.observation))
            if terminated or truncated:
                step.observation, _ = env.reset()
        step.observation, _ = env.reset(seed=1)
        return step

    env.action_space.seed(0)
    env_step = rate(step_env(lambda _: env.action_space.sample()), seconds)
    expert = spec.make_expert(profile)
    expert.reset(0)
    env_expert = rate(step_env(expert), seconds)

    env.reset(seed=0)
    render = rate(lambda: raw.render_camera("front", (96, 96), shadows=False), seconds)
    env.close()

    physics_limit = mj_step / frame_skip
    return {
        "task": task,
        "frame_skip": frame_skip,
        "mj_step_per_s": round(mj_step),
        "physics_limit_control_steps_per_s": round(physics_limit),
        "env_step_per_s": round(env_step),
        "env_expert_step_per_s": round(env_expert),
        "render_96_fps": round(render),
        "env_step_efficiency": round(env_step / physics_limit, 3),
        "env_expert_efficiency": round(env_expert / physics_limit, 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--seconds", type=float, default=3.0, help="timing window per measurement")
    parser.add_argument("--tasks", nargs="+", default=["reach", "push", "pick_place", "stack"])
    args = parser.parse_args(argv)

    machine = machine_facts()
    per_task = [measure_task(task, args.seconds) for task in args.tasks]
    result = {"benchmark": "sim_speed", "machine": machine, "seconds_per_measurement": args.seconds, "tasks": per_task}

    header = ["date", "code", "task", "mj_step/s", "limit ctrl steps/s", "env.step/s", "env+expert/s",
              "env/limit", "env+expert/limit", "render 96x96 fps"]
    rows = [
        [machine["date"], machine["code_version"], t["task"], t["mj_step_per_s"], t["physics_limit_control_steps_per_s"],
         t["env_step_per_s"], t["env_expert_step_per_s"], f'{t["env_step_efficiency"]:.0%}',
         f'{t["env_expert_efficiency"]:.0%}', t["render_96_fps"]]
        for t in per_task
    ]
    publish("sim_speed", result, header, rows, args)
    return result


if __name__ == "__main__":
    main()
