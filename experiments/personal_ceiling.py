"""How far personal weights could lift a site: fine-tune a federated policy on each group's own data, then evaluate.

    .venv/bin/python -m experiments.personal_ceiling        # after experiments.fleet_vs_single (~1 min)

fleet_vs_single's personalised run did not raise its worst site. This asks whether any
personalisation could have, with the data each site has. It takes a trained run (``--run``,
default fleet_vs_single's FedAvg policy) and, for each variant below, fine-tunes a copy of
its policy on each group's own episodes (``--epochs`` passes, AdamW at ``--lr``). The results
become the copy's personal weights (``Checkpoint.personal``, which ``evaluate`` gives each
robot), and the fleet is evaluated on fleet_vs_single's held-out seeds:

- ``site head`` / ``robot head``: only the head trains, the body frozen: personal heads
  fitted to their group's data, as far as a head can go on its own;
- ``site policy``: every weight trains: a whole policy per site, more than any head can do.

Writes experiments/results/personal_ceiling.json and a table in docs/federated.md.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import sim  # noqa: F401  (first: headless rendering before mujoco loads)

import torch

from benchmarks.common import machine_facts, write_results
from core.errors import fail
from core.files import from_repo
from core.options import parse_config
from dataset import FleetStore
from dataset.episodes import select_episodes
from dataset.loader import make_dataloader
from dataset.windows import FleetWindowDataset, WindowSpec
from eval import EvalConfig, run_evaluation
from experiments.render import write
from sim.fleet import SITES
from train.checkpoint import latest_checkpoint, load_policy, open_checkpoint
from train.schedule import adamw

VARIANTS = {"site head": ("site", "head"), "robot head": ("robot", "head"), "site policy": ("site", "all")}


@dataclass
class CeilingConfig:
    run: str = field(default="runs/fleet_vs_single/fedavg", metadata={"help": "the trained run to personalise"})
    out: str = field(default="runs/personal_ceiling", metadata={"help": "directory for the fine-tuned copies"})
    epochs: int = field(default=20, metadata={"help": "fine-tuning passes over each group's episodes"})
    lr: float = field(default=5e-4, metadata={"help": "fine-tuning AdamW learning rate"})
    batch_size: int = field(default=256, metadata={"help": "windows per fine-tuning step"})
    eval_episodes: int = field(default=150, metadata={"help": "evaluation episodes per robot (held-out seeds)"})
    workers: int = field(default=2, metadata={"help": "local dask workers for evaluation"})
    seed: int = field(default=0, metadata={"help": "seeds the fine-tuning shuffles"})
    docs: str = field(default="docs/federated.md", metadata={"help": "markdown file for the table"})
    results_dir: str = field(default="experiments/results",
                             metadata={"help": "where personal_ceiling.json is written"})


def fine_tune(run: Path, store: FleetStore, robots: list[int], part: str, config: CeilingConfig) -> dict:
    """The weights ``part`` (head or all) of the run's policy after fine-tuning on ``robots``' episodes."""
    torch.manual_seed(config.seed)
    policy, _ = load_policy(run, robot_id=robots[0])
    spec = policy.spec
    window = WindowSpec.of(spec.n_obs_steps, spec.horizon, [*spec.features, "action"], spec.action_start)
    episodes = FleetWindowDataset(store, select_episodes(store, robots=robots), window, mode="memory")
    loader = make_dataloader(episodes, batch_size=min(config.batch_size, len(episodes)), seed=config.seed)
    trained = set(policy.head_keys()) if part == "head" else {name for name, _ in policy.named_parameters()}
    for name, parameter in policy.named_parameters():
        parameter.requires_grad_(name in trained)
    optimizer = adamw(policy.parameters(), lr=config.lr)
    policy.train()
    for _ in range(config.epochs):
        for batch in loader:
            loss = policy(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return {name: value.detach().clone() for name, value in policy.state_dict().items() if name in trained}


def personalise(run: Path, copy: Path, store: FleetStore, group: str, part: str, config: CeilingConfig) -> None:
    """A copy of ``run`` whose every robot has its group's fine-tuned weights as personal weights."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run, copy, symlinks=True)  # checkpoints/last stays a link to the copy's own step file
    checkpoint = open_checkpoint(copy, training=True)
    groups = ([[robot] for robot in store.robots] if group == "robot" else
              [[r for r in store.robots if store.site_of(r) == site] for site in SITES])
    checkpoint.personal = {}
    for robots in filter(None, groups):
        weights = fine_tune(run, store, robots, part, config)
        checkpoint.personal.update({robot: weights for robot in robots})
    checkpoint.config = {**checkpoint.config, "personal_ceiling": {"group": group, "part": part, **asdict(config)}}
    checkpoint.save(copy)


def main(argv: list[str] | None = None) -> dict:
    config = parse_config(CeilingConfig, __doc__, argv)
    run, out = Path(config.run), Path(config.out)
    if latest_checkpoint(run) is None:
        fail(f"no checkpoint in --run {run} (run experiments.fleet_vs_single first)")
    store = FleetStore.open(from_repo(open_checkpoint(run).data))
    command = "python -m experiments.personal_ceiling" + "".join(f" {a}" for a in (argv if argv is not None
                                                                                   else sys.argv[1:]))
    results = {}
    for variant, (group, part) in {"as trained": (None, None), **VARIANTS}.items():
        checkpoint = run
        if group is not None:
            checkpoint = out / variant.replace(" ", "_")
            personalise(run, checkpoint, store, group, part, config)
        info = run_evaluation(EvalConfig(checkpoint=str(checkpoint), robots=len(store.robots),
                                         episodes=config.eval_episodes, out=str(out / f"eval_{checkpoint.name}"),
                                         workers=config.workers, overwrite=True, quiet=True))
        results[variant] = {"fleet": info["fleet"]["pc_success"], "ci95": info["fleet"]["ci95"],
                            "per_site": {site: info["per_site"][site]["pc_success"] for site in info["per_site"]}}
        print(f"{variant}: fleet success {results[variant]['fleet']:.1f}%")

    result = {"experiment": "personal_ceiling", "machine": machine_facts(), "config": asdict(config),
              "command": command, "results": results}
    write_results("personal_ceiling", result, Path(config.results_dir))
    print(write("personal_ceiling", result, config.docs))
    return results


def section_text(result: dict) -> str:
    """The docs section of a results file: each variant's success, and what it does for the worst site."""
    config, results, facts, command = (result[key] for key in ("config", "results", "machine", "command"))
    worst = min(results["as trained"]["per_site"], key=results["as trained"]["per_site"].get)
    lines = [f"Measured {facts['date']} on {facts['cores']} cores, code {facts['code_version']}: `{config['run']}` "
             f"fine-tuned {config['epochs']} epochs at lr {config['lr']}, every robot x {config['eval_episodes']} "
             "held-out episodes.", "", "```bash", command, "```", "",
             "| personal weights | fleet success | " + " | ".join(SITES) + f" | {worst} vs as trained |",
             "|---|---|" + "---|" * len(SITES) + "---|"]
    for variant, figures in results.items():
        low, high = figures["ci95"]
        gain = figures["per_site"][worst] - results["as trained"]["per_site"][worst]
        lines.append(f"| {variant} | {figures['fleet']:.1f}% [{low:.0f}, {high:.0f}] | "
                     + " | ".join(f"{figures['per_site'].get(site, float('nan')):.1f}%" for site in SITES)
                     + f" | {gain:+.1f} points |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
