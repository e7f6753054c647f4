"""The seed notes' table from run directories or results CSVs, and optionally their learning curves.

    python experiments/compare.py runs/                       # every run under runs/
    python experiments/compare.py experiments/results --reach 10 --plot curves.png
    python experiments/compare.py --export experiments/results runs/  # keep runs as CSVs (see experiments/results/README.md)

Runs of any of the six scripts can be compared, from their run directories (TensorBoard events)
or from the CSVs sweep.py and --export write; a run found both ways counts once, and a run of
--eval-model (a saved model watched, nothing learnt) not at all. Runs whose
hyperparameters differ only by --seed (or by flags that change nothing learnt: saving, watching,
video, W&B) form one row: their return is shown as mean ± std over the seeds (each seed's value is the
mean of its last --last games). The implementation column names the flags in which rows of one
script differ. --reach SCORE adds the steps (with the DQN scripts' gradient updates) and the
wall-clock minutes until the mean of the last --last games first reaches SCORE. The plot (needs
matplotlib) draws one line per row of the table: each seed's return smoothed over 100 games,
interpolated onto the steps the seeds share, and averaged over the seeds, with the seeds' range
(min to max) shaded. It draws them against environment steps and, beside that, against gradient
updates, which shows the DQN scripts' runs only (see updates_at). A row whose seeds' curves share
no step (runs of a few games) is not drawn, and named as such. --wall-clock draws the second panel
against wall-clock minutes from each run's start instead: only for runs that each ran alone on the
machine, since runs that shared cores or were paused would be drawn as if slow.

    python experiments/compare.py experiments/results_alone --reach 5 --wall-clock --plot time.png
"""

import argparse
import json
import os
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# hyperparameters with a column of their own, or that differ between seeds anyway
SHOWN = ("exp_name", "seed", "env_id", "total_timesteps", "envs_count", "workers_count", "learn_steps_period")
# flags that change nothing a run learns (saving, watching): runs that differ only in these, or
# that ran before such a flag existed, are one setting
PLUMBING = ("seed", "save_model", "save_every", "resume", "keep_checkpoint", "keep_replay")  # keep_replay: its old name
PLUMBING += ("eval_model", "eval_episodes", "eval_epsilon", "capture_video")
PLUMBING += ("track", "wandb_project_name", "wandb_entity")  # where the logs are mirrored
PLUMBING += ("cuda",)  # where it ran: on a CPU-only machine --no-cuda changes nothing


def find_runs(paths):
    """Run directories (folders holding TensorBoard events) and results CSVs under the given paths.
    A CSV is named after its run directory: where both are found, the run is read once."""
    found = {}
    for path in map(os.path.normpath, paths):  # runs/A/ names the run A, as runs/A does
        if path.endswith(".csv"):
            found.setdefault(os.path.basename(path)[:-4], path)
        for folder, _, files in os.walk(path):
            if any(name.startswith("events.out.tfevents") for name in files):
                found.setdefault(os.path.basename(folder), folder)
            for name in sorted(files):
                if name.endswith(".csv"):
                    found.setdefault(name[:-4], os.path.join(folder, name))
    return [found[name] for name in sorted(found)]


def is_evaluation(run):
    """A run of --eval-model: a saved model watched for a few games, nothing learnt; not a row of the table."""
    return run["params"].get("eval_model", "None") != "None"


def free_path(path):
    """PATH, or PATH with _2, _3... before its extension where that is taken: nothing is written over."""
    stem, extension = os.path.splitext(path)
    number = 1
    while os.path.exists(path):
        number += 1
        path = f"{stem}_{number}{extension}"
    return path


