"""experiments/lerobot_stages.py: an exported policy scored by evaluate and by lerobot-eval, side by side per task
with 95% intervals; the runner runs both as users do and refuses a malformed LeRobot stage in one line."""

import json

import numpy as np
import pytest
import torch

from core.errors import Failure
from experiments import runner
from experiments.lerobot_stages import intervals_overlap, side_by_side
from experiments.results_file import check_results
from fault_helpers import assert_one_line


def lerobot_eval_info(folder, successes: dict[str, list[bool]]):
    """An eval_info.json as lerobot-eval writes it for one environment a task (its per_task entries)."""
    folder.mkdir(parents=True)
    per_task = [{"task_group": task, "task_id": 0, "metrics": {"sum_rewards": [0.0] * len(runs),
                                                               "max_rewards": [0.0] * len(runs), "successes": runs,
                                                               "video_paths": []}}
                for task, runs in successes.items()]
    (folder / "eval_info.json").write_text(json.dumps({"per_task": per_task, "per_group": {}, "overall": {}}))
    return folder


def evaluate_info(counts: dict[str, tuple[int, int]]) -> dict:
    """evaluate's eval_info per_task block: task -> (successes, episodes)."""
    return {"per_task": {f"metaworld/{task}": {"n_success": k, "n_episodes": n} for task, (k, n) in counts.items()}}


def test_side_by_side_sets_each_tasks_figures_and_intervals_beside_and_agrees_where_they_overlap(tmp_path):
    theirs = lerobot_eval_info(tmp_path / "lerobot", {"reach-v3": [True] * 10, "push-v3": [False] * 10,
                                                      "door-open-v3": [True, False]})
    compared = side_by_side(evaluate_info({"reach-v3": (9, 10), "push-v3": (10, 10), "drawer-open-v3": (1, 2)}),
                            theirs)
    assert set(compared["per_task"]) == {"reach-v3", "push-v3"}
    assert (compared["only_evaluate"], compared["only_lerobot_eval"]) == (["drawer-open-v3"], ["door-open-v3"])
    reach = compared["per_task"]["reach-v3"]
    assert reach["lerobot_eval"] == {"n_episodes": 10, "n_success": 10, "pc_success": 100.0,
                                     "ci95": reach["lerobot_eval"]["ci95"]}
    assert reach["evaluate"]["pc_success"] == 90.0 and reach["agree"]
    assert not compared["per_task"]["push-v3"]["agree"]  # 0 of 10 against 10 of 10: the intervals are apart
    assert not compared["all_agree"]


def test_intervals_overlap_at_a_shared_end_and_not_apart():
    assert intervals_overlap([0, 30], [30, 60]) and intervals_overlap([10, 90], [40, 50])
    assert not intervals_overlap([0, 30], [31, 60])


@pytest.mark.parametrize("stage, error", [
    ('name = "lerobot_eval"\nkind = "lerobot-eval"\noptions = { policy = "x", tasks = ["reach-v3"], episodes = 1, '
     'batch = 2 }', "lerobot-eval has no option 'batch'"),
    ('name = "lerobot_eval"\nkind = "lerobot-eval"\noptions = { policy = "x", episodes = 1 }', "needs the option 'tasks'"),
    ('name = "export"\nkind = "export"\noptions = { checkpoint = "{nowhere}" }', "which is no earlier stage"),
])
def test_a_malformed_lerobot_stage_is_refused_in_one_line(stage, error, tmp_path, capsys):
    declaration = tmp_path / "bad.toml"
    declaration.write_text(f'name = "bad"\nquestion = "q"\nclaim = "c"\n[[stage]]\n{stage}\n')
    with pytest.raises(Failure) as failure:
        runner.main(["run", str(declaration), "--work", str(tmp_path / "work")])
    assert failure.value.code == 2
    assert_one_line(capsys.readouterr().err, error)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # lerobot-eval's episode is 500 steps with two 480 x 480 renders a step (video)
def test_an_exported_metaworld_policy_runs_through_lerobot_eval_and_evaluate_side_by_side(tmp_path):
    """One task, a 2-step ACT on 2 demonstrations, one episode each side: the run, not the figure."""
    declaration = tmp_path / "side_by_side.toml"
    declaration.write_text("""name = "side_by_side_smoke"
question = "does the side by side run end to end?"
claim = "both harnesses' figures land in the results file"
[[stage]]
name = "collect"
kind = "collect"
options = { task = "metaworld/reach-v3", robots = 1, episodes = 2, cameras = ["corner2"], image_size = 32, workers = 1, quiet = true }
[[stage]]
name = "train"
kind = "train"
options = { data = "{collect}", policy = "act", max_steps = 2, batch_size = 4, val_fraction = 0.0 }
[[stage]]
name = "export"
kind = "export"
options = { checkpoint = "{train}" }
[[stage]]
name = "lerobot_eval"
kind = "lerobot-eval"
options = { policy = "{export}", tasks = ["reach-v3"], episodes = 1 }
[[stage]]
name = "test"
kind = "evaluate"
options = { checkpoint = "{export}", task = "metaworld/reach-v3", seed = 0, positions = "random", split = "test", robots = 1, episodes = 1, compare = false, workers = 1, quiet = true }
[[stage]]
name = "compare"
kind = "compare"
options = { evaluations = ["test"], side_by_side = ["test", "lerobot_eval"] }
""")
    results_path, work = tmp_path / "results.json", tmp_path / "work"
    runner.main(["run", str(declaration), "--work", str(work), "--results", str(results_path),
                 "--ledger", str(tmp_path / "ledger.jsonl")])
    check_results(results_path)
    results = json.loads(results_path.read_text())
    reach = results["side_by_side"]["per_task"]["reach-v3"]
    assert reach["evaluate"]["n_episodes"] == reach["lerobot_eval"]["n_episodes"] == 1
    assert isinstance(reach["agree"], bool) and len(reach["lerobot_eval"]["ci95"]) == 2
    assert results["provenance"]["commands"]["lerobot_eval"].startswith("lerobot-eval --env.type=metaworld ")

    # lerobot-eval's 480 x 480 corner2 reaches the policy as the 32 x 32 it was trained at
    import torchvision.transforms.functional as F
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import make_pre_post_processors
    export = work / "export"
    preprocessor, _ = make_pre_post_processors(PreTrainedConfig.from_pretrained(export), pretrained_path=export)
    image = torch.rand(1, 3, 480, 480)
    state = torch.zeros(1, 4)
    large = preprocessor({"observation.images.corner2": image, "observation.state": state})
    small = preprocessor({"observation.images.corner2": F.resize(image, [32, 32]).clamp(0, 1), "observation.state": state})
    assert large["observation.images.corner2"].shape[-2:] == (32, 32)
    np.testing.assert_allclose(large["observation.images.corner2"], small["observation.images.corner2"], atol=1e-6)
