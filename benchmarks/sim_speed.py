"""How fast the simulated robots run, held against the bare physics.

For each task it measures, on one core:

- ``mj_step``: bare ``mujoco.mj_step`` calls per second on the task's model: the limit.
- ``env.step``: control steps per second through ``gymnasium.make``'s env (random actions).
- ``env+expert``: control steps per second with the scripted expert choosing actions.
- ``render``: frames per second (and ms a frame) from the camera the policy sees (our tasks'
  ``front``, Meta-World's ``corner2``) at each of ``--render-sizes`` px (``mujoco.Renderer``),
  as observation images are rendered (no shadows). Our tasks' default is 96 px, the image size
  collect records by default; Meta-World's is 96 px and LeRobot's 480 px.

A control step is ``frame_skip`` physics steps (the env's control period over the model's
timestep), so the physics limit in control steps per second is ``mj_step / frame_skip``;
``efficiency`` is the fraction of that limit the env reaches, and a size's
``frame_vs_control_step`` is the limit over its frames per second: how many control steps'
physics one frame takes as long as. ``--tasks`` takes tasks and groups (``metaworld/mt10``). Writes
benchmarks/results/sim_speed.json, or sim_speed_metaworld.json for Meta-World's tasks
(``benchmarks.common.family_name``), and appends to the table of the same name in
benchmarks/README.md.

    python -m benchmarks.sim_speed [--seconds 3] [--tasks reach push pick_place stack]
    python -m benchmarks.sim_speed --tasks metaworld/mt10 [--render-sizes 96 480]
"""

from __future__ import annotations

import sim  # first: it selects headless rendering before mujoco loads

import mujoco

from benchmarks.common import benchmark_parser, family_name, machine_facts, publish, rate
from sim.tasks import TaskSpec, resolve_tasks

# By results name: the camera the policy sees, how the env renders an observation image from it, and the
# default render sizes (px). Meta-World's env has the one camera (sim/envs/metaworld.py).
CAMERA = {"sim_speed": "front", "sim_speed_metaworld": "corner2"}
RENDER = {"sim_speed": lambda env, size: env.render_camera("front", (size, size), shadows=False),
          "sim_speed_metaworld": lambda env, size: env.render_camera((size, size), shadows=False)}
RENDER_SIZES = {"sim_speed": (96,), "sim_speed_metaworld": (96, 480)}


def measure_task(spec: TaskSpec, seconds: float, name: str, sizes: tuple[int, ...]) -> dict:
    """One task's rates (module docstring), its camera rendered at each of ``sizes``; ``name``: the results
    name of its family (``RENDER``)."""
    profile = sim.make_robot(0)

    env = spec.make_env(profile)
    env.reset(seed=0)
    raw = env.unwrapped
    frame_skip = round(1 / (env.metadata["render_fps"] * raw.model.opt.timestep))
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
    # A frame takes milliseconds: a few are warm-up enough, and the clock is read every few
    render = {size: rate(lambda: RENDER[name](raw, size), seconds, warmup=3, batch=5) for size in sizes}
    env.close()

    physics_limit = mj_step / frame_skip
    return {
        "task": spec.name,
        "frame_skip": frame_skip,
        "mj_step_per_s": round(mj_step),
        "physics_limit_control_steps_per_s": round(physics_limit),
        "env_step_per_s": round(env_step),
        "env_expert_step_per_s": round(env_expert),
        **({"render_96_fps": round(render[96])} if 96 in render else {}),
        "render": {str(size): {"fps": round(fps, 3), "ms_per_frame": round(1000 / fps, 2),
                               "frame_vs_control_step": round(physics_limit / fps, 2)} for size, fps in render.items()},
        "env_step_efficiency": round(env_step / physics_limit, 3),
        "env_expert_efficiency": round(env_expert / physics_limit, 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__, __spec__.name)
    parser.add_argument("--seconds", type=float, default=3.0, help="timing window per measurement")
    parser.add_argument("--tasks", nargs="+", default=["reach", "push", "pick_place", "stack"],
                        help="tasks or groups (metaworld/mt10)")
    parser.add_argument("--render-sizes", type=int, nargs="+",
                        help="image sizes (px) to render; default 96, and 480 too for Meta-World")
    args = parser.parse_args(argv)
    try:
        name = family_name("sim_speed", args.tasks)
        tasks = [spec for task in args.tasks for spec in resolve_tasks(task)]
    except ValueError as error:
        parser.error(str(error))
    sizes = tuple(args.render_sizes or RENDER_SIZES[name])

    machine = machine_facts()
    per_task = [measure_task(spec, args.seconds, name, sizes) for spec in tasks]
    result = {"benchmark": "sim_speed", "machine": machine, "seconds_per_measurement": args.seconds,
              "camera": CAMERA[name], "tasks": per_task}

    header = ["date", "code", "task", "mj_step/s", "limit ctrl steps/s", "env.step/s", "env+expert/s",
              "env/limit", "env+expert/limit"]
    rows = [
        [machine["date"], machine["code_version"], t["task"], t["mj_step_per_s"], t["physics_limit_control_steps_per_s"],
         t["env_step_per_s"], t["env_expert_step_per_s"], f'{t["env_step_efficiency"]:.0%}',
         f'{t["env_expert_efficiency"]:.0%}']
        for t in per_task
    ]
    # Our tasks' table, from before the sizes, shows the frames per second alone; Meta-World's each size's ms a
    # frame and a frame's time in control steps of physics too.
    detailed = name != "sim_speed"
    for size in sizes:
        header += [f"render {size}x{size} fps",
                   *([f"{size} px ms/frame", f"{size} px frame/ctrl step"] if detailed else [])]
        for row, t in zip(rows, per_task):
            figures = t["render"][str(size)]
            row += [round(figures["fps"]), *([f'{figures["ms_per_frame"]:.1f}', f'{figures["frame_vs_control_step"]:.1f}']
                                             if detailed else [])]
    publish(name, result, header, rows, args)
    return result


if __name__ == "__main__":
    main()
