"""The policy interface: chunked select_action, one env or B envs in lockstep."""

import numpy as np
import torch

from train.policy import PolicySpec, make_policy


def tiny_mlp() -> torch.nn.Module:
    spec = PolicySpec(features={"observation.state": [3]}, action_dim=2, horizon=4, n_action_steps=2, hidden=(8,))
    stats = {"observation.state": {"mean": np.zeros(3), "std": np.ones(3)},
             "action": {"mean": np.zeros(2), "std": np.ones(2)}}
    torch.manual_seed(0)
    return make_policy(spec, stats)


def test_batched_select_action_equals_one_env_at_a_time():
    policy = tiny_mlp()
    observations = np.random.default_rng(0).normal(size=(5, 3, 3)).astype(np.float32)  # 5 steps x 3 envs
    policy.reset()
    batched = np.stack([policy.select_action({"observation.state": o}) for o in observations])
    assert batched.shape == (5, 3, 2)
    for env in range(3):
        policy.reset()
        single = np.stack([policy.select_action({"observation.state": o[env]}) for o in observations])
        np.testing.assert_allclose(single, batched[:, env], atol=1e-6)


def test_a_chunk_is_predicted_every_n_action_steps():
    policy = tiny_mlp()
    calls = []
    predict = policy.predict_chunk
    policy.predict_chunk = lambda window: calls.append(window) or predict(window)
    policy.reset()
    for _ in range(5):
        policy.select_action({"observation.state": np.zeros(3, np.float32)})
    assert len(calls) == 3  # steps 0, 2 and 4
    assert calls[0]["observation.state"].shape == (1, 2, 3)  # [B, n_obs_steps, ...], the first frame repeated


def test_the_mlp_head_is_its_output_layer():
    policy = tiny_mlp()
    assert policy.head_keys() == ["net.2.weight", "net.2.bias"]  # Linear, GELU, Linear
