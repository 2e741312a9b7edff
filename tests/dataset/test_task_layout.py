"""A group's tasks in one collection: the features they share, each task's own, and inputs one policy cannot read."""

import re

import pytest

from dataset.inputs import select_inputs
from dataset.schema import shared_layout
from sim.tasks import BUILTIN_TASKS, TASK_GROUPS, recorded_tasks, resolve_task, resolve_tasks


def vector(size: int) -> dict:
    return {"dtype": "float32", "shape": [size], "names": None}


def layout(environment_state: int | None, action: int = 5) -> dict:
    """A task's features: state, a camera, action, and (unless None) an environment_state of that width."""
    features = {"observation.state": vector(20), "observation.images.front": {"dtype": "image", "shape": [32, 32, 3],
                                                                              "names": None},
                "action": vector(action)}
    return {**features, **({"observation.environment_state": vector(environment_state)} if environment_state else {})}


def test_tasks_alike_share_every_feature_and_keep_none_of_their_own():
    assert shared_layout({"a": layout(10), "b": layout(10)}) == (layout(10), {})


def test_each_task_keeps_its_own_environment_state_where_their_shapes_differ():
    shared, own = shared_layout({"reach": layout(3), "push": layout(10), "arm": layout(None)})
    assert shared == layout(None)
    assert own == {"reach": {"observation.environment_state": vector(3)},
                   "push": {"observation.environment_state": vector(10)}, "arm": {}}


@pytest.mark.parametrize("layouts, message", [
    ({"reach": layout(3), "push": layout(3, action=4)}, "the tasks reach and push record action differently"),
    ({"reach": layout(3), "push": {**layout(3), "observation.images.wrist": vector(1)}},
     "record observation.images.wrist differently"),
])
def test_tasks_that_differ_in_anything_else_are_one_line(layouts, message):
    with pytest.raises(ValueError, match=message) as error:
        shared_layout(layouts)
    assert "\n" not in str(error.value) and "only observation.environment_state may differ" in str(error.value)


def test_inputs_that_read_a_tasks_own_feature_are_refused():
    own = {"reach": {"observation.environment_state": vector(3)}, "stack": {"observation.environment_state": vector(14)}}
    features = layout(None)
    assert select_inputs("proprio+cameras", features, own) == ["observation.state", "observation.images.front"]
    for inputs in ("state", "state+cameras"):
        with pytest.raises(ValueError, match=rf"--inputs {re.escape(inputs)} reads observation.environment_state, which this "
                                             r"store's tasks record in different shapes \(reach \[3\], stack \[14\]\)"):
            select_inputs(inputs, features, own)


def test_robofleet_all_is_the_four_built_in_tasks_in_the_one_registry_of_groups():
    four = [BUILTIN_TASKS[name] for name in ("reach", "push", "pick_place", "stack")]
    assert resolve_tasks("robofleet/all") == four == recorded_tasks("robofleet/all", None, "a manifest")
    assert TASK_GROUPS["robofleet/all"] == ("reach", "push", "pick_place", "stack")
    assert all(name.startswith("metaworld/") for group, tasks in TASK_GROUPS.items() if group != "robofleet/all"
               for name in tasks)
    with pytest.raises(ValueError, match="'robofleet/all' is a group of 4 tasks and this takes one task; "
                                         "name one of them, e.g. reach"):
        resolve_task("robofleet/all")
