"""The Gaussian-mixture action head (--action-modes): it keeps the branches that mean squared error averages."""

import numpy as np
import pytest
import torch

from train.config import TrainConfig
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


def test_only_the_mlp_and_cnn_heads_take_modes():
    features = {"observation.state": {"shape": [3], "dtype": "float32"}, "action": {"shape": [2], "dtype": "float32"}}
    assert policy_spec(TrainConfig(policy="mlp", action_modes=3), features).action_modes == 3
    with pytest.raises(ValueError, match="--action-modes is for the mlp and cnn heads"):
        policy_spec(TrainConfig(policy="diffusion", action_modes=3), features)
    with pytest.raises(ValueError, match="--action-modes must be at least 1"):
        TrainConfig(action_modes=0)
