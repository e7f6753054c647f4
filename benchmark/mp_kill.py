"""Kill dqn_atari_mp.py's processes with SIGKILL at random moments: every process of the run must end.

    python benchmark/mp_kill.py                   # 50 tries killing a worker, then 50 killing the learner
    python benchmark/mp_kill.py --tries 5 --seed 2

Each try starts `dqn_atari_mp.py --workers-count 2` with a small replay and a run too long to end by
itself, in a process group of its own, then:
(a) worker killed: one of the two workers, chosen at random, gets SIGKILL. The learner must exit
    within 10 s, with status 1 and `error: worker I (pid P) died: killed by SIGKILL` naming that
    worker, having reaped its workers (no zombie left), and within the same 10 s no process of the
    run may be left (the other worker, multiprocessing's resource tracker).
(b) learner killed: the learner gets SIGKILL; 10 s later no process of the run may be left.
In both, nothing the run made may be left in /dev/shm either (its queue's named semaphores, shared
memory) once its processes have gone: multiprocessing's resource tracker removes what a killed
learner leaves.
Half the tries of each kind kill during the warm-up, at a random delay of 0 to --max-delay seconds
after both workers exist (some while they still import torch, some while they play); the other
half during learning, that delay after the first progress line that counts updates.

This process makes itself a child subreaper (Linux's prctl), so the orphans of a killed learner
become its children: waitpid then tells when each has ended, and a zombie counts as not ended.
Whatever a try leaves is killed with its process group before the next one.
"""

import argparse
import ctypes
import glob
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "dqn_atari_mp.py")
LIMIT = 10.0  # seconds
RUN = ["--workers-count", "2", "--total-timesteps", "10000000", "--buffer-size", "2000", "--batch-size", "8", "--no-cuda"]
WARM_UP = ["--learning-starts", "10000000"]  # never learns: the whole run is warm-up
LEARNING = ["--learning-starts", "64"]  # learns from the first transitions on


def become_subreaper():
    """Orphaned descendants become our children (PR_SET_CHILD_SUBREAPER = 36); False where there is no prctl."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children(pid):
    """The processes whose parent is pid: the workers (`spawn_main` in their command line) and the rest."""
    listed = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    workers = subprocess.run(["pgrep", "-P", str(pid), "-f", "spawn_main"], capture_output=True, text=True).stdout.split()
    return [int(p) for p in workers], [int(p) for p in listed]


def gone(pid, reaped):
    """Has pid ended and been reaped? Ours (an orphan given to us): waitpid says; another's: kill(pid, 0)."""
    if pid in reaped:
        return True
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            reaped.add(pid)
            return True
        return False
    except ChildProcessError:  # not our child: still its parent's (maybe a zombie), or gone and reaped
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True


def shm_left(before):
    """Entries of /dev/shm not there `before` that no live process maps (those are another run's: their inodes are
    in its maps; a semaphore's mapping is named after the file it was made as, shown '(deleted)')."""
    mapped = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                mapped |= {int(line.split()[4]) for line in f if "/dev/shm/" in line}
        except OSError:  # a process that has just ended
            pass
    left = []
    for name in sorted(set(os.listdir("/dev/shm")) - before):
        try:
            if os.stat(f"/dev/shm/{name}").st_ino not in mapped:
                left.append(name)
        except FileNotFoundError:  # removed meanwhile
            pass
    return left


def wait_until(condition, deadline, step=0.02):
    while not condition() and time.time() < deadline:
        time.sleep(step)
    return condition()


def text_of(path):
    with open(path) as f:
        return f.read()


