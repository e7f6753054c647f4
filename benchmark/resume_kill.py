"""SIGKILL a run at random moments, many times: each time, --resume must go on from a whole checkpoint.

    python benchmark/resume_kill.py                          # dqn_atari.py, 50 kills
    python benchmark/resume_kill.py --script dqn_atari_mp.py --tries 20 --seed 2

One run directory, one run of the script with a small replay and a checkpoint every --save-every
steps (16: a good part of its time goes into writing them), killed with SIGKILL, with every process
of its group, at a random moment 0 to --max-delay seconds after its main loop starts (for
dqn_atari_mp.py, whose workers take seconds to start, after its first progress line); then resumed
with --resume and killed again, and so on (each resume is the next try). After each kill:
(a) checkpoint.pt loads with weights_only, and the replay files it names are there, whole (each
    one's six arrays read back with np.load, in the sizes the checkpoint says);
(b) the next try's --resume loads it: it prints `resumed at step N`, N the checkpoint's step (or
    the kill comes first; the try after it loads the same checkpoint).
A kill that leaves checkpoint.pt.tmp came while a checkpoint was being written; one that leaves
replay files the checkpoint does not name, after the rows they hold came in (a file of new rows
written in the background, or a checkpoint's last rows): the resumed run deletes them.
At the end a last --resume runs 50 steps further and must exit with status 0.
"""

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--total-timesteps", "10000000", "--learning-starts", "64", "--batch-size", "8", "--no-cuda"]
DQN = ["--buffer-size", "2000"]
ROLLOUT = ["--envs-count", "2", "--rollout-length", "8"]
PPO = ROLLOUT + ["--num-minibatches", "2", "--update-epochs", "1"]
FLAGS = {
    "dqn_atari.py": SMALL + DQN,
    "dqn_atari_vec.py": SMALL + DQN + ["--envs-count", "2"],
    "dqn_atari_mp.py": SMALL + DQN + ["--workers-count", "2"],
    "a2c_batched.py": ["--total-timesteps", "10000000", "--no-cuda"] + ROLLOUT,
    "ppo_atari.py": ["--total-timesteps", "10000000", "--no-cuda"] + PPO,
    "pqn_atari.py": ["--total-timesteps", "10000000", "--no-cuda"] + PPO,
}


def whole_checkpoint(run_dir):
    """Why the checkpoint in run_dir cannot be resumed from, or None when it can."""
    try:
        checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    except Exception as error:
        return f"checkpoint.pt does not load: {error!r}"[:300]
    for path, size in checkpoint["files"]:
        full = os.path.join(run_dir, path)
        if not os.path.isfile(full) or os.path.getsize(full) != size:
            return f"{path} is missing or not of its size"
        with open(full, "rb") as f:
            arrays = [np.load(f, allow_pickle=False) for _ in range(6)]
        if len({len(array) for array in arrays}) != 1:
            return f"{path}: arrays of different lengths"
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", default="dqn_atari.py", choices=sorted(FLAGS))
    p.add_argument("--tries", type=int, default=50)
    p.add_argument("--max-delay", type=float, default=3.0, help="seconds after the loop starts")
    p.add_argument("--save-every", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if not hasattr(os, "killpg"):  # Windows
        p.exit(2, "resume_kill.py: needs Linux or macOS (it kills a run's process group with SIGKILL)\n")
    if args.tries < 1:
        p.error(f"argument --tries: must be a positive integer, got {args.tries}")
    if not 0 <= args.max_delay < float("inf"):
        p.error(f"argument --max-delay: must be a finite number of seconds >= 0, got {args.max_delay}")
    if not 1 <= args.save_every <= 2**62:  # the scripts' own range
        p.error(f"argument --save-every: must be an integer in [1, 2**62], got {args.save_every}")
    rng = random.Random(args.seed)
    script = os.path.join(ROOT, args.script)
    counts = {"kills": 0, "during checkpoint.pt": 0, "with unnamed replay files": 0, "resumes that loaded": 0}
    counts["killed before saying"] = 0
    with tempfile.TemporaryDirectory() as cwd:
        command = [sys.executable, script, *FLAGS[args.script], "--save-every", str(args.save_every)]
        started = "\nstep " if args.script == "dqn_atari_mp.py" else "steps on cpu"  # the main loop runs
        run_dir, step = None, None
        for attempt in range(args.tries):
            if run_dir is not None and os.path.exists(os.path.join(run_dir, "checkpoint.pt.tmp")):
                os.remove(os.path.join(run_dir, "checkpoint.pt.tmp"))  # the last kill's: this one's must be its own
            proc = subprocess.Popen(
                command if run_dir is None else [sys.executable, script, "--resume", run_dir],
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: the kill takes the workers too, as a crash would
            )
            output = ""
            try:
                while started not in output:
                    line = proc.stdout.readline()
                    if not line:
                        sys.exit(f"try {attempt}: the run ended before its loop started:\n{output}")
                    output += line
                time.sleep(rng.uniform(0, args.max_delay))
            finally:  # (also when this benchmark is stopped: nothing of the run is left behind)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            run_dir = run_dir or os.path.join(cwd, re.search(r"^(runs/\S+): ", output, re.M).group(1))
            counts["kills"] += 1
            during = os.path.exists(os.path.join(run_dir, "checkpoint.pt.tmp"))
            counts["during checkpoint.pt"] += during
            if step is not None:  # this try resumed from the checkpoint the last kill left
                if f"resumed at step {step:,}" in output:
                    counts["resumes that loaded"] += 1
                elif "resumed at step" in output:
                    sys.exit(f"try {attempt}: resumed from another step than the checkpoint's {step:,}:\n{output}")
                else:
                    counts["killed before saying"] += 1
            if not os.path.exists(os.path.join(run_dir, "checkpoint.pt")):
                run_dir = None  # killed before its first checkpoint: start again
                continue
            if error := whole_checkpoint(run_dir):
                sys.exit(f"try {attempt}: the kill left a checkpoint that cannot be resumed: {error}")
            checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
            step, named = checkpoint["global_step"], {path for path, _ in checkpoint["files"]}
            replay_dir = os.path.join(run_dir, "replay")
            unnamed = os.path.isdir(replay_dir) and any(os.path.join("replay", n) not in named for n in os.listdir(replay_dir))
            counts["with unnamed replay files"] += unnamed
            where = " while it saved" if during else " with unnamed replay files" if unnamed else ""
            print(f"try {attempt}: killed after the checkpoint of step {step:,}{where}", flush=True)
        if step is None:
            sys.exit("no try lasted until the run's first checkpoint: raise --max-delay")
        last = subprocess.run(
            [sys.executable, script, "--resume", run_dir, "--total-timesteps", str(step + 50)],
            cwd=cwd,
            capture_output=True,
            text=True,
        )
        if last.returncode != 0:
            sys.exit(f"the last --resume failed:\n{last.stdout[-2000:]}{last.stderr[-2000:]}")
    print(f"\n{args.script}: " + ", ".join(f"{count} {what}" for what, count in counts.items()) + "; the last resume ran on")


if __name__ == "__main__":
    from stopping import run_until_stopped  # (benchmark/, this file's folder, is first on sys.path)

    sys.exit(run_until_stopped(main))
