"""pqn_atari.py's steps/s against CleanRL's pqn_atari_envpool.py, each run alone, in turn, in one sitting.

CleanRL's script needs envpool and gym 0.23, so it runs in a Python of its own (a virtual
environment: experiments/results_cleanrl/README.md says how it was made). Each script runs at its
defaults for --total-timesteps (ours on BreakoutNoFrameskip-v4, CleanRL's on envpool's
Breakout-v5), ours first, then CleanRL's, --rounds times, one run at a time, with the same
environment (torch picks its thread count alike in both; set OMP_NUM_THREADS to fix it).

Both log losses/td_loss once per rollout, after its update; a run's rate is the steps between
its first and last such event over the wall-clock seconds between them, which leaves out what
each does before its first update (imports, making the games). Our steps are the agent's only
(the steps a script plays for the agent are not counted); CleanRL's count every step.

    python experiments/cleanrl_speed.py --cleanrl-python VENV/bin/python \\
        --cleanrl-script cleanrl/pqn_atari_envpool.py
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmark"))  # stopping.py, shared with the developers' checks
sys.path.insert(0, os.path.join(ROOT, "experiments"))
from compare import free_path  # noqa: E402


def positive_int(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number, 1 or more, got {text!r}")
    return int(text)


def steps_per_second(work_dir):
    """Steps per second between the first and the last losses/td_loss event of the one run under work_dir/runs."""
    (run_name,) = os.listdir(os.path.join(work_dir, "runs"))
    events = EventAccumulator(os.path.join(work_dir, "runs", run_name), size_guidance={"scalars": 0})
    events.Reload()
    losses = events.Scalars("losses/td_loss")
    if len(losses) < 3:
        sys.exit(f"{run_name}: {len(losses)} updates logged; raise --total-timesteps")
    return (losses[-1].step - losses[1].step) / (losses[-1].wall_time - losses[1].wall_time)


def run(argv, log_path):
    """Run one script in a fresh directory; its steps/s."""
    work_dir = tempfile.mkdtemp(prefix="cleanrl_speed_")
    try:
        with open(log_path, "w") as log:
            code = subprocess.call(argv, cwd=work_dir, stdout=log, stderr=subprocess.STDOUT)
        if code != 0:
            sys.exit(f"{' '.join(argv)} failed (exit {code}); its output: {log_path}")
        return steps_per_second(work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--cleanrl-python", required=True, help="the Python that has envpool and gym 0.23")
    p.add_argument("--cleanrl-script", required=True, help="CleanRL's cleanrl/pqn_atari_envpool.py")
    p.add_argument("--total-timesteps", type=positive_int, default=15 * 1024, help="steps of each run (1,024 a rollout)")
    p.add_argument("--rounds", type=positive_int, default=2, help="runs of each script, in turn")
    p.add_argument("--logs", default="cleanrl_speed_logs", help="folder for each run's output (LOGS_2... if it exists)")
    args = p.parse_args()
    for path, flag in ((args.cleanrl_python, "--cleanrl-python"), (args.cleanrl_script, "--cleanrl-script")):
        if not os.path.isfile(path):
            p.error(f"argument {flag}: no file {path}")
    if not os.access(args.cleanrl_python, os.X_OK):
        p.error(f"argument --cleanrl-python: {args.cleanrl_python} is not a program this user can run")
    if args.total_timesteps < 3 * 1024:  # the rate is timed from the second update to the last
        p.error(
            f"argument --total-timesteps: must be at least 3,072 (three rollouts of 1,024 steps), got {args.total_timesteps}"
        )
    args.logs = free_path(args.logs)  # an earlier sitting's logs are kept
    try:
        os.makedirs(args.logs)
    except OSError as error:
        p.error(f"argument --logs: cannot make the folder {args.logs}: {error.strerror}")
    print(f"logs: {args.logs}", flush=True)
    steps = str(args.total_timesteps)
    commands = {
        "pqn_atari.py": [sys.executable, os.path.join(ROOT, "pqn_atari.py"), "--total-timesteps", steps, "--no-cuda"],
        "CleanRL's pqn_atari_envpool.py": [
            args.cleanrl_python,
            os.path.abspath(args.cleanrl_script),
            "--env-id",
            "Breakout-v5",
            "--total-timesteps",
            steps,
            "--no-cuda",
        ],
    }
    rates = {name: [] for name in commands}
    for round_number in range(1, args.rounds + 1):
        for number, (name, argv) in enumerate(commands.items()):
            rate = run(argv, os.path.join(args.logs, f"round{round_number}_{number}.log"))
            rates[name].append(rate)
            print(f"round {round_number}: {name} {rate:,.1f} steps/s | load average {os.getloadavg()[0]:.2f}", flush=True)
    ours, theirs = (np.mean(rates[name]) for name in commands)
    print(
        f"mean over {args.rounds} rounds: pqn_atari.py {ours:,.1f} steps/s, CleanRL's {theirs:,.1f} steps/s, "
        f"ratio {ours / theirs:.2f} (target >= 1)",
        flush=True,
    )


if __name__ == "__main__":
    from stopping import run_until_stopped  # benchmark/stopping.py (benchmark/ is on sys.path, above)

    sys.exit(run_until_stopped(main))
