"""Does a change of the scripts leave what they learn as it was? Short seeded CPU runs of all six, compared.

    python benchmark/same_values.py --repo ../old_checkout --out before   # the scripts of the commit before
    python benchmark/same_values.py --out after --compare before          # these scripts, then both compared

Each script runs a few thousand steps of Breakout, seeded, on the CPU with one torch thread (the
thread count changes the arithmetic's rounding), learning, saving its model and evaluating it:
dqn_atari_mp.py with one worker acting at random (its transitions then come in one order whatever
the processes' pace). OUT/values.txt gets every TensorBoard value each run logged, but those its
progress line logs every 5 s of wall-clock time (charts/SPS, charts/epsilon, charts/updates: at
steps that depend on the machine's pace), and OUT/files.txt the files each run directory holds.
--compare says, script by script, SAME or which tags differ, and which files; exit status 1 if any
does. A refactor of the plumbing or of a script's layout must give SAME everywhere.
"""

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DQN = "--total-timesteps 3000 --learning-starts 1000 --buffer-size 4000 --exploration-fraction 0.5".split()
PG = "--total-timesteps 3000 --envs-count 4 --rollout-length 64".split()
RUNS = {
    "dqn_atari.py": DQN,
    "dqn_atari_vec.py": DQN + "--envs-count 4 --learn-steps-period 8".split(),
    "dqn_atari_mp.py": DQN + "--workers-count 1 --start-e 1 --end-e 1 --eval-epsilon 0.01".split(),
    "a2c_batched.py": "--total-timesteps 3000 --envs-count 4".split(),
    "ppo_atari.py": PG,
    "pqn_atari.py": PG,
}
SAVE = "--save-every 1000 --save-model --eval-episodes 1".split()
TIMED = {"charts/SPS", "charts/epsilon", "charts/updates"}  # logged every 5 s of wall-clock time


def values(run_dir):
    """{tag: [(step, value), ...]} of a run directory's TensorBoard events, the timed tags left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"] if tag not in TIMED}


def record(repo, out):
    """Run the six scripts of REPO in OUT (a new folder), then write OUT/values.txt and OUT/files.txt."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    lines, files = [], []
    for script, flags in RUNS.items():
        before = set(os.listdir(os.path.join(out, "runs"))) if os.path.isdir(os.path.join(out, "runs")) else set()
        command = [sys.executable, os.path.join(repo, script), *flags, *SAVE]
        with open(os.path.join(out, f"{script[:-3]}.log"), "w") as log:
            if subprocess.run(command, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT).returncode:
                sys.exit(f"error: {script} failed: see {log.name}")
        (run,) = set(os.listdir(os.path.join(out, "runs"))) - before
        lines += [f"{script} {tag} {steps}" for tag, steps in sorted(values(os.path.join(out, "runs", run)).items())]
        files += [f"{script} {name}" for name in sorted(os.listdir(os.path.join(out, "runs", run))) if "tfevents" not in name]
        print(f"{script}: {run}", flush=True)
    with open(os.path.join(out, "values.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "files.txt"), "w") as f:
        f.write("\n".join(files) + "\n")


def compare(old, new):
    """Per script, SAME or what differs; True if everything is the same."""
    same = True
    for kind in ("values.txt", "files.txt"):
        read = [{} for _ in (old, new)]
        for found, folder in zip(read, (old, new)):
            for line in open(os.path.join(folder, kind)).read().splitlines():
                script, rest = line.split(" ", 1)
                found.setdefault(script, set()).add(rest)
        for script in [script for script in RUNS if script in read[0] or script in read[1]]:
            before, after = read[0].get(script, set()), read[1].get(script, set())
            differ = sorted({line.split(" ")[0] for line in before ^ after}) or ([] if before else ["(nothing recorded)"])
            same = same and not differ
            print(f"{kind[:-4]:6} {script:16} " + (f"SAME ({len(after)})" if not differ else f"DIFFER: {', '.join(differ)}"))
    return same


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", default=ROOT, help="the checkout whose scripts run (default: this one)")
    p.add_argument("--out", required=True, help="a new folder for the runs and what they logged")
    p.add_argument("--compare", metavar="DIR", help="an earlier --out to compare with")
    args = p.parse_args(argv)
    if not all(os.path.isfile(os.path.join(args.repo, script)) for script in RUNS):
        p.error(f"argument --repo: {args.repo} does not hold the six scripts")
    if args.compare and not os.path.isfile(os.path.join(args.compare, "values.txt")):
        p.error(f"argument --compare: {args.compare} holds no values.txt (an --out of this tool)")
    if os.path.exists(args.out):
        p.error(f"argument --out: {args.out} exists: name a new folder (nothing is overwritten)")
    os.makedirs(args.out)
    record(os.path.abspath(args.repo), os.path.abspath(args.out))
    return 0 if not args.compare or compare(args.compare, args.out) else 1


if __name__ == "__main__":
    sys.exit(main())
