"""The table of act trained on one GPU and evaluated on the CPU machine (docs/evaluation.md), a function of
experiments/results/act_gpu_pick_place.json's content; ``python -m experiments.render`` writes it."""

from __future__ import annotations

LOSS_EVERY = 1000  # the validation losses shown: every this many steps, and the last


def _success(summary: dict, per_site: dict) -> str:
    low, high = summary["ci95"]
    sites = ", ".join(f"{site} {value:.1f}%" for site, value in per_site.items())
    return f"{summary['pc_success']:.1f}% [{low:.0f}, {high:.0f}]: {sites}"


def section_text(result: dict) -> str:
    """Where each figure was measured, and the figure: collection and training time, training speed and where a
    step's time goes, validation losses, success at the last and an earlier checkpoint, the expert's on the same
    seeds, and how far the two machines' renderers differ."""
    trained, evaluated = result["trained_on"], result["evaluated_on"]
    gpu, cpu = "GPU", "CPU"
    seconds, split = trained["seconds"], trained["time_split_after_first_window"]
    step_time = sum(split.values())
    batch = trained["config"]["effective_batch"]
    window_rate = trained["samples_per_s_median_window"]
    losses = {int(step): loss for step, loss in result["validation_loss"].items()}
    shown = [step for step in sorted(losses) if step % LOSS_EVERY == 0 or step == max(losses)]
    earlier = result["earlier_checkpoint"]
    renders = {name.rsplit(".", 1)[1]: check for name, check in result["render_check"].items()
               if name.startswith("observation.images.")}
    rows = [
        ("collect the demonstrations", gpu, f"{seconds['collect']} s"),
        (f"load them and train {result['checkpoint_step']} steps", gpu,
         f"{seconds['train_including_loading']} s, of which {seconds['training_steps']:.0f} s of steps"),
        ("training speed (median log window)", gpu, f"{window_rate:,.0f} windows/s ({window_rate / batch:.0f} steps/s "
                                                    f"at batch {batch})"),
        ("where a step's time goes", gpu, f"{split['compute_s'] / step_time:.0%} in the step, "
                                          f"{split['data_wait_s'] / step_time:.0%} waiting for data"),
        ("validation loss at steps " + " / ".join(map(str, shown)), gpu,
         " / ".join(f"{losses[step]:.3f}" for step in shown)),
        (f"**act, step {result['checkpoint_step']}**", cpu,
         f"**{_success(result['policy'], result['policy_per_site'])}**"),
        (f"act, step {earlier['step']} of the same run", cpu, _success(earlier["policy"], earlier["policy_per_site"])),
        ("expert, same seeds" if result["same_seeds_as_expert"] else "expert", cpu,
         _success(result["expert"], result["expert_per_site"])),
        ("renderer shift: mean level difference, share of values off by more than 2", "GPU against CPU",
         "; ".join(f"{camera} {check['mean_abs']:.1f}, {check['share_over_2_levels']:.0%}"
                   for camera, check in renders.items())),
    ]
    table = ["| | where | figure |", "|---|---|---|",
             *(f"| {what} | {where} | {figure} |" for what, where, figure in rows)]
    commands = "\n".join([*trained["commands"], evaluated["command"]])
    return (f"Trained {trained['date']} on the GPU machine, {trained['device']}, code {trained['code_version']}; "
            f"evaluated on the CPU machine, {evaluated['device']}, code {evaluated['code_version']}. The commands:"
            f"\n\n```bash\n{commands}\n```\n\n" + "\n".join(table))