def read_run(run_dir):
    """A run from its TensorBoard events: hyperparameters, totals, and one (step, seconds, return) per game."""
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    text_tag = next((t for t in events.Tags()["tensors"] if t.startswith("hyperparameters")), None)
    if text_tag is None:  # another program's events, or a file cut short before the run's start was written
        raise ValueError("its TensorBoard events hold no hyperparameters table, which each of these scripts writes first")
    starts = events.Tensors(text_tag)  # written when the run starts, and again at each --resume
    table = starts[0].tensor_proto.string_val[0].decode()
    params = dict(line.strip("|").split("|", 1) for line in table.splitlines()[2:])
    scalars = {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}
    returns = scalars.get("charts/episodic_return", [])
    every = [e for tag in scalars for e in scalars[tag]]
    # The run's own seconds: from its first start, less each stop (a resume's start after the last event before it)
    stops = []
    for earlier, start in zip(starts, starts[1:]):  # a resume that logged nothing before the next: from its start
        before = [e.wall_time for e in every if earlier.wall_time <= e.wall_time < start.wall_time]
        stops.append((start.wall_time, start.wall_time - max(before, default=earlier.wall_time)))

    def seconds(wall_time):  # rounded to the millisecond, as the CSV keeps them, so both give the same table
        stopped = sum(length for start, length in stops if start <= wall_time)
        return round(wall_time - starts[0].wall_time - stopped, 3)

    return {
        "name": os.path.basename(os.path.normpath(run_dir)),
        "command": None,
        "params": params,
        "steps": max(e.step for e in every) if every else 0,
        "seconds": seconds(max(e.wall_time for e in every)) if every else 0.0,
        "updates": int(scalars["charts/updates"][-1].value) if "charts/updates" in scalars else None,
        "curve": ([e.step for e in returns], [seconds(e.wall_time) for e in returns], [e.value for e in returns]),
    }


def write_csv(run_dir, path, command=None, run=None):
    """The run as a small CSV: `# key: value` header lines, then one `step,return,seconds` row per game.
    run: read_run(run_dir), where already read. Mode "x": an existing file is never overwritten (FileExistsError)."""
    run = run or read_run(run_dir)
    params = run["params"]
    script = command.split()[1] if command else params.get("exp_name", "?") + ".py"
    with open(path, "x") as f:
        f.write(f"# command: {command or f'not recorded (exported from {run_dir})'}\n")
        f.write(f"# script: {script}\n# env_id: {params.get('env_id', '?')}\n# seed: {params.get('seed', '?')}\n")
        f.write(f"# steps: {run['steps']}\n# seconds: {float(run['seconds'])!r}\n")
        f.write(f"# updates: {'-' if run['updates'] is None else run['updates']}\n")
        f.write(f"# hyperparameters: {json.dumps(params)}\n")
        f.write("step,return,seconds\n")
        for step, seconds, value in zip(*run["curve"]):
            f.write(f"{step},{float(value)!r},{float(seconds)!r}\n")


