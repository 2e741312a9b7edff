"""Train a fresh policy on what a fleet-learning run gathered: its seed demonstrations plus the expert's labels of
rounds 1..``--rounds``, from initialisation, as bc.py trains.

    torchrun --standalone --nproc_per_node=2 -m experiments.fleet_retrain \
        --fleet-run runs/fleet_learning/stall_10x_continuous/run --rounds 6 --data runs/fleet_learning/seed \
        --policy cnn --inputs proprio+cameras --hidden 256 256 --batch-size 64 --val-fraction 0 --seed 0 \
        --max-steps 5000 --ema-decay 0 --out runs/fleet_retrain/rounds_6

train/fleet_learn.py's rounds carry one policy on at a low learning rate; this asks what the same expert-labelled
frames teach a policy trained from the start on all of them, with the scaling sweep's recipe (5000 steps, no EMA).
``--data`` is the run's seed collection; the labels are read as the rounds train on them (train/fleet/labels.py),
so the expert-labelled frames are the run's accounts at round ``--rounds`` (``OUT/fleet/accounts.json`` of the
fleet run). Resumable as bc.py; ``evaluate --checkpoint OUT`` measures the result.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.options import check_options, parse_config
from dataset import FleetStore
from experiments.fleet_learning import accounted_rounds
from train.bc import one_line_errors, run_training
from train.config import TrainConfig
from train.fleet.labels import DeploymentLabels
from train.fleet_learn import round_directory


@dataclass
class FleetRetrainConfig(TrainConfig):
    fleet_run: str = field(default="", metadata={
        "help": "a train/fleet_learn.py run (its --out): the round stores whose labels are added"})
    rounds: int = field(default=1, metadata={"help": "add the labels of rounds 1..N"})

    def __post_init__(self):
        TrainConfig.__post_init__(self)
        check_options(self, ("rounds",), lambda value: value >= 1, "must be at least 1")
        finished = accounted_rounds(Path(self.fleet_run))
        if missing := [r for r in range(1, self.rounds + 1) if r not in finished]:
            raise ValueError(f"--fleet-run {self.fleet_run or '(none)'} has not finished round {missing[0]}")


def main(argv: list[str] | None = None) -> None:
    config = parse_config(FleetRetrainConfig, __doc__, argv)
    with one_line_errors(sys.argv[1:] if argv is None else argv, Path(config.out)):
        rounds = [FleetStore.open(round_directory(Path(config.fleet_run), r)) for r in range(1, config.rounds + 1)]
        run_training(config, DeploymentLabels(rounds))


if __name__ == "__main__":
    main()
