"""Run several scripts and settings one after another, each into its own run directory.

    python benchmark/sweep.py --out sweep --env-id BreakoutNoFrameskip-v4 --total-timesteps 300000 \\
        --seeds 1 2 --runs "dqn_atari.py" "dqn_atari_vec.py --envs-count 8 --learn-steps-period 32" \\
        "dqn_atari_mp.py --workers-count 2 --learn-steps-period 4"
    python benchmark/compare.py sweep/runs --plot sweep/curves.png

Each --runs entry is a script with its own flags; every entry runs once per seed, with the game
and budget given here. The runs' output goes to OUT/logs/, their run directories to OUT/runs/.
A failed run is reported and the sweep goes on; a summary ends it.
"""
import argparse
import os
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--runs", nargs="+", required=True, metavar="'SCRIPT FLAGS'", help="a script and its flags, quoted")
    p.add_argument("--seeds", nargs="+", type=int, default=[1], help="seeds to run each entry with")
    p.add_argument("--env-id", default="BreakoutNoFrameskip-v4", help="the game of every run")
    p.add_argument("--total-timesteps", type=int, default=300_000, help="the budget of every run")
    p.add_argument("--out", default="sweep", help="folder for runs/ and logs/")
    args = p.parse_args(argv)
    entries = [shlex.split(entry) for entry in args.runs]
    for entry in entries:
        if not os.path.isfile(os.path.join(ROOT, entry[0])):
            p.error(f"argument --runs: no script {entry[0]} in {ROOT}")
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)

    jobs = [(entry, seed) for entry in entries for seed in args.seeds]
    results = []
    for number, (entry, seed) in enumerate(jobs, 1):
        command = [sys.executable, os.path.join(ROOT, entry[0]), *entry[1:], "--env-id", args.env_id,
                   "--total-timesteps", str(args.total_timesteps), "--seed", str(seed)]
        name = f"{number:02d}_{os.path.splitext(entry[0])[0]}_seed{seed}"
        print(f"[{number}/{len(jobs)}] {' '.join(entry)} --seed {seed}: running (log: {args.out}/logs/{name}.log)",
              flush=True)
        started = time.time()
        with open(os.path.join(args.out, "logs", f"{name}.log"), "w") as log:
            code = subprocess.call(command, cwd=args.out, stdout=log, stderr=subprocess.STDOUT)
        minutes = (time.time() - started) / 60
        with open(os.path.join(args.out, "logs", f"{name}.log")) as log:
            tail = (log.read().strip().splitlines() or [""])[-1]
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"[{number}/{len(jobs)}] {status} after {minutes:.1f} min: {tail}", flush=True)
        results.append((" ".join(entry), seed, status, minutes))

    print("\n| run | seed | status | minutes |\n|---|---|---|---|")
    for entry, seed, status, minutes in results:
        print(f"| {entry} | {seed} | {status} | {minutes:.1f} |")
    failed = sum(status != "ok" for _, _, status, _ in results)
    print(f"\n{len(results) - failed} of {len(results)} runs ended well. Compare them with:\n"
          f"  python benchmark/compare.py {os.path.join(args.out, 'runs')} --plot {os.path.join(args.out, 'curves.png')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