def read_csv(path):
    """A run from its CSV, as read_run gives it."""
    header, rows = {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("# "):
                key, value = line[2:].rstrip("\n").split(": ", 1)
                header[key] = value
            elif line.strip() and not line.startswith("step,"):
                step, value, seconds = line.split(",")
                rows.append((int(step), float(seconds), float(value)))
    if not isinstance(params := json.loads(header["hyperparameters"]), dict):
        raise ValueError("its hyperparameters line holds no table of flags")
    return {
        "name": os.path.basename(path)[: -len(".csv")],
        "command": header["command"],
        "params": params,
        "steps": int(header["steps"]),
        "seconds": float(header["seconds"]),
        "updates": None if header["updates"] == "-" else int(header["updates"]),
        "curve": tuple(list(column) for column in zip(*rows)) if rows else ([], [], []),
    }


def reached_at(run, score, last):
    """Index of the game that makes the mean of `last` consecutive games first reach score; None if never."""
    returns = np.array(run["curve"][2])
    if len(returns) < last:
        return None
    sums = np.convolve(returns, np.ones(last), mode="valid")  # sums, not means: exact for whole scores
    hits = np.flatnonzero(sums >= score * last - 1e-9)  # (1.1 * 100 is 110.00000000000001 in floating point)
    return hits[0] + last - 1 if len(hits) else None


def steps_run(run):
    """The run's --total-timesteps, or fewer where it stopped early. Several environments step
    together, so a finished run can end a few steps past its total: those steps do not split seeds."""
    return min(run["steps"], int(run["params"].get("total_timesteps", run["steps"])))


def settings(runs):
    """[(label, runs)]: runs whose hyperparameters differ only by seed or PLUMBING (and that ran as
    many steps) pooled, each labelled by its script and the flags in which it differs from the script's other rows."""
    groups = {}
    for run in runs:
        params = {k: v for k, v in run["params"].items() if k not in PLUMBING}
        groups.setdefault((json.dumps(params, sort_keys=True), steps_run(run)), []).append(run)
    labelled = []
    for group in groups.values():
        params = group[0]["params"]
        name = params.get("exp_name", group[0]["name"])
        others = [g[0]["params"] for g in groups.values() if g[0]["params"].get("exp_name") == params.get("exp_name")]
        flags = [k for k in params if k not in SHOWN + PLUMBING and len({str(p.get(k)) for p in others}) > 1]
        label = name
        for k in flags:
            flag, value = "--" + k.replace("_", "-"), params[k]
            label += {"True": f" {flag}", "False": f" --no-{flag[2:]}"}.get(value, f" {flag} {value}")
        labelled.append((label, group))
    return sorted(labelled, key=lambda item: (item[0], steps_run(item[1][0])))


def hours(seconds):
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def reach_cells(group, score, last):
    """The steps (with the DQN scripts' gradient updates) and the wall-clock minutes until a run's
    mean return first reaches score, averaged over the seeds that got there."""
    reached = [(run, i) for run, i in ((run, reached_at(run, score, last)) for run in group) if i is not None]
    if not reached:
        return "not reached", "not reached"
    steps = np.mean([run["curve"][0][i] for run, i in reached])
    updates = [updates_at(run["params"], run["curve"][0][i]) for run, i in reached]
    minutes = np.mean([run["curve"][1][i] / 60 for run, i in reached])
    cells = (f"{steps:,.0f}" + ("" if None in updates else f" ({np.mean(updates):,.0f} updates)"), f"{minutes:.1f}")
    return cells if len(reached) == len(group) else tuple(f"{len(reached)}/{len(group)} reached: {cell}" for cell in cells)


def table(runs, last=100, reach=None):
    """Markdown rows, one per setting, seeds pooled."""
    lines = [
        f"| implementation | game | steps | seeds | envs_count (workers_count) | learn_steps_period | "
        f"gradient updates | episodic_return, last {last} games | steps/s | wall-clock |"
        + (f" steps to {reach:g} | minutes to {reach:g} |" if reach is not None else ""),
        "|---" * (10 + 2 * (reach is not None)) + "|",
    ]
    for label, group in settings(runs):
        params = group[0]["params"]
        returns = np.array([np.mean(run["curve"][2][-last:]) if run["curve"][2] else np.nan for run in group])
        shown = f"{returns.mean():.1f} ± {returns.std():.1f}" if len(group) > 1 else f"{returns[0]:.1f}"
        shown = "no game ended" if np.isnan(returns).all() else shown
        updates = [run["updates"] for run in group if run["updates"] is not None]
        seconds = np.mean([run["seconds"] for run in group])
        sps = np.mean([run["steps"] / run["seconds"] for run in group if run["seconds"] > 0] or [np.nan])
        lines.append(
            f"| {label} | {params.get('env_id', '?')} | {steps_run(group[0]):,} | {len(group)} | "
            f"{params.get('workers_count', params.get('envs_count', params.get('num_envs', '1')))} | "
            f"{params.get('learn_steps_period', '-')} | {f'{int(np.mean(updates)):,}' if updates else '-'} | "
            f"{shown} | {'-' if np.isnan(sps) else f'{sps:,.0f}'} | {hours(seconds)} |"
            + (" {} | {} |".format(*reach_cells(group, reach, last)) if reach is not None else "")
        )
    return "\n".join(lines)


def updates_at(params, steps):
    """Gradient updates made by each of these global steps, or None for a script without the DQN
    scripts' rule (a2c_batched, ppo_atari). The DQN scripts make one update per learn_steps_period
    steps once global_step > learning_starts, catching up before they log the step's games: from the
    hyperparameters every run records, so the CSVs need no column of updates."""
    if "learning_starts" not in params or "learn_steps_period" not in params:
        return None
    return np.maximum(np.asarray(steps, dtype=np.int64) - int(params["learning_starts"]), 0) // int(
        params["learn_steps_period"]
    )


def seeds_mean(curves):
    """The mean and the range (min, max) of several seeds' curves, each a (steps, values) pair
    with increasing steps: on the steps where every curve has a value (from the latest first step
    to the earliest last one), each curve linearly interpolated at every step any of them has
    there. None where the curves share no step."""
    first, last = max(steps[0] for steps, _ in curves), min(steps[-1] for steps, _ in curves)
    grid = np.unique(np.concatenate([steps for steps, _ in curves]))
    grid = grid[(grid >= first) & (grid <= last)]
    if len(grid) == 0:
        return None
    values = np.array([np.interp(grid, steps, smooth) for steps, smooth in curves])
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def legend_label(label, group):
    params = group[0]["params"]
    envs = str(params.get("envs_count", params.get("num_envs", "1")))  # num_envs: CleanRL's name
    parallel = f"{params['workers_count']} workers" if "workers_count" in params else f"{envs} env{'s' * (envs != '1')}"
    period = f", K={params['learn_steps_period']}" if "learn_steps_period" in params else ""
    return f"{label} ({parallel}{period}), {len(group)} seed{'s' * (len(group) > 1)}"


