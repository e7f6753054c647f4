"""Speed of the DQN scripts on this machine, all measured in one run.

    python benchmark/dqn_speed.py                 # dqn_atari.py only
    python benchmark/dqn_speed.py --all           # and the vectorized and multi-process variants
    python benchmark/dqn_speed.py --learn-steps-periods 1 2    # and dqn_atari.py learning every step, every 2

(a) the bare update rate: the same network, batch and gradient step in a tight loop on random data;
(b) each script's steps/s in the learning phase (one update per --learn-steps-period steps, epsilon
    at its end value so every step also runs the network to act);
(c) each script's steps/s in the warm-up phase (before learning starts, epsilon near 1 as in the
    first 80,000 steps of a default run);
(d) the bare emulator: ale-py's AtariVectorEnv with random actions and nothing else;
(e) the replay memory's bytes per transition;
(f) with --all, the vectorized script's learning phase at K=32 and at K=4: the seed notes' question in time;
(g) with --learn-steps-periods, dqn_atari.py's learning phase at other K, against K=4 and K x the bare updates.
Rates come from the wall-clock times of the scripts' own TensorBoard events, so start-up is excluded.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from ale_py.vector_env import AtariVectorEnv
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import dqn_atari  # noqa: E402  (a tool may import a script; scripts never import each other)


def bare_update_rate(seconds, batch_size=32):
    # the script's network, memory layout and optimizer
    q_network = dqn_atari.QNetwork(4).to(memory_format=torch.channels_last)
    target_network = dqn_atari.QNetwork(4).to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4, fused=True)
    states = torch.randint(0, 256, (batch_size, 4, 84, 84), dtype=torch.uint8)
    next_states = torch.randint(0, 256, (batch_size, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 4, (batch_size,))
    rewards, dones = torch.ones(batch_size), torch.zeros(batch_size)

    def update():
        with torch.no_grad():
            target = dqn_atari.td_target(rewards, dones, target_network(next_states).max(1).values, 0.99)
        q_values = q_network(states).gather(1, actions[:, None]).squeeze(1)
        loss = F.mse_loss(q_values, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(5):
        update()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        update()
        count += 1
    return count / (time.perf_counter() - start)


def bare_env_rate(envs_count, seconds):
    envs = AtariVectorEnv("breakout", envs_count, reward_clipping=False)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(rng.integers(0, 4, size=envs_count))
        steps += envs_count
    envs.close()
    return steps / (time.perf_counter() - start)


def phase_rate(script, args, learning):
    """Steps/s of one script run, from the wall times of its charts/updates events in one phase."""
    with tempfile.TemporaryDirectory() as cwd:
        subprocess.run(
            [sys.executable, os.path.join(ROOT, script), "--no-cuda", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL
        )
        run_dir = os.path.join(cwd, "runs", os.listdir(os.path.join(cwd, "runs"))[0])
        events = EventAccumulator(run_dir)
        events.Reload()
        points = [e for e in events.Scalars("charts/updates") if (e.value > 0) == learning]
    assert len(points) >= 2, f"{script}: fewer than two progress lines in the phase; give it more steps"
    first, last = points[0], points[-1]
    return (last.step - first.step) / (last.wall_time - first.wall_time)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--all", action="store_true", help="also measure dqn_atari_vec.py and dqn_atari_mp.py")
    p.add_argument("--seconds", type=float, default=30, help="length of each bare measurement")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="learning-phase runs of dqn_atari.py (and, with --all, of dqn_atari_mp.py), interleaved; "
        "their mean is reported: this machine's speed drifts",
    )
    p.add_argument(
        "--learn-steps-periods",
        type=int,
        nargs="+",
        default=[],
        metavar="K",
        help="also measure dqn_atari.py's learning phase at these --learn-steps-period values, interleaved with its runs at 4",
    )
    args = p.parse_args()
    if any(k < 1 for k in args.learn_steps_periods):
        p.error("argument --learn-steps-periods: each K must be a positive integer")
    torch.set_num_threads(os.cpu_count())  # the scripts' torch default; said on purpose
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} threads")

    updates_per_s = bare_update_rate(args.seconds)
    env_1 = bare_env_rate(1, args.seconds / 3)
    rows = [
        ("bare update rate, batch 32 (updates/s)", f"{updates_per_s:.1f}", ""),
        ("bare emulator, 1 env (steps/s)", f"{env_1:,.0f}", ""),
    ]
    # Learning: epsilon already at 0.01, one update per 4 steps; warm-up: epsilon 1 -> 0.92.
    learn = [
        "--total-timesteps",
        "5000",
        "--learning-starts",
        "1000",
        "--buffer-size",
        "10000",
        "--exploration-fraction",
        "0.01",
        "--learn-steps-period",
        "4",
    ]
    # 60k steps: long enough for several progress lines (one per 5 s) even where the warm-up runs at 5,000 steps/s
    warm = [
        "--total-timesteps",
        "60000",
        "--learning-starts",
        "60000",
        "--buffer-size",
        "30000",
        "--exploration-fraction",
        "1.0",
        "--end-e",
        "0.92",
    ]
    bound = 4 * updates_per_s
    learning_runs, mp_learning_runs = [], []
    other_k_runs = {k: [] for k in args.learn_steps_periods}
    for _ in range(args.repeats):  # interleaved, so that a drift of the machine's speed hits both alike
        learning_runs.append(phase_rate("dqn_atari.py", learn, learning=True))
        for k in other_k_runs:
            other_k_runs[k].append(phase_rate("dqn_atari.py", learn + ["--learn-steps-period", str(k)], learning=True))
        if args.all:
            mp_learning_runs.append(phase_rate("dqn_atari_mp.py", learn + ["--workers-count", "2"], learning=True))
    learning = float(np.mean(learning_runs))
    warmup = phase_rate("dqn_atari.py", warm, learning=False)
    rows += [
        (
            f"dqn_atari.py learning phase (steps/s; runs: {', '.join(f'{r:.1f}' for r in learning_runs)})",
            f"{learning:.1f}",
            f"{learning / bound:.0%} of 4 x bare updates (target >= 85%)",
        ),
        (
            "dqn_atari.py warm-up phase (steps/s)",
            f"{warmup:,.0f}",
            f"{warmup / env_1:.0%} of the bare emulator (target >= 70%)",
        ),
    ]
    for k, runs in other_k_runs.items():
        rate = float(np.mean(runs))
        rows.append(
            (
                f"dqn_atari.py --learn-steps-period {k}, learning phase (steps/s; runs: "
                f"{', '.join(f'{r:.1f}' for r in runs)})",
                f"{rate:.1f}",
                f"{rate / learning:.2f} x at K=4; {rate / (k * updates_per_s):.0%} of {k} x bare updates",
            )
        )
    if args.all:
        env_8 = bare_env_rate(8, args.seconds / 3)
        rows.append(("bare emulator, 8 envs (steps/s)", f"{env_8:,.0f}", ""))
        vec_warm = phase_rate("dqn_atari_vec.py", warm + ["--envs-count", "8"], learning=False)
        rows.append(
            (
                "dqn_atari_vec.py --envs-count 8, warm-up (steps/s)",
                f"{vec_warm:,.0f}",
                f"{vec_warm / env_8:.0%} of the bare emulator (target >= 70%)",
            )
        )
        # the vectorized script's learning phase at the notes' K=32 and at K=4 (as many updates per step as the reference);
        # K=32 runs its 4,000 learning steps in seconds: 16,000 give it several progress lines
        vec_learn_32 = phase_rate(
            "dqn_atari_vec.py",
            learn + ["--envs-count", "8", "--learn-steps-period", "32", "--total-timesteps", "17000"],
            learning=True,
        )
        vec_learn_4 = phase_rate("dqn_atari_vec.py", learn + ["--envs-count", "8"], learning=True)
        rows += [
            (
                "dqn_atari_vec.py --envs-count 8 --learn-steps-period 32, learning (steps/s)",
                f"{vec_learn_32:,.0f}",
                f"{vec_learn_32 / learning:.2f} x dqn_atari.py, with 8 x fewer updates a step",
            ),
            (
                "dqn_atari_vec.py --envs-count 8 --learn-steps-period 4, learning (steps/s)",
                f"{vec_learn_4:,.0f}",
                f"{vec_learn_4 / learning:.2f} x dqn_atari.py, as many updates a step",
            ),
        ]
        mp_warm = phase_rate("dqn_atari_mp.py", warm + ["--workers-count", "2"], learning=False)
        mp_learn = float(np.mean(mp_learning_runs))
        rows += [
            (
                "dqn_atari_mp.py --workers-count 2, warm-up (steps/s)",
                f"{mp_warm:,.0f}",
                f"{mp_warm / warmup:.2f} x dqn_atari.py (target >= 1.6 x)",
            ),
            (
                f"dqn_atari_mp.py --workers-count 2, learning (steps/s; runs: "
                f"{', '.join(f'{r:.1f}' for r in mp_learning_runs)})",
                f"{mp_learn:.1f}",
                f"{mp_learn / learning:.2f} x dqn_atari.py (target >= 1.0 x)",
            ),
        ]
    replay = dqn_atari.ReplayMemory(10_000, 1)
    per_transition = (
        sum(a.nbytes for a in (replay.frames, replay.actions, replay.rewards, replay.dones, replay.agent_acted, replay.firsts))
        / 10_000
    )
    rows.append(("replay bytes per transition", f"{per_transition:,.0f}", "target <= 7,500"))

    print("\n| measure | value | against |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
