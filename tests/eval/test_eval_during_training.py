"""Evaluating a run while it trains: training prunes the checkpoint being evaluated, and the evaluation
still finishes, on the checkpoint it read."""

import threading

import pytest

from eval import EvalConfig, run_evaluation
from train.checkpoint import checkpoint_dir, open_checkpoint

pytestmark = pytest.mark.slow


class PruningTrainer(threading.Thread):
    """Saves a new checkpoint of the run every 50 ms, keeping only the newest: as a training run with
    ``--checkpoint-interval 1 --keep-checkpoints 1`` prunes every step it has moved past."""

    def __init__(self, run):
        super().__init__(daemon=True)
        self.run_directory, self.stop, self.saved = run, threading.Event(), 0
        self.checkpoint = open_checkpoint(run)

    def run(self):
        while not self.stop.wait(0.05):
            self.checkpoint.step += 1
            self.checkpoint.save(self.run_directory, keep=1)
            self.saved += 1


def test_evaluate_finishes_while_training_prunes_the_checkpoint_it_evaluates(run_copy, tmp_path):
    trainer = PruningTrainer(run_copy)
    trainer.start()
    try:
        while not trainer.saved:
            trainer.stop.wait(0.01)
        steps = []
        for attempt in range(2):
            out = tmp_path / f"eval_{attempt}"
            info = run_evaluation(EvalConfig(checkpoint=str(run_copy), robots=1, episodes=1, workers=1,
                                             out=str(out), quiet=True))
            assert info["fleet"]["n_episodes"] == 1 and info["per_episode"][0]["error"] is None, info["per_episode"]
            assert not (out / ".checkpoint").exists()  # the workers' copy is not part of the output
            steps.append(info["checkpoint"]["step"])
    finally:
        trainer.stop.set()
        trainer.join()
    assert steps[0] > 20 and steps[1] > steps[0], steps
    pruned = [f"step_{step:08d}" for step in steps]
    assert not any((checkpoint_dir(run_copy) / name).exists() for name in pruned[:-1])  # each was pulled away
