"""Run several scripts and settings, each into its own run directory, and keep each run's results as a CSV.

    python experiments/sweep.py --out sweep --env-id BreakoutNoFrameskip-v4 --total-timesteps 300000 \\
        --seeds 1 2 --jobs 2 --runs "dqn_atari.py" "dqn_atari_vec.py --envs-count 8 --learn-steps-period 32" \\
        "dqn_atari_mp.py --workers-count 2 --learn-steps-period 4"
    python experiments/compare.py sweep/results --plot sweep/curves.png

Each --runs entry is a script with its own flags; every entry runs once per seed, with the game
and budget given here. Each entry's flags are checked by its script before the first run starts:
a typo in the last entry stops the sweep at once, not hours later. The runs' output goes to
OUT/logs/, their run directories to OUT/runs/. --jobs N runs N at once, each child with one torch
thread (OMP_NUM_THREADS=1); the default, 1, runs them one after another with torch's own thread
count. A run that fails all the same is reported and the sweep goes on; a summary ends it, and the
exit status is 1 if any run failed. Ctrl-C or kill (SIGTERM) starts no more runs and stops those
running as their scripts stop (each saves a checkpoint), then sums up, exit status 130 or 143.

Each run that ends well is written to RESULTS_DIR/<run directory name>.csv (format:
experiments/results/README.md), its command on the first line; RESULTS_DIR is OUT/results unless
--results-dir names another (this project's published runs: --results-dir experiments/results). A run
whose command is already the first line of a CSV there is skipped, so a sweep can be spread over
several sittings: run the same command again and only the missing runs run. A run that an earlier
sitting started and that did not end well (stopped, killed, crashed) goes on from the last checkpoint
in its run directory, as its script's --resume does, writing on to the same log; one with no
checkpoint starts anew. Each log's first line is its command. No CSV or log is overwritten.
"""

import argparse
import concurrent.futures
import contextlib
import importlib.util
import io
import multiprocessing
import os
import re
import shlex
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py", "a2c_batched.py", "ppo_atari.py", "pqn_atari.py"]
sys.path.insert(0, ROOT)  # the scripts import plumbing/, from the repository's root: flags_error loads them here
sys.path.insert(0, os.path.join(ROOT, "benchmark"))  # stopping.py, shared with the developers' checks
sys.path.insert(0, os.path.join(ROOT, "experiments"))
from compare import free_path, write_csv  # noqa: E402


