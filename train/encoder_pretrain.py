"""Pretrain the cnn's camera encoders on frames no expert labelled: inverse dynamics over what a fleet recorded.

    python -m train.encoder_pretrain --data runs/fleet/seed --more runs/fleet/run/fleet/round_{1,2,3,4} \\
        --out runs/encoders --steps 1500
    torchrun --standalone --nproc_per_node=2 train/bc.py --policy cnn ... --init-encoders runs/encoders

A deployed fleet records far more frames than anyone labels: in a fleet-learning round the policy acts in about
nine frames of ten, and only the expert's stretches train the policy (train/fleet/labels.py). Every recorded frame
still carries the action the robot executed, whoever chose it. Given the camera frames at ``t - gap`` and ``t``,
the cnn's encoders (train/policies/vision.py, one a camera) and a small MLP predict the ``gap`` actions executed
between them: inverse dynamics, which needs no expert and no reward. The cameras alone must answer it (the
proprioception would answer it by itself, so it is left out), so the encoders learn to see how the arm, and what
it touches, moves.

Every episode of --data and of the --more stores trains, failures included (or each robot's first
--episodes-per-robot, to match a cnn trained on those only). Images and actions are normalised by
--data's statistics, as a cnn trained on --data normalises them, and both frames of a pair are shifted alike by up
to --image-shift pixels (a shift between them would look like motion). Writes, in --out:

- ``encoders.safetensors``: the encoders' weights, tensors only;
- ``encoders.json``: the cameras, backbone and image shape they fit, the gap, steps and stores, the first and last
  logged loss, the config and code version, and the weights' sha256.

While it trains, ``resume/`` holds the newest resume state (weights, optimiser, schedule, RNG, step), written at the
first end of an epoch --checkpoint-interval steps after the last. After a crash the same command carries on from it,
and ends where an uninterrupted run ends, bit for bit at the same torch thread count; a state of another config is
refused, a damaged one skipped. The state goes when the encoders are written.

bc.py's ``--init-encoders`` starts a cnn's encoders from them (``load_encoders``): it refuses weights that do not
match their record or the policy, and never runs code from the files.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from torch import nn

from core.errors import crash_point, fail, one_line, quiet_closed_pipes, warn
from core.files import code_version, repo_relative, write_json_atomic
from core.options import check_choices, check_options, parse_config
from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.inputs import camera_names
from dataset.loader import make_dataloader
from dataset.stats import fleet_stats
from dataset.windows import FleetWindowDataset, WindowSpec
from train.augment import images_to_model, random_shift
from train.checkpoint import restore_rng_state, rng_state
from train.policies.options import VISION_BACKBONES
from train.policies.policy import Normalizer, masked_mean, module_key
from train.policies.vision import EMBED, image_encoder
from train.schedule import learning_rate_factor
from train.threads import ThreadShare

WEIGHTS, DESCRIPTION, RESUME = "encoders.safetensors", "encoders.json", "resume"
LOG_EVERY = 50  # steps a logged loss averages


@dataclass
class EncoderPretrainConfig:
    data: str = field(default="", metadata={"help": "fleet store whose statistics normalise (the cnn's --data)"})
    more: tuple[str, ...] = field(default=(), metadata={
        "help": "more fleet stores (fleet-learning rounds): every episode of them trains, failures included"})
    episodes_per_robot: int = field(default=0, metadata={
        "help": "pretrain on each robot's first N episodes of every store only (0: all of them)"})
    out: str = field(default="runs/encoders", metadata={"help": "where encoders.safetensors and .json go"})
    gap: int = field(default=4, metadata={"help": "frames between the two images of a pair: the actions predicted"})
    steps: int = field(default=1500, metadata={"help": "training steps"})
    batch_size: int = field(default=128, metadata={"help": "pairs per step"})
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate (cosine decay to 10%)"})
    hidden: int = field(default=256, metadata={"help": "width of the MLP over the pair's features"})
    image_shift: int = field(default=4, metadata={"help": "shift both images of a pair by up to this many pixels"})
    vision_backbone: str = field(default="small", metadata={"help": "the cnn's image encoder: small or resnet18"})
    seed: int = field(default=0, metadata={"help": "initial weights and batch order"})
    checkpoint_interval: int = field(default=250, metadata={
        "help": "steps at least between resume states, each written at the end of an epoch"})

    def __post_init__(self):
        check_choices(self, {"vision_backbone": VISION_BACKBONES})
        check_options(self, ("gap", "steps", "batch_size", "hidden", "checkpoint_interval"), lambda value: value >= 1,
                      "must be at least 1")
        check_options(self, ("image_shift", "episodes_per_robot"), lambda value: value >= 0, "must not be negative")
        if not self.data:
            raise ValueError("--data is required: the fleet store the cnn will train on")


class InverseDynamics(nn.Module):
    """The cnn's camera encoders and an MLP: two frames of every camera -> the ``gap`` actions between them."""

    def __init__(self, cameras: list[str], channels: int, config: EncoderPretrainConfig, stats: dict, action_dim: int):
        super().__init__()
        self.cameras, self.gap, self.shift = cameras, config.gap, config.image_shift
        self.encoders = nn.ModuleDict({module_key(name): image_encoder(config.vision_backbone, channels)
                                       for name in cameras})
        self.images = nn.ModuleDict({module_key(name): Normalizer.of(stats[name]) for name in cameras})
        self.action = Normalizer.of(stats["action"])
        self.head = nn.Sequential(nn.Linear(2 * EMBED * len(cameras), config.hidden), nn.GELU(),
                                  nn.Linear(config.hidden, config.gap * action_dim))

    def pair_features(self, name: str, pairs: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 2, H, W, C] -> [B, 2 * EMBED]: both frames shifted alike in training, then encoded."""
        if self.training and self.shift:  # the two frames side by side in the channels, so one shift moves both
            b, _, h, w, c = pairs.shape
            pairs = random_shift(pairs.permute(0, 2, 3, 1, 4).reshape(b, h, w, 2 * c), self.shift) \
                .reshape(b, h, w, 2, c).permute(0, 3, 1, 2, 4)
        frames = self.images[module_key(name)](images_to_model(pairs))
        return self.encoders[module_key(name)](frames.flatten(0, 1)).unflatten(0, frames.shape[:2]).flatten(1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        features = torch.cat([self.pair_features(name, batch[name]) for name in self.cameras], dim=1)
        predicted = self.head(features).unflatten(1, (self.gap, -1))
        error = (predicted - self.action(batch["action"])).pow(2).mean(dim=2)
        return masked_mean(error, batch["action_is_pad"])


def pairs_of(stores: list[FleetStore], cameras: list[str], gap: int, batch_size: int, seed: int, per_robot: int = 0):
    """The loader of every episode of ``stores`` (each robot's first ``per_robot`` only, if not 0): camera frames
    ``t - gap`` and ``t``, actions ``t - gap .. t - 1``."""
    spec = WindowSpec({**{name: (-gap, 0) for name in cameras}, "action": tuple(range(-gap, 0))})
    windows = FleetWindowDataset(stores, select_episodes(stores, success=None, per_robot=per_robot or None), spec)
    return make_dataloader(windows, batch_size=batch_size, seed=seed), len(windows)


def pretrain(config: EncoderPretrainConfig) -> dict:
    """Train the inverse-dynamics model of ``config`` and write its encoders; their description."""
    torch.manual_seed(config.seed)
    stores = [FleetStore.open(path) for path in (config.data, *config.more)]
    features = stores[0].features
    cameras = camera_names(features)
    if not cameras:
        raise ValueError(f"{config.data} records no camera images: there are no encoders to pretrain")
    for store in stores[1:]:
        if camera_names(store.features) != cameras:
            raise ValueError(f"{store.path} records cameras {camera_names(store.features)}, {config.data} {cameras}")
    stats = fleet_stats(stores[0])
    height, width, channels = features[cameras[0]]["shape"]
    model = InverseDynamics(cameras, channels, config, stats, features["action"]["shape"][0])
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: learning_rate_factor(step, 0, config.steps))
    loader, pairs = pairs_of(stores, cameras, config.gap, config.batch_size, config.seed,
                             config.episodes_per_robot)
    print(f"inverse dynamics over {config.gap} steps from {', '.join(cameras)}: {pairs:,} frames of "
          f"{len(stores)} store(s), {config.steps} steps at batch {config.batch_size}", flush=True)
    out = Path(config.out)
    progress = {"step": 0, "epoch": 0, "logged": [], "window": []}
    resumed = read_resume_state(out, config)
    if resumed:
        model.load_state_dict(resumed["model"])
        optimiser.load_state_dict(resumed["optimiser"])
        schedule.load_state_dict(resumed["schedule"])
        progress = {key: resumed[key] for key in progress}
        print(f"resumed from step {progress['step']} ({repo_relative(out / RESUME)})", flush=True)
    logged, window, step, epoch = progress["logged"], progress["window"], progress["step"], progress["epoch"]
    saved = step
    with ThreadShare(local_ranks=1) as threads:  # one process, also where torchrun's other ranks wait for it
        while step < config.steps:
            loader.set_epoch(epoch)
            for batch in loader:
                if resumed:  # only now: starting the loader drew from torch's RNG, as the first run did at step 0
                    restore_rng_state(resumed["rng"])
                    resumed = None
                loss = model(batch)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                schedule.step()
                threads.refresh()
                step, window = step + 1, [*window, loss.item()]
                if len(window) == LOG_EVERY or step == config.steps:
                    logged.append(float(np.mean(window)))
                    print(f"step {step} loss {logged[-1]:.4f}", flush=True)
                    window = []
                if step == config.steps:
                    break
            epoch += 1
            if step < config.steps and step - saved >= config.checkpoint_interval:
                write_resume_state(out, config, {"model": model.state_dict(), "optimiser": optimiser.state_dict(),
                                                 "schedule": schedule.state_dict(), "rng": rng_state(), "step": step,
                                                 "epoch": epoch, "logged": logged, "window": window})
                saved = step
                crash_point("encoder-pretrain-resume-state")
    description = {"cameras": cameras, "vision_backbone": config.vision_backbone, "image_shape": [channels, height, width],
                   "gap": config.gap, "steps": config.steps, "frames": pairs,
                   "stores": [repo_relative(store.path) for store in stores], "loss_first": logged[0],
                   "loss_last": logged[-1], "config": asdict(config), "code_version": code_version()}
    save_encoders(model.encoders, description, out)
    shutil.rmtree(out / RESUME, ignore_errors=True)
    return description


def config_record(config: EncoderPretrainConfig) -> dict:
    """``config`` as its JSON record reads back (tuples as lists)."""
    return json.loads(json.dumps(asdict(config)))


def training_differs(record: dict, config: EncoderPretrainConfig) -> list[str]:
    """The options in which a resume state's recorded config trains otherwise than ``config``."""
    return [key for key, value in config_record(config).items()
            if key not in ("out", "checkpoint_interval") and record.get(key) != value]


def write_resume_state(out: Path, config: EncoderPretrainConfig, state: dict) -> None:
    """``state`` as ``out/resume/step_N.pt`` and its record ``step_N.json`` (the config, the .pt's sha256), written
    in that order, so a crash leaves the previous pair whole; then the older pairs go."""
    directory = out / RESUME
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data, name = buffer.getvalue(), f"step_{state['step']:08d}"
    staging = directory / f".{name}.pt.tmp"
    staging.write_bytes(data)
    os.replace(staging, directory / f"{name}.pt")
    write_json_atomic(directory / f"{name}.json", {"step": state["step"], "config": config_record(config),
                                                   "sha256": hashlib.sha256(data).hexdigest()})
    for older in directory.glob("step_*"):
        if older.name.split(".")[0] < name:
            older.unlink()


def read_resume_state(out: Path, config: EncoderPretrainConfig) -> dict | None:
    """The newest intact resume state in ``out/resume`` (a one-line warning for each damaged one skipped), or
    None; a one-line ``ValueError`` where it is of another config. Read as tensors and plain containers only
    (``weights_only``): loading never runs code from the file."""
    for record_path in sorted((out / RESUME).glob("step_*.json"), reverse=True):
        try:
            record = json.loads(record_path.read_text())
            data = record_path.with_suffix(".pt").read_bytes()
            if hashlib.sha256(data).hexdigest() != record["sha256"]:
                raise ValueError("its sha256 does not match its record's")
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as error:  # unreadable JSON, a missing file, foreign content: skipped, never trained on
            warn(f"{repo_relative(record_path.with_suffix('.pt'))} is damaged ({one_line(error)}): skipped")
            continue
        if differ := training_differs(record["config"], config):
            raise ValueError(f"{repo_relative(out)} holds a pretraining of another config ("
                             + ", ".join(f"--{key.replace('_', '-')} {record['config'].get(key)}" for key in differ)
                             + f"): give this one another --out, or delete {repo_relative(out / RESUME)}")
        return state
    return None


def save_encoders(encoders: nn.ModuleDict, description: dict, out: Path) -> None:
    """``encoders.safetensors`` and ``encoders.json`` (``description`` and the weights' sha256) in ``out``."""
    data = save_safetensors({key: value.detach().contiguous() for key, value in encoders.state_dict().items()})
    out.mkdir(parents=True, exist_ok=True)
    (out / WEIGHTS).write_bytes(data)
    write_json_atomic(out / DESCRIPTION, {**description, "sha256": hashlib.sha256(data).hexdigest()})


def load_encoders(policy: nn.Module, directory: Path) -> dict:
    """Start a cnn ``policy``'s encoders from ``directory``'s pretrained ones; their description. A one-line
    ``ValueError`` where the files are missing, damaged or foreign, or fit other cameras, backbone or images."""
    try:
        description = json.loads((directory / DESCRIPTION).read_text())
        data = (directory / WEIGHTS).read_bytes()
    except (OSError, ValueError) as error:
        raise ValueError(f"--init-encoders {directory}: {one_line(error)}") from None
    if not isinstance(description, dict) or hashlib.sha256(data).hexdigest() != description.get("sha256"):
        raise ValueError(f"--init-encoders {directory}: {WEIGHTS} is damaged: its sha256 does not match "
                         f"{DESCRIPTION}'s")
    spec = policy.spec
    wanted = {"cameras": policy.cameras, "vision_backbone": spec.options.get("vision_backbone", "small"),
              "image_shape": list(spec.features[policy.cameras[0]])}
    for key, value in wanted.items():
        if description.get(key) != value:
            raise ValueError(f"--init-encoders {directory}: the encoders fit {key} {description.get(key)}, "
                             f"the policy has {value}")
    try:
        policy.encoders.load_state_dict(load_safetensors(data))
    except Exception as error:  # safetensors and torch raise many kinds on foreign content
        raise ValueError(f"--init-encoders {directory}: cannot load {WEIGHTS}: {one_line(error)}") from None
    return description


def main(argv: list[str] | None = None) -> None:
    quiet_closed_pipes()
    try:
        config = parse_config(EncoderPretrainConfig, __doc__, argv)
        description = pretrain(config)
    except (ValueError, FileNotFoundError) as error:
        fail(str(error))
    print(f"encoders in {config.out}: loss {description['loss_first']:.4f} -> {description['loss_last']:.4f}")


if __name__ == "__main__":
    main()
