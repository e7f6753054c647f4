"""How long a checkpoint pauses a DQN run whose replay memory holds 1M transitions (7.1 GB).

    python benchmark/checkpoint_pause.py                       # dqn_atari.py, 1M transitions, 1,000 steps/s
    python benchmark/checkpoint_pause.py --rate 3000 --buffer-size 200000

The script's own ReplayMemory, ReplayFiles and Checkpoints (with its networks and optimizer), in a
run directory under a temporary directory on this disk, fed synthetic frames instead of a game:
1. the ring is filled at full speed (its files written as it fills, as in a run), then
2. the run goes on at --rate steps/s (a DQN run on a GPU desktop; this machine's CPU does 150 to
   2,700), its files written in the background, a checkpoint every --save-every steps.
Reported: the pause of each checkpoint (writing the rows since the last file, the checkpoint file,
every fsync, deleting the files no checkpoint needs any more) and the longest stop of a step that
wrote no checkpoint (handing a file to the background thread, waiting for the one before); then the
run's peak resident memory against the replay's size (--no-checkpoints: the same run without them,
as every run was before checkpoints), and the replay's files on disk.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import dqn_atari  # noqa: E402  (a tool may import a script; scripts never import each other)
import plumbing.checkpoints  # noqa: E402
import plumbing.run  # noqa: E402


def timed(replay_files, module):  # module: plumbing.checkpoints, where Checkpoints finds save_atomically
    """Where a checkpoint's time goes: {part: seconds} since the dict was last cleared."""
    parts = {}

    def timer(name, function):
        def call(*args, **kwargs):
            began = time.perf_counter()
            result = function(*args, **kwargs)
            parts[name] = parts.get(name, 0.0) + time.perf_counter() - began
            return result

        return call

    replay_files.save = timer("the replay's last rows", replay_files.save)
    replay_files.saved = timer("deleting files", replay_files.saved)
    module.save_atomically = timer("checkpoint.pt", module.save_atomically)
    return parts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--buffer-size", type=int, default=1_000_000)
    p.add_argument("--save-every", type=int, default=100_000)
    p.add_argument("--rate", type=float, default=1000.0, help="steps/s once the ring is full")
    p.add_argument("--checkpoints", type=int, default=3, help="checkpoints measured once the ring is full")
    p.add_argument("--dir", default=None, help="where the run directory goes (default: a temporary directory)")
    p.add_argument("--no-checkpoints", action="store_true", help="the same run writing nothing: its memory, for comparison")
    args = p.parse_args(argv)
    try:  # the run's peak memory, read at the end
        import resource
    except ImportError:  # Windows
        p.exit(2, "checkpoint_pause.py: needs Linux or macOS (it reads the run's peak memory with getrusage)\n")
    for flag, value in (
        ("--buffer-size", args.buffer_size),
        ("--save-every", args.save_every),
        ("--checkpoints", args.checkpoints),
    ):
        if value < 1:
            p.error(f"argument {flag}: must be a positive integer, got {value}")
    if not 1 <= args.rate <= 1e6:  # (nan too) below a step a second, the run would take days
        p.error(f"argument --rate: must be a number of steps/s from 1 to 1,000,000, got {args.rate}")
    # the temporary directory is made in it, and deleted after: a folder made for it would be left behind
    if args.dir is not None and not (os.path.isdir(args.dir) and os.access(args.dir, os.W_OK | os.X_OK)):
        p.error(f"argument --dir: no folder {args.dir} that this user can write into")
    try:  # (some folders refuse even root: /sys, /proc)
        os.rmdir(tempfile.mkdtemp(dir=args.dir))
    except OSError as error:
        p.error(f"argument --dir: cannot make a folder in {args.dir or tempfile.gettempdir()}: {error.strerror}")
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        os.chdir(tmp)
        flags = dqn_atari.parse_args(["--buffer-size", str(args.buffer_size), "--save-every", str(args.save_every)])
        run = plumbing.run.Run(flags, "dqn_atari.py", "cpu")
        run_dir, writer = run.dir, run.writer
        q_network = dqn_atari.QNetwork(4).to(memory_format=torch.channels_last)
        target_network = dqn_atari.QNetwork(4).to(memory_format=torch.channels_last)
        optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4, fused=True)
        q_network(torch.zeros(32, 4, 84, 84, dtype=torch.uint8)).sum().backward()
        optimizer.step()  # Adam's state exists, as in a run that learns
        replay = dqn_atari.ReplayMemory(args.buffer_size, 1)
        rng = np.random.default_rng(0)
        replay_files = plumbing.checkpoints.ReplayFiles(replay, run_dir)
        checkpoints = plumbing.run.Checkpoints(run, 4, q_network, optimizer, target_network, rng, replay_files)
        parts = timed(replay_files, plumbing.checkpoints)
        frames = rng.integers(0, 256, size=(4096, 1, 84, 84), dtype=np.uint8)  # what is written: noise, as incompressible
        flag = np.zeros(1, dtype=bool)
        pauses, longest_step, step = [], 0.0, 0

        def play(steps, rate):
            nonlocal step, longest_step
            start = time.perf_counter()
            for _ in range(steps):
                replay.add(frames[step % 4096], 0, 0, flag, ~flag, flag)
                step += 1
                saving = step % args.save_every == 0
                began = time.perf_counter()
                if not args.no_checkpoints:
                    checkpoints.save_every(step, step // 4)
                took = time.perf_counter() - began
                if saving:
                    pauses.append((step, took))
                    shares = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in parts.items())
                    print(f"checkpoint at step {step:,}: {took:.2f} s ({shares})", flush=True)
                    parts.clear()
                elif rate:
                    longest_step = max(longest_step, took)
                if rate and step % 100 == 0:  # pace the run: sleep to where the rate says the step should be
                    time.sleep(max(start + (step - first) / rate - time.perf_counter(), 0))

        first = 0
        began = time.perf_counter()
        play(args.buffer_size, None)
        print(f"ring filled, its files written: {time.perf_counter() - began:.0f} s", flush=True)
        first = step
        play(args.checkpoints * args.save_every, args.rate)
        measured = [took for at, took in pauses if at > args.buffer_size] or [0.0]
        replay_dir = os.path.join(run_dir, "replay")
        on_disk = sum(e.stat().st_size for e in os.scandir(replay_dir)) if os.path.isdir(replay_dir) else 0
        peak_unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, in KiB on Linux
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * peak_unit
        replay_bytes = sum(field.nbytes for field in replay_files.fields)
        print(
            f"\n{args.buffer_size:,} transitions at {args.rate:,.0f} steps/s: checkpoint pauses "
            f"{', '.join(f'{t:.2f}' for t in measured)} s (longest {max(measured):.2f} s); the longest other step "
            f"{longest_step * 1000:.0f} ms\npeak resident memory {peak / 2**30:.2f} GiB, "
            f"the replay {replay_bytes / 2**30:.2f} GiB; its files {on_disk / 2**30:.2f} GiB on disk"
        )
        writer.close()


if __name__ == "__main__":
    from stopping import run_until_stopped  # (benchmark/, this file's folder, is first on sys.path)

    sys.exit(run_until_stopped(main))
