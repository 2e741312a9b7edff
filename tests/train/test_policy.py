"""The policy interface: chunked select_action, one env or B envs in lockstep, for every kind."""

import numpy as np
import pytest
import torch

from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.stats import fleet_stats
from dataset.windows import FleetWindowDataset, WindowSpec
from train.policies.options import CNNOptions, PolicyOptions
from train.policies.policy import Normalizer, PolicySpec, make_policy, policy_spec


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


# ----- every kind ------------------------------------------------------------------------------------------

STORE_FEATURES = {  # a store's features dict, as collect writes it: 16x16 front camera
    "observation.state": {"dtype": "float32", "shape": [3]},
    "observation.environment_state": {"dtype": "float32", "shape": [2]},
    "observation.images.front": {"dtype": "image", "shape": [16, 16, 3]},
    "action": {"dtype": "float32", "shape": [2]},
}


def vector_stats(size: int) -> dict[str, np.ndarray]:
    return {"mean": np.full(size, 0.1), "std": np.full(size, 2.0), "min": np.full(size, -3.0), "max": np.full(size, 4.0)}


def tiny(kind: str, cameras: bool = True, **options) -> torch.nn.Module:
    config = PolicyOptions(policy=kind, horizon=8, n_action_steps=3, hidden=(8,), **options)
    features = {k: v for k, v in STORE_FEATURES.items() if cameras or not k.startswith("observation.images.")}
    spec = policy_spec(config, features)
    stats = {"observation.state": vector_stats(3), "observation.environment_state": vector_stats(2),
             "action": vector_stats(2),
             "observation.images.front": {k: np.full((3, 1, 1), v) for k, v in
                                          {"mean": 0.5, "std": 0.25, "min": 0.0, "max": 1.0}.items()}}
    torch.manual_seed(0)
    return make_policy(spec, stats).eval()


def env_observations(steps: int, envs: int) -> list[dict[str, np.ndarray]]:
    """What ``envs`` real envs would give over ``steps`` steps: float vectors and uint8 HWC images."""
    rng = np.random.default_rng(0)
    return [{"observation.state": rng.normal(size=(envs, 3)).astype(np.float32),
             "observation.environment_state": rng.normal(size=(envs, 2)).astype(np.float32),
             "observation.images.front": rng.integers(0, 256, size=(envs, 16, 16, 3), dtype=np.uint8)}
            for _ in range(steps)]


def fix_noise(policy, noise: torch.Tensor | None) -> None:
    """Diffusion samples from noise: give each env its own fixed starting noise."""
    if noise is not None:
        policy.predict_chunk = lambda window, predict=type(policy).predict_chunk: predict(policy, window, noise=noise)


@pytest.mark.parametrize("kind, options", [("mlp", {}), ("mlp", {"action_modes": 3}), ("cnn", {}),
                                           ("cnn", {"cnn": CNNOptions(vision_backbone="resnet18")}), ("act", {}), ("diffusion", {})])
def test_every_kind_acts_the_same_batched_and_one_env_at_a_time(kind, options):
    policy = tiny(kind, **options)
    observations = env_observations(steps=5, envs=3)
    noise = torch.randn(3, 8, 2) if kind == "diffusion" else None
    fix_noise(policy, noise)
    policy.reset()
    batched = np.stack([policy.select_action(o) for o in observations])
    assert batched.shape == (5, 3, 2) and np.isfinite(batched).all()
    for env in range(3):
        fix_noise(policy, None if noise is None else noise[env: env + 1])
        policy.reset()
        single = np.stack([policy.select_action({k: v[env] for k, v in o.items()}) for o in observations])
        np.testing.assert_allclose(single, batched[:, env], rtol=1e-4, atol=1e-5)


def test_diffusion_sampling_follows_the_torch_seed():
    policy = tiny("diffusion", cameras=False)
    observation = env_observations(1, 2)[0]
    window = {k: torch.from_numpy(np.stack([observation[k]] * 2, axis=1)) for k in policy.spec.features}
    torch.manual_seed(1)
    first = policy.predict_chunk(window)
    torch.manual_seed(1)
    assert torch.equal(policy.predict_chunk(window), first)
    assert not torch.equal(policy.predict_chunk(window), first)  # a fresh draw samples afresh
    assert first.shape == (2, 3, 2)  # n_action_steps actions from the current frame


def test_env_images_reach_the_model_in_the_training_layout(camera_fleet):
    """select_action turns uint8 HWC env images into exactly what training windows hold."""
    store = FleetStore.open(camera_fleet)
    spec = policy_spec(PolicyOptions(policy="cnn", n_action_steps=1), store.features)  # a prediction every step
    window = WindowSpec.of(spec.n_obs_steps, spec.horizon, [*spec.features, "action"])
    episode = select_episodes(store)[0]
    sample = FleetWindowDataset(store, [episode], window)[3]  # frame 3 of the episode: frames 2 and 3
    frames = store.episode(episode.robot_id, episode.index)
    policy = make_policy(spec, fleet_stats(store))
    windows = []
    policy.predict_chunk = lambda w, predict=policy.predict_chunk: windows.append(w) or predict(w)
    policy.reset()
    for t in (2, 3):
        policy.select_action({name: frames[name][t] for name in spec.features})
    for name in spec.features:
        np.testing.assert_array_equal(windows[-1][name][0].numpy(), sample[name].numpy(), err_msg=name)


def test_policy_spec_takes_the_inputs_each_kind_uses():
    state_only = {k: v for k, v in STORE_FEATURES.items() if k != "observation.images.front"}
    assert list(policy_spec(PolicyOptions(policy="mlp"), STORE_FEATURES).features) == list(state_only)[:2]
    for kind in ("cnn", "act", "diffusion"):
        assert policy_spec(PolicyOptions(policy=kind), STORE_FEATURES).features["observation.images.front"] == [3, 16, 16]
    assert "observation.images.front" not in policy_spec(PolicyOptions(policy="act"), state_only).features
    assert policy_spec(PolicyOptions(policy="act"), state_only).n_obs_steps == 1
    assert policy_spec(PolicyOptions(policy="diffusion"), state_only).action_start == -1
    with pytest.raises(ValueError, match="needs camera images"):
        policy_spec(PolicyOptions(policy="cnn"), state_only)


def test_min_max_normalisation_maps_the_range_to_plus_minus_one():
    normalizer = Normalizer.of(vector_stats(2), "min_max")
    x = torch.tensor([[-3.0, 4.0], [0.5, 0.5]])
    np.testing.assert_allclose(normalizer(x)[0].numpy(), [-1.0, 1.0])
    np.testing.assert_allclose(normalizer.inverse(normalizer(x)).numpy(), x.numpy(), atol=1e-6)


@pytest.mark.parametrize("kind, head", [("act", "lerobot_policy.model.action_head."),
                                        ("diffusion", "lerobot_policy.diffusion.unet.final_conv."),
                                        ("cnn", "net.2.")])
def test_each_kind_names_its_output_head(kind, head):
    policy = tiny(kind)
    keys = policy.head_keys()
    assert keys and all(key.startswith(head) for key in keys) and set(keys) <= set(policy.state_dict())
