"""The seed notes' table from run directories, and optionally their learning curves.

    python benchmark/compare.py runs/                       # every run under runs/
    python benchmark/compare.py runs/A runs/B --plot curves.png

Runs of any of the five scripts can be compared. Runs that differ only by --seed form one row:
their last episodic return is shown as mean ± std over the seeds (each seed's value is the mean
of its last --last games). The plot (needs matplotlib) draws the return against steps and
against wall-clock hours, side by side, one line per run, smoothed over 100 games.
"""
import argparse
import os
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def find_runs(paths):
    """Every directory under the given paths that holds TensorBoard events."""
    runs = []
    for path in paths:
        for folder, _, files in os.walk(path):
            if any(name.startswith("events.out.tfevents") for name in files):
                runs.append(folder)
    return sorted(runs)


def read_run(run_dir, last):
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    text_tag = next(t for t in events.Tags()["tensors"] if t.startswith("hyperparameters"))
    text = events.Tensors(text_tag)[0]  # written when the run starts: its time is the run's start
    table = text.tensor_proto.string_val[0].decode()
    params = dict(line.strip("|").split("|", 1) for line in table.splitlines()[2:])
    scalars = {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}
    returns = scalars.get("charts/episodic_return", [])
    every = [e for tag in scalars for e in scalars[tag]]
    return {
        "dir": run_dir,
        "implementation": params.get("exp_name", os.path.basename(run_dir)),
        "env_id": params.get("env_id", "?"),
        "seed": params.get("seed", "?"),
        "parallel": params.get("workers_count", params.get("envs_count", "1")),
        "learn_steps_period": params.get("learn_steps_period", "-"),
        "steps": max(e.step for e in every) if every else 0,
        "last_return": float(np.mean([e.value for e in returns[-last:]])) if returns else float("nan"),
        "updates": int(scalars["charts/updates"][-1].value) if "charts/updates" in scalars else None,
        "seconds": max(e.wall_time for e in every) - text.wall_time if every else 0.0,
        "curve": ([e.step for e in returns], [e.wall_time - text.wall_time for e in returns], [e.value for e in returns]),
    }


def hours(seconds):
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def table(runs):
    """Markdown rows, one per setting, seeds pooled."""
    groups = {}
    for run in runs:
        key = (run["implementation"], run["env_id"], run["parallel"], run["learn_steps_period"], run["steps"])
        groups.setdefault(key, []).append(run)
    lines = ["| implementation | game | steps | last episodic_return | envs_count (workers_count) | "
             "learn_steps_period | gradient updates | wall-clock | steps/s | seeds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (implementation, env_id, parallel, period, steps), group in sorted(groups.items()):
        returns = np.array([run["last_return"] for run in group])
        shown = f"{returns.mean():.1f} ± {returns.std():.1f}" if len(group) > 1 else f"{returns[0]:.1f}"
        shown = "no game ended" if np.isnan(returns).all() else shown
        updates = [run["updates"] for run in group if run["updates"] is not None]
        seconds = np.mean([run["seconds"] for run in group])
        sps = np.mean([run["steps"] / run["seconds"] for run in group if run["seconds"] > 0] or [float("nan")])
        lines.append(f"| {implementation} | {env_id} | {steps:,} | {shown} | {parallel} | {period} | "
                     f"{f'{int(np.mean(updates)):,}' if updates else '-'} | {hours(seconds)} | {sps:,.0f} | {len(group)} |")
    return "\n".join(lines)


def plot(runs, path, plt):
    figure, (by_steps, by_time) = plt.subplots(1, 2, figsize=(13, 4.5))
    for run in runs:
        steps, times, values = (np.array(v) for v in run["curve"])
        if len(values) == 0:
            continue
        window = min(100, len(values))
        smooth = np.convolve(values, np.ones(window) / window, mode="valid")
        label = f"{run['implementation']} ({run['parallel']}, K={run['learn_steps_period']}) seed {run['seed']}"
        by_steps.plot(steps[window - 1:], smooth, label=label)
        by_time.plot(times[window - 1:] / 3600, smooth, label=label)
    by_steps.set(xlabel="environment steps", ylabel="episodic return (mean of 100 games)", title="against steps")
    by_time.set(xlabel="wall-clock hours", title="against time")
    by_steps.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs_dirs", nargs="+", metavar="RUNS_DIR", help="run directories, or folders holding them")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the learning curves into this file")
    p.add_argument("--last", type=int, default=100, help="games averaged for the last episodic return")
    args = p.parse_args(argv)
    plt = None
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            p.error("argument --plot: needs matplotlib: pip install matplotlib")
    missing = [path for path in args.runs_dirs if not os.path.isdir(path)]
    if missing:
        p.error(f"argument RUNS_DIR: no such directory: {', '.join(missing)}")
    run_dirs = find_runs(args.runs_dirs)
    if not run_dirs:
        p.error(f"argument RUNS_DIR: no run directories (TensorBoard events) under {', '.join(args.runs_dirs)}")
    runs = [read_run(run_dir, args.last) for run_dir in run_dirs]
    print(table(runs))
    if plt is not None:
        plot(runs, args.plot, plt)
        print(f"\nlearning curves written to {args.plot}")


if __name__ == "__main__":
    sys.exit(main())