def one_try(target, phase, rng, max_delay, seed, tmp):
    """One run, one SIGKILL. Returns (ok, seconds, what): for 'worker' the seconds until the learner's
    exit, for 'learner' until the last process of the run ended; what went wrong, if anything."""
    out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else None
    with open(out, "w") as stdout, open(err, "w") as stderr:
        learner = subprocess.Popen(
            [sys.executable, SCRIPT, *RUN, *(WARM_UP if phase == "warm-up" else LEARNING), "--seed", str(seed)],
            cwd=tmp,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    reaped = set()
    try:
        if not wait_until(lambda: len(children(learner.pid)[0]) >= 2 or learner.poll() is not None, time.time() + 120):
            return False, None, "the workers did not start within 120 s"
        if phase == "learning" and not wait_until(
            lambda: re.search(r"updates [1-9]", text_of(out)) or learner.poll() is not None, time.time() + 120, step=0.1
        ):
            return False, None, "no progress line with updates within 120 s"
        if learner.poll() is not None:
            return False, None, f"the run ended before the kill: {text_of(err)[-500:]}"
        time.sleep(rng.uniform(0, max_delay))
        workers, run = children(learner.pid)  # now: the resource tracker too
        victim = rng.choice(workers) if target == "worker" else learner.pid
        os.kill(victim, signal.SIGKILL)
        killed = time.time()
        if target == "learner":
            learner.wait()
            ended = wait_until(lambda: all(gone(pid, reaped) for pid in run), killed + LIMIT)
            seconds = time.time() - killed
            problems = [] if ended else [f"left after {LIMIT:.0f} s: {left(run, reaped)}"]
            problems += shm_problem(shm_before, killed)
            return not problems, seconds, "; ".join(problems) or None
        try:
            status = learner.wait(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            return False, None, f"the learner did not exit within {LIMIT:.0f} s"
        seconds = time.time() - killed
        # The learner's children are ours once it has gone: a worker that we can wait for now, alive or
        # a zombie, is one the learner left behind instead of reaping it.
        unreaped = [pid for pid in workers if reap_now(pid, reaped)]
        ended = wait_until(lambda: all(gone(pid, reaped) for pid in run), killed + LIMIT)
        message, problems = text_of(err), []
        named = [int(pid) for pid in re.findall(r"error: worker \d+ \(pid (\d+)\) died: killed by SIGKILL", message)]
        if status != 1:
            problems.append(f"exit status {status}, not 1")
        if named != [victim]:
            problems.append(f"no error naming the killed worker (pid {victim}): {message[-300:]!r}")
        if "Traceback" in message:
            problems.append("a traceback")
        if unreaped:
            problems.append(f"workers the learner did not reap: {unreaped}")
        if not ended:
            problems.append(f"left after {LIMIT:.0f} s: {left(run, reaped)}")
        problems += shm_problem(shm_before, killed)
        return not problems, seconds, "; ".join(problems) or None
    finally:
        try:
            os.killpg(learner.pid, signal.SIGKILL)  # this try's process group: whatever it left
        except ProcessLookupError:
            pass
        learner.wait()
        sweep_orphans()


def shm_problem(before, killed):
    """What the run left in /dev/shm LIMIT s after the kill, as a problem; none where there is no /dev/shm."""
    if before is None:
        return []
    wait_until(lambda: not shm_left(before), killed + LIMIT, step=0.1)
    leftover = shm_left(before)
    return [f"left in /dev/shm after {LIMIT:.0f} s: {', '.join(leftover)}"] if leftover else []


def reap_now(pid, reaped):
    """True if pid is our child (alive or a zombie): reaped if it has ended."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    if waited == pid:
        reaped.add(pid)
    return True


def left(pids, reaped):
    return [pid for pid in pids if not gone(pid, reaped)]


def sweep_orphans(deadline_s=30):
    """Reap every child left (orphans given to us as subreaper), so that no try sees another's."""
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.05)
        except ChildProcessError:
            return


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=50, help="tries of each kind (worker killed, learner killed)")
    p.add_argument("--max-delay", type=float, default=4.0, help="the kill comes 0 to this many seconds after its moment")
    p.add_argument("--seed", type=int, default=1, help="seed of the delays and of the worker chosen")
    args = p.parse_args()
    if not hasattr(signal, "SIGKILL"):  # Windows
        p.exit(2, "mp_kill.py: needs Linux or macOS (it kills the run's processes with SIGKILL)\n")
    if args.tries < 1:
        p.error(f"argument --tries: must be a positive integer, got {args.tries}")
    if not 0 <= args.max_delay < float("inf"):  # (nan too: time.sleep refuses it, once the runs have started)
        p.error(f"argument --max-delay: must be a finite number of seconds >= 0, got {args.max_delay}")
    if not 0 <= args.seed <= 2**30 - args.tries:  # try n runs with --seed + n, in the scripts' range
        p.error(f"argument --seed: must be in [0, 2**30 - --tries] = [0, {2**30 - args.tries:,}], got {args.seed}")
    if not become_subreaper():
        print("note: no prctl (not Linux): orphans go to init, and a zombie it has not reaped yet counts as alive")
    rng = random.Random(args.seed)
    results = {}
    for target in ("worker", "learner"):
        for n in range(args.tries):
            phase = "warm-up" if n % 2 == 0 else "learning"
            with tempfile.TemporaryDirectory() as tmp:
                ok, seconds, problem = one_try(target, phase, rng, args.max_delay, args.seed + n, tmp)
            results.setdefault(target, []).append((ok, seconds, phase))
            shown = f"{seconds:.2f} s" if seconds is not None else "-"
            print(
                f"{target} killed, try {n + 1}/{args.tries} ({phase}): {'ok' if ok else 'FAILED'} {shown}"
                f"{'' if ok else ': ' + problem}",
                flush=True,
            )
    lines = []
    for target, what in (
        ("worker", "learner exited within 10 s naming it, no process and nothing in /dev/shm left"),
        ("learner", "no process of the run and nothing in /dev/shm left after 10 s"),
    ):
        ok = [seconds for good, seconds, _ in results[target] if good]
        by_phase = ", ".join(
            f"{phase} {sum(good for good, _, p in results[target] if p == phase)}/"
            f"{sum(p == phase for _, _, p in results[target])}"
            for phase in ("warm-up", "learning")
        )
        timing = f", max {max(ok):.2f} s, mean {sum(ok) / len(ok):.2f} s" if ok else ""
        lines.append(f"{target} killed: {len(ok)}/{len(results[target])} {what} ({by_phase}){timing}")
    print("; ".join(lines))
    sys.exit(0 if all(good for tries in results.values() for good, _, _ in tries) else 1)


if __name__ == "__main__":
    from stopping import run_until_stopped  # (benchmark/, this file's folder, is first on sys.path)

    sys.exit(run_until_stopped(main))
