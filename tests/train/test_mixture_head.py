"""The Gaussian-mixture action head (--action-modes): it keeps the branches that mean squared error averages."""

import numpy as np
import pytest
import torch

from train.policies.options import PolicyOptions
from train.policies.mixture import MixtureHead
from train.policies.policy import PolicySpec, make_policy, policy_spec

STATS = {"observation.state": {"mean": np.zeros(3), "std": np.ones(3)}, "action": {"mean": np.zeros(2), "std": np.ones(2)}}


def branching_policy(action_modes: int) -> torch.nn.Module:
    """An mlp trained on one observation whose demonstrations turn either way: chunks of +1 or of -1, half each."""
    spec = PolicySpec(features={"observation.state": [3]}, action_dim=2, horizon=4, n_action_steps=4, hidden=(32,),
                      n_obs_steps=1, action_modes=action_modes)
    torch.manual_seed(0)
    policy = make_policy(spec, STATS)
    optimiser = torch.optim.Adam(policy.parameters(), lr=1e-2)
    turn = torch.where(torch.arange(64) % 2 == 0, 1.0, -1.0)[:, None, None].expand(64, 4, 2)
    batch = {"observation.state": torch.ones(64, 1, 3), "action": turn, "action_is_pad": torch.zeros(64, 4, dtype=torch.bool)}
    for _ in range(300):
        optimiser.zero_grad()
        policy(batch).backward()
        optimiser.step()
    return policy.eval()


def test_the_mixture_acts_on_one_branch_where_regression_averages_them():
    window = {"observation.state": torch.ones(1, 1, 3)}
    averaged = branching_policy(action_modes=1).predict_chunk(window)
    one_branch = branching_policy(action_modes=2).predict_chunk(window)
    assert averaged.abs().max() < 0.1  # neither turn: the stall the mixture is for
    assert torch.allclose(one_branch.abs(), torch.ones_like(one_branch), atol=0.05)
    assert (one_branch.sign() == one_branch.flatten()[0].sign()).all()  # the whole chunk from one branch


def test_padded_steps_do_not_count_and_the_likeliest_mode_is_acted_on():
    head = MixtureHead(modes=2, horizon=3, action_dim=1)
    raw = torch.randn(4, head.outputs)
    target, is_pad = torch.randn(4, 3, 1), torch.tensor([[False, False, True]] * 4)
    changed = target.clone()
    changed[:, 2] += 5.0
    assert torch.equal(head.loss(raw, target, is_pad), head.loss(raw, changed, is_pad))
    logits, means = head.split(raw)
    for sample in range(4):
        assert torch.equal(head.likeliest(raw)[sample], means[sample, logits[sample].argmax()])


def test_modes_over_some_dimensions_split_there_and_regress_the_others():
    # dimension 0 turns +1 or -1; dimension 1 (say, when the fingers close) varies by +-3, independently of it
    turn = torch.where(torch.arange(64) % 2 == 0, 1.0, -1.0)
    timing = torch.where(torch.arange(64) % 4 < 2, 3.0, -3.0)
    chunks = torch.stack([turn, timing], dim=1)[:, None, :].expand(64, 4, 2)

    def chunk(mode_actions: tuple[int, ...]) -> torch.Tensor:
        spec = PolicySpec(features={"observation.state": [3]}, action_dim=2, horizon=4, n_action_steps=4,
                          hidden=(32,), n_obs_steps=1, action_modes=2, mode_actions=mode_actions)
        torch.manual_seed(0)
        policy = make_policy(spec, STATS)
        optimiser = torch.optim.Adam(policy.parameters(), lr=1e-2)
        batch = {"observation.state": torch.ones(64, 1, 3), "action": chunks,
                 "action_is_pad": torch.zeros(64, 4, dtype=torch.bool)}
        for _ in range(300):
            optimiser.zero_grad()
            policy(batch).backward()
            optimiser.step()
        return policy.eval().predict_chunk({"observation.state": torch.ones(1, 1, 3)})[0]

    everywhere, over_turn = chunk(()), chunk((0,))
    assert torch.allclose(everywhere[:, 1].abs(), torch.full((4,), 3.0), atol=0.2)  # split on the larger difference
    assert everywhere[:, 0].abs().max() < 0.2  # and averaged the turn away
    assert torch.allclose(over_turn[:, 0].abs(), torch.ones(4), atol=0.1)  # one turn, whole
    assert over_turn[:, 1].abs().max() < 0.2  # the timing regressed to its mean


def test_shared_dimensions_are_the_same_in_every_mode():
    head = MixtureHead(modes=3, horizon=2, action_dim=3, spanned=(1,))
    assert head.outputs == 3 * (2 * 1 + 1) + 2 * 2
    _, means = head.split(torch.randn(5, head.outputs))
    assert means.shape == (5, 3, 2, 3)
    assert torch.equal(means[:, 0, :, [0, 2]], means[:, 2, :, [0, 2]]) and not torch.equal(means[:, 0, :, 1], means[:, 2, :, 1])


def test_only_the_mlp_and_cnn_heads_take_modes():
    features = {"observation.state": {"shape": [3], "dtype": "float32"}, "action": {"shape": [2], "dtype": "float32"}}
    assert policy_spec(PolicyOptions(policy="mlp", action_modes=3), features).action_modes == 3
    with pytest.raises(ValueError, match="--action-modes is for the mlp and cnn heads"):
        policy_spec(PolicyOptions(policy="diffusion", action_modes=3), features)
    with pytest.raises(ValueError, match="--action-modes must be at least 1"):
        PolicyOptions(action_modes=0)
    named = {**features, "action": {**features["action"], "names": ["ee_dyaw", "gripper"]}}
    assert policy_spec(PolicyOptions(action_modes=2, mode_actions=("gripper",)), named).mode_actions == (1,)
    with pytest.raises(ValueError, match="add --action-modes 2 or more"):
        policy_spec(PolicyOptions(mode_actions=("gripper",)), named)
    with pytest.raises(ValueError, match="the action has no dimension 'yaw'; it has ee_dyaw, gripper"):
        policy_spec(PolicyOptions(action_modes=2, mode_actions=("yaw",)), named)