def thousands(x, position=None):
    """An axis tick as 0, 250k or 1.5M."""
    return f"{x / 1e6:g}M" if abs(x) >= 1e6 else f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def plot(runs, path, plt, reach=None, window=100, wall_clock=False):
    """One line per setting (the rows of the table): the mean over its seeds of each seed's return
    smoothed over `window` games, its seeds' range (min to max) shaded. Against environment steps,
    and, where there are DQN runs, against gradient updates (see updates_at); with wall_clock,
    against the minutes since each run's start instead. Returns the labels of the settings left
    out because their seeds' curves share no step."""
    drawn = [(label, group) for label, group in settings(runs) if any(run["curve"][2] for run in group)]
    # in the legend, a script's settings in order of their parallelism and their K
    drawn.sort(
        key=lambda item: (
            item[0],
            *(int(item[1][0]["params"].get(k, 0)) for k in ("workers_count", "envs_count", "learn_steps_period")),
            steps_run(item[1][0]),
        )
    )
    with_updates = not wall_clock and any(updates_at(group[0]["params"], []) is not None for _, group in drawn)
    two_panels = with_updates or wall_clock
    columns = 2 if two_panels else 1  # of the legend, below the panels: it covers no curve
    legend_inches = 0.4 + 0.17 * -(-len(drawn) // columns)
    width, height = (14, 5 + legend_inches) if two_panels else (8, 5 + legend_inches)
    figure, panels = plt.subplots(1, 2 if two_panels else 1, figsize=(width, height), squeeze=False)
    by_steps, by_updates = (panels[0][0], panels[0][1]) if with_updates else (panels[0][0], None)
    by_minutes = panels[0][1] if wall_clock else None
    left_out = []
    for color, (label, group) in enumerate(drawn):
        curves, timed = [], []  # each seed's smoothed return against its steps, and against its minutes
        for run in group:
            steps, seconds, values = (np.array(v) for v in run["curve"])
            if len(values):
                smoothed = min(window, len(values))
                smooth = np.convolve(values, np.ones(smoothed) / smoothed, mode="valid")
                curves.append((steps[smoothed - 1 :], smooth))
                timed.append((seconds[smoothed - 1 :] / 60, smooth))
        mean = seeds_mean(curves)
        if mean is None:
            left_out.append(label)
            continue
        grid, average, low, high = mean
        lines = [(by_steps, grid, average, low, high), (by_updates, updates_at(group[0]["params"], grid), average, low, high)]
        if wall_clock and seeds_mean(timed) is not None:
            lines.append((by_minutes, *seeds_mean(timed)))
        for axes, x, y, y_low, y_high in lines:
            if axes is None or x is None:
                continue
            axes.plot(x, y, color=f"C{color % 10}", label=legend_label(label, group) if axes is by_steps else None)
            if len(curves) > 1:
                axes.fill_between(x, y_low, y_high, color=f"C{color % 10}", alpha=0.2, linewidth=0)
    if by_minutes is not None:
        by_minutes.set(xlabel="wall-clock minutes from the run's start", title="against wall-clock time")
        if reach is not None:
            by_minutes.axhline(reach, color="gray", linestyle="--", linewidth=1)
    for axes in (by_steps, by_updates):
        if axes is not None:
            axes.xaxis.set_major_formatter(thousands)
            if reach is not None:
                axes.axhline(reach, color="gray", linestyle="--", linewidth=1)
    by_steps.set(xlabel="environment steps", ylabel=f"episodic return (mean of {window} games)", title="against steps")
    if by_updates is not None:
        # the scripts whose updates are not known from their hyperparameters: named, so their absence is not read as a result
        no_updates = sorted(
            {group[0]["params"].get("exp_name", label) for label, group in drawn if updates_at(group[0]["params"], []) is None}
        )
        by_updates.set(
            xlabel="gradient updates",
            title="against gradient updates" + (f" ({', '.join(no_updates)} not shown)" if no_updates else ""),
        )
    figure.tight_layout(rect=(0, legend_inches / height, 1, 1))
    by_steps.legend(
        loc="lower center",
        bbox_to_anchor=(0.5, 0),
        bbox_transform=figure.transFigure,
        ncol=columns,
        fontsize=8,
        title="mean over seeds; shaded: min to max",
        title_fontsize=8,
        frameon=False,
    )
    figure.savefig(path, dpi=110)
    return left_out


def positive_int(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of games, 1 or more, got {text!r}")
    return int(text)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("runs_dirs", nargs="+", metavar="RUN", help="run directories, results CSVs, or folders holding them")
    p.add_argument(
        "--plot", metavar="FILE.png", help="also draw the learning curves into this file (FILE_2.png... if it exists)"
    )
    p.add_argument("--last", type=positive_int, default=100, help="games averaged for the return and for --reach")
    p.add_argument(
        "--reach", type=float, metavar="SCORE", help="add the steps and minutes until the mean return reaches SCORE"
    )
    p.add_argument(
        "--wall-clock",
        action="store_true",
        help="with --plot: the second panel against wall-clock minutes (runs that each ran alone), not updates",
    )
    p.add_argument("--export", metavar="DIR", help="write each run directory as DIR/<run name>.csv instead of a table")
    args = p.parse_args(argv)
    plt = None
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.figure
            import matplotlib.pyplot as plt
        except ImportError:
            p.error("argument --plot: needs matplotlib: pip install matplotlib")
        formats = matplotlib.figure.Figure().canvas.get_supported_filetypes()  # {extension: description}
        if os.path.splitext(args.plot)[1][1:].lower() not in formats:
            p.error(f"argument --plot: {args.plot}: matplotlib writes only .{', .'.join(sorted(formats))} files")
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            p.error(f"argument --plot: no folder {folder} to write it into")
        if os.path.isdir(args.plot):
            p.error(f"argument --plot: {args.plot} is a folder, not a file")
    if args.wall_clock and not args.plot:
        p.error("argument --wall-clock: draws a panel of --plot; give --plot FILE.png too")
    if args.export and os.path.exists(args.export) and not os.path.isdir(args.export):
        p.error(f"argument --export: {args.export} is a file, not a folder")
    if args.reach is not None and not np.isfinite(args.reach):
        p.error(f"argument --reach: must be a finite score, got {args.reach}")
    missing = [path for path in args.runs_dirs if not os.path.exists(path)]
    if missing:
        p.error(f"argument RUN: no such file or directory: {', '.join(missing)}")
    sources = find_runs(args.runs_dirs)
    if not sources:
        p.error(f"argument RUN: no run directories (TensorBoard events) or results CSVs under {', '.join(args.runs_dirs)}")

    if args.export:
        try:
            os.makedirs(args.export, exist_ok=True)
        except OSError as error:  # a file on its path, no permission
            p.error(f"argument --export: cannot make the folder {args.export}: {error.strerror}")
        for run_dir in (source for source in sources if os.path.isdir(source)):
            path = os.path.join(args.export, os.path.basename(os.path.normpath(run_dir)) + ".csv")
            if os.path.exists(path):
                print(f"{path}: exists already, left as is")
                continue
            try:
                run = read_run(run_dir)
                if is_evaluation(run):
                    print(f"{run_dir}: a run of --eval-model (a saved model watched), not exported")
                    continue
                write_csv(run_dir, path, run=run)
            except ValueError as error:
                p.error(f"argument RUN: {run_dir} is not a run of these scripts: {error}")
            print(f"{path}: written from {run_dir}")
        return 0

    runs = []
    for source in sources:
        try:
            runs.append(read_run(source) if os.path.isdir(source) else read_csv(source))
        except (KeyError, ValueError) as error:  # a CSV of something else, or cut short; another program's events
            if os.path.isdir(source):
                p.error(f"argument RUN: {source} is not a run of these scripts: {error}")
            p.error(f"argument RUN: {source} is not a results CSV (see experiments/results/README.md): {error!r}")
    for run in filter(is_evaluation, runs):
        print(f"left out: {run['name']}, a run of --eval-model (a saved model watched, nothing learnt)")
    runs = [run for run in runs if not is_evaluation(run)]
    if not runs:
        p.error(f"argument RUN: only runs of --eval-model under {', '.join(args.runs_dirs)}: no training run to compare")
    print(table(runs, args.last, args.reach))
    if plt is not None:
        path = free_path(args.plot)  # an earlier figure of that name is kept
        left_out = plot(runs, path, plt, args.reach, wall_clock=args.wall_clock)
        print(f"\nlearning curves written to {path}")
        for label in left_out:
            print(f"not drawn: {label} (its seeds' curves share no step)")


if __name__ == "__main__":
    sys.exit(main())
