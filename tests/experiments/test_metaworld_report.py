"""The Meta-World demonstrations curve renders one row a results file, by demonstrations a task."""

from experiments.metaworld_report import demonstrations_per_task, demos_curve_text


def made_up(robots: int, episodes: int, successes: dict[str, float]) -> dict:
    per_task = {task: {"pc_success": pc, "ci95": [0.0, 100.0], "n_episodes": 10} for task, pc in successes.items()}
    mean = sum(successes.values()) / len(successes)
    test = {"pc_success": mean, "ci95": [mean - 5, mean + 5], "n_episodes": 10 * len(successes),
            "test_evaluations": 1, "per_task": per_task,
            "per_group": {"metaworld/easy": {"pc_success": mean}}, "expert": {"pc_success": 100.0}}
    command = f"python -m collect.cli --task metaworld/mt10 --robots {robots} --episodes {episodes} --quiet"
    return {"results": {"test": test}, "provenance": {"commands": {"collect": command}}}


def test_rows_go_by_demonstrations_a_task_with_the_lowest_task_and_missing_groups_dashed():
    few = made_up(robots=4, episodes=5, successes={"metaworld/reach-v3": 50.0, "metaworld/push-v3": 30.0})
    many = made_up(robots=4, episodes=50, successes={"metaworld/reach-v3": 100.0, "metaworld/push-v3": 90.0})
    assert demonstrations_per_task(few) == 10 and demonstrations_per_task(many) == 100
    table = demos_curve_text({"b_many": many, "a_few": few}).splitlines()
    assert len(table) == 4 and table[2].startswith("| 10 | 40.0% [35.0, 45.0] | 100.0% | 0.40 | 40% | - | - | - |")
    assert "push-v3 30%" in table[2] and "push-v3 90%" in table[3] and "(../experiments/results/b_many.json)" in table[3]