def jobs_count(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of runs at once, 1 or more, got {text!r}")
    return int(text)


def is_start_of(flag, option):
    """Whether argparse would read FLAG (--name or --name=value) as OPTION: all of it, or a start of it."""
    name = flag.split("=")[0]
    return name.startswith("--") and len(name) > 2 and option.startswith(name)


def load_script(script_path):
    spec = importlib.util.spec_from_file_location(f"sweep_checks_{os.path.basename(script_path)[:-3]}", script_path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def flags_error(script_path, flags, cwd):
    """The script's own error for these flags (its parse_args, with every check it makes before a run), or None."""
    script = load_script(script_path)
    said, before = io.StringIO(), os.getcwd()
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
        try:
            os.chdir(cwd)  # (contextlib.chdir would need Python 3.11)
            script.parse_args(flags)
        except SystemExit as stop:
            if stop.code:  # argparse's last line: "PROG: error: MESSAGE"
                return (said.getvalue().strip().splitlines() or [f"exit status {stop.code}"])[-1].split("error: ", 1)[-1]
        finally:
            os.chdir(before)
    return None


def torch_default_threads():
    """The torch thread count of a script run with no OMP_NUM_THREADS or MKL_NUM_THREADS: torch's default, one per
    physical core (a desktop with 2 hardware threads a core has half as many as its CPUs; Apple's: its fast cores)."""
    env = {name: value for name, value in os.environ.items() if name not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    said = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env, capture_output=True)
    return int(said.stdout)


def run_ended(script_path, run_dir):
    """Whether RUN_DIR's checkpoint, read as every script reads it, says that the run ended (a sweep stopped before its
    CSV)."""
    from plumbing.checkpoints import read_checkpoint

    checkpoint = read_checkpoint(run_dir)
    return bool(checkpoint and checkpoint["finished"])


def earlier_logs(logs_dir):
    """The logs of earlier sittings, by the command on their first line ("# python SCRIPT FLAGS"); the newest wins."""
    found = {}
    names = [name for name in os.listdir(logs_dir) if name.endswith(".log") and os.path.isfile(os.path.join(logs_dir, name))]
    for name in sorted(names, key=lambda name: os.path.getmtime(os.path.join(logs_dir, name))):
        with open(os.path.join(logs_dir, name), errors="replace") as log:
            found[log.readline().removeprefix("# ").rstrip("\n")] = os.path.join(logs_dir, name)
    return found


def run_dir_in(log_path):
    """The run directory a script names on its first line ("runs/NAME: game, steps on device"), or None yet."""
    with open(log_path) as log:
        # the line's end, not the name's, is matched: --exp-name may hold spaces and colons
        found = re.search(r"^(runs/.+): [^\s,]+, [\d,]+ steps on \S+$", log.read(), re.MULTILINE)
    return found and found.group(1)


STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
stop_signals = []  # the ones received, when run as a script: the loop below hands them to the runs


def on_stop_signal(signum, frame):
    stop_signals.append(signum)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--runs", nargs="+", required=True, metavar="'SCRIPT FLAGS'", help="a script and its flags, quoted")
    p.add_argument("--seeds", nargs="+", type=int, default=[1], help="seeds to run each entry with")
    p.add_argument("--env-id", default="BreakoutNoFrameskip-v4", help="the game of every run")
    p.add_argument("--total-timesteps", type=int, default=300_000, help="the budget of every run")
    p.add_argument("--out", default="sweep", help="folder for runs/ and logs/")
    p.add_argument("--jobs", type=jobs_count, default=1, help="runs at once, each on one torch thread (default 1)")
    p.add_argument("--results-dir", help="folder for the runs' CSVs (default: OUT/results)")
    args = p.parse_args(argv)
    if not hasattr(signal, "pthread_sigmask"):  # Windows: it could not hand Ctrl-C or kill on to its runs
        p.exit(2, "sweep.py: needs Linux or macOS (it stops its runs with POSIX signals); run the scripts one by one\n")
    args.results_dir = args.results_dir or os.path.join(args.out, "results")
    entries = []
    for entry in args.runs:
        try:
            entries.append(shlex.split(entry))
        except ValueError as error:  # an unclosed quote, a lone backslash at the end
            p.error(f"argument --runs: {entry!r} cannot be split as a shell would: {error}")
        if not entries[-1]:
            p.error(f"argument --runs: an empty entry {entry!r}: each is a script and its flags, e.g. 'dqn_atari.py'")
        if entries[-1][0] not in SCRIPTS:  # by its name alone: the name goes into the logs' names
            p.error(
                f"argument --runs: {entries[-1][0]!r} is not one of the scripts, named without a folder: {', '.join(SCRIPTS)}"
            )
        # argparse takes any start of a flag that no other flag shares: --he is --help, --res --resume
        if any(flag == "-h" or is_start_of(flag, "--resume") or is_start_of(flag, "--help") for flag in entries[-1][1:]):
            p.error(
                f"argument --runs: {entry!r}: a sweep starts its runs and goes on with them itself: no --resume, no --help"
            )
    if args.total_timesteps < 1:
        p.error(f"argument --total-timesteps: must be a positive integer, got {args.total_timesteps}")
    # the scripts seed numpy with it and their emulators with it plus their index (32-bit numbers)
    if bad := [seed for seed in args.seeds if not 0 <= seed <= 2**30]:  # the scripts' own range for --seed
        p.error(f"argument --seeds: each must be an integer in [0, 2**30], got {' '.join(map(str, bad))}")
    if twice := sorted({seed for seed in args.seeds if args.seeds.count(seed) > 1}):  # one run, counted as two seeds
        p.error(f"argument --seeds: each seed once, got {' '.join(map(str, twice))} more than once")
    if twice := sorted({shlex.join(entry) for entry in entries if entries.count(entry) > 1}):  # one command, two runs
        p.error(f"argument --runs: each entry once, got {', '.join(map(repr, twice))} more than once")
    for flag, folder in (("--out", args.out), ("--results-dir", args.results_dir)):
        if os.path.exists(folder) and not os.path.isdir(folder):
            p.error(f"argument {flag}: {folder} is a file, not a folder")
    for flag, folder in (("--out", os.path.join(args.out, "logs")), ("--results-dir", args.results_dir)):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as error:  # a file on its path, no permission
            p.error(f"argument {flag}: cannot make the folder {folder}: {error.strerror}")

    # What earlier sittings ran: the first line of each CSV is "# command: python SCRIPT FLAGS"
    done = {}
    for name in sorted(os.listdir(args.results_dir)):
        if name.endswith(".csv"):
            with open(os.path.join(args.results_dir, name)) as f:
                done.setdefault(f.readline().removeprefix("# command: ").strip(), os.path.join(args.results_dir, name))

    logs = earlier_logs(os.path.join(args.out, "logs"))

    # One torch thread per child when several share the cores: more would only wait for each other
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1") if args.jobs > 1 else None
    jobs, pending, running, results = [], [], [], []
    for entry in entries:
        for seed in args.seeds:
            number = len(jobs) + 1
            flags = [*entry[1:], "--env-id", args.env_id, "--total-timesteps", str(args.total_timesteps), "--seed", str(seed)]
            name = f"{number:02d}_{os.path.splitext(entry[0])[0]}_seed{seed}"
            jobs.append(
                {
                    "number": number,
                    "entry": entry,
                    "seed": seed,
                    "log": os.path.join(args.out, "logs", f"{name}.log"),
                    "argv": [sys.executable, os.path.join(ROOT, entry[0]), *flags],
                    "command": shlex.join(["python", entry[0], *flags]),
                }
            )  # as a user would type it
    # Runs an earlier sitting started that left a checkpoint, and wrote no CSV
    earlier = {}
    for job in jobs:
        run_dir = job["command"] not in done and job["command"] in logs and run_dir_in(logs[job["command"]])
        if run_dir and os.path.isfile(os.path.join(args.out, run_dir, "checkpoint.pt")):
            earlier[job["number"]] = run_dir
    # Each entry's first run, checked as it will start (in OUT) before any run starts, and whether each earlier
    # run ended, in a process of their own: the scripts' imports (torch, some 200 MB) go with it, rather than
    # stay in the sweep for hours. It starts with the stop signals ignored (what is ignored, it keeps), so that
    # Ctrl-C, which the terminal sends it too, is the sweep's alone to take once the checks are done: no run starts.
    firsts = [job for job in jobs if job["seed"] == args.seeds[0]]
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as checker:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # meanwhile one waits, not lost
        handlers = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
        try:  # the first submit starts the process
            errors = [checker.submit(flags_error, job["argv"][1], job["argv"][2:], args.out) for job in firsts]
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for job, error in zip(firsts, errors):
            if error.result():
                p.error(f"argument --runs: {shlex.join(job['entry'])!r}: {error.result()}")
        script_of = {job["number"]: job["argv"][1] for job in jobs}
        ended = {n: checker.submit(run_ended, script_of[n], os.path.join(args.out, d)) for n, d in earlier.items()}
    ended = {number: answer.result() for number, answer in ended.items()}
    for job in jobs:
        if job["command"] in done:
            print(f"[{job['number']}/{len(jobs)}] {job['command']}: skipped, already in {done[job['command']]}", flush=True)
            results.append((job, "skipped", 0.0, done[job["command"]]))
            continue
        if ended.get(job["number"]):  # it ended, but the sweep was stopped before it wrote the CSV
            run_dir = earlier[job["number"]]
            csv = os.path.join(args.results_dir, os.path.basename(run_dir) + ".csv")
            try:
                write_csv(os.path.join(args.out, run_dir), csv, job["command"])
            except FileExistsError:  # one cut short as it was written, say
                csv += " (exists already, left as is)"
            print(f"[{job['number']}/{len(jobs)}] {job['command']}: ended in an earlier sitting; results: {csv}", flush=True)
            results.append((job, "ok", 0.0, csv))
            continue
        # Started by an earlier sitting and not ended well: it goes on from its checkpoint, if it left one
        earlier_run_dir = earlier.get(job["number"])
        if earlier_run_dir:
            job["log"], job["resumes"] = logs[job["command"]], earlier_run_dir
            job["argv"] = [sys.executable, os.path.join(ROOT, job["entry"][0]), "--resume", earlier_run_dir]
        else:
            job["log"], job["resumes"] = free_path(job["log"]), None
        pending.append(job)

    stopping = False
    while pending or running:
        if stop_signals and not stopping:  # Ctrl-C or kill: no more runs; each one running gets the signal, once
            stopping = True
            results += [(job, "not started", 0.0, "-") for job in pending]
            pending.clear()
            for job in running:
                job["proc"].send_signal(stop_signals[0])
        for job in running:
            job["run_dir"] = job["run_dir"] or run_dir_in(job["log"])
        for job in [job for job in running if job["proc"].poll() is not None]:
            running.remove(job)
            job["file"].close()
            minutes = (time.time() - job["started"]) / 60
            with open(job["log"]) as log:
                tail = (log.read().strip().splitlines() or [""])[-1]
            code, run_dir, csv = job["proc"].returncode, run_dir_in(job["log"]), "-"
            if code == 0 and not run_dir:
                csv = "- (no run directory named in the log)"
            elif code == 0:
                csv = os.path.join(args.results_dir, os.path.basename(run_dir) + ".csv")
                try:
                    write_csv(os.path.join(args.out, run_dir), csv, job["command"])
                except FileExistsError:
                    csv += " (exists already, left as is)"
            status = "ok" if code == 0 else f"FAILED (exit {code})"
            if stop_signals and code == 128 + stop_signals[0]:
                status = f"stopped (exit {code})"
            print(
                f"[{job['number']}/{len(jobs)}] {status} after {minutes:.1f} min: {job['command']}\n"
                f"    log: {job['log']} | results: {csv} | {tail}",
                flush=True,
            )
            results.append((job, status, minutes, csv))
        # Start the next run once those running have made their run directory: two runs of one
        # script and seed started within the same second would otherwise pick the same name.
        while (
            pending and len(running) < args.jobs and all(job["run_dir"] or job["proc"].poll() is not None for job in running)
        ):
            job = pending.pop(0)
            job["file"], job["run_dir"], job["started"] = open(job["log"], "a"), None, time.time()
            if not job["resumes"]:
                job["file"].write(f"# {job['command']}\n")
                job["file"].flush()  # before the child's output, which goes to the same file
            # A session of its own: Ctrl-C in the terminal reaches the sweep alone, which hands it on once
            job["proc"] = subprocess.Popen(
                job["argv"], cwd=args.out, stdout=job["file"], stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            running.append(job)
            going_on = f", going on from {job['resumes']}'s checkpoint" if job["resumes"] else ""
            print(f"[{job['number']}/{len(jobs)}] {job['command']}: running{going_on} (log: {job['log']})", flush=True)
        time.sleep(0.2)

    print("\n| run | seed | status | minutes | results |\n|---|---|---|---|---|")
    for job, status, minutes, csv in sorted(results, key=lambda result: result[0]["number"]):
        print(f"| {' '.join(job['entry'])} | {job['seed']} | {status} | {minutes:.1f} | {csv} |")
    failed = sum(status.startswith("FAILED") for _, status, _, _ in results)
    skipped = sum(status == "skipped" for _, status, _, _ in results)
    ended_well = sum(status == "ok" for _, status, _, _ in results)
    stopped = len(results) - ended_well - failed - skipped
    print(
        f"\n{ended_well} of {len(results)} runs ended well, {skipped} skipped, {failed} failed"
        f"{f', {stopped} stopped or not started' if stopped else ''}. "
        f"Compare them with:\n  python experiments/compare.py {args.results_dir} "
        f"--plot {os.path.join(args.out, 'curves.png')}"
    )
    if stop_signals:
        return 128 + stop_signals[0]  # 130 after Ctrl-C, 143 after kill
    return 1 if failed else 0


if __name__ == "__main__":
    for signum in STOP_SIGNALS:  # as the scripts: nohup's SIGHUP stays ignored
        if signal.getsignal(signum) is not signal.SIG_IGN or signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, on_stop_signal)
    sys.exit(main())
