"""An experiment's results file: the figures of its test evaluations, where each came from, and a digest.

A compare stage reads the eval_info.json of the evaluations it names and writes one file:

- ``results``: per evaluation, what is reported (success, its 95% interval, episodes, split, and how many test
  evaluations its question has had);
- ``provenance``: every stage's command line, the code versions, and per evaluation the sha256 of the checkpoint
  weights and of the training store's manifest it read, its split, robots and episode seeds;
- ``payload_sha256``: the sha256 of the canonical JSON (sorted keys, no whitespace) of everything else.

A figure edited by hand no longer matches the digest: ``check_results`` refuses the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from core.files import code_version, file_sha256, repo_relative, write_json_atomic
from experiments.declaration import Declaration

DIGEST = "payload_sha256"


def compared_results(declaration: Declaration, declaration_path: Path, evaluations: dict[str, Path],
                     commands: dict[str, str], side_by_side: dict | None = None) -> dict:
    """The results of ``declaration`` from its test ``evaluations`` (stage name -> evaluation folder), with
    ``commands`` (stage name -> command line) in the provenance, and ``side_by_side`` (evaluate beside
    lerobot-eval per task, experiments/lerobot_stages.py) where the compare stage asked for it; sealed with its
    digest."""
    infos = {name: _test_evaluation(name, folder) for name, folder in evaluations.items()}
    results = {
        "name": declaration.name, "question": declaration.question, "claim": declaration.claim,
        "results": {name: _reported(info) for name, info in infos.items()},
        "provenance": {
            "declaration": repo_relative(declaration_path), "declaration_sha256": file_sha256(declaration_path),
            "code_version": code_version(), "commands": commands,
            "evaluations": {name: _measured(info) for name, info in infos.items()}},
        **({"side_by_side": side_by_side} if side_by_side is not None else {}),
    }
    return {**results, DIGEST: payload_sha256(results)}


def write_results(path: Path, results: dict) -> None:
    """Write ``results`` (sealed by ``compared_results``) to ``path``, its folder made if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, results)


def payload_sha256(results: dict) -> str:
    """The sha256 of the canonical JSON (sorted keys, no whitespace) of ``results`` less its own digest."""
    payload = {key: value for key, value in results.items() if key != DIGEST}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_results(path: str | Path) -> None:
    """Raise a one-line ``ValueError`` unless the results file at ``path`` matches its ``payload_sha256``."""
    try:
        results = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable results file ({str(error).splitlines()[0]})") from None
    if not isinstance(results, dict) or DIGEST not in results:
        raise ValueError(f"{path} has no {DIGEST}: it was not written by the experiment runner")
    if payload_sha256(results) != results[DIGEST]:
        raise ValueError(f"{path} does not match its {DIGEST}: it was changed after the runner wrote it")


def _test_evaluation(name: str, folder: Path) -> dict:
    info = json.loads((folder / "eval_info.json").read_text())
    if info["setup"]["split"] != "test":  # the declaration was checked; this guards the file read
        raise ValueError(f"evaluation {name} in {folder} is on the {info['setup']['split']} split, not test")
    return info


def _figures(summary: dict) -> dict:
    return {key: summary[key] for key in ("pc_success", "ci95", "n_episodes")}


def _breakdown(info: dict) -> dict:
    """Per site, and with many tasks per task and per difficulty group, as an evaluation reported them."""
    tables = ("per_site", "per_task", "per_group") if "per_group" in info else ("per_site",)
    return {table: {name: _figures(summary) for name, summary in info[table].items()} for table in tables}


def _reported(info: dict) -> dict:
    """What a test evaluation reports: the fleet's figures and their breakdown, and the expert's on the same
    episodes where it ran beside (``evaluate --compare``)."""
    expert = info.get("expert")
    return {**_figures(info["fleet"]), "split": info["setup"]["split"], "question": info["question"],
            "test_evaluations": info["test_evaluations"], **_breakdown(info),
            **({"expert": {**_figures(expert["fleet"]), **_breakdown(expert)}} if expert else {})}


def _measured(info: dict) -> dict:
    checkpoint = info.get("checkpoint") or {}
    config = info["config"]
    return {"code_version": info["code_version"], "checkpoint_sha256": checkpoint.get("sha256"),
            "store_manifest_sha256": info["setup"].get("store_manifest_sha256"), "split": info["setup"]["split"],
            "robots": info["setup"]["robot_ids"], "episodes_per_robot": config["episodes"],
            "seeds": sorted({episode["seed"] for episode in info["per_episode"]})}
