"""Speed of the DQN scripts on this machine, all measured in one run.

    python experiments/dqn_speed.py                 # dqn_atari.py only
    python experiments/dqn_speed.py --all           # and the vectorized and multi-process variants
    python experiments/dqn_speed.py --learn-steps-periods 1 2    # and dqn_atari.py learning every step, every 2
    python experiments/dqn_speed.py --settings "dqn_atari_vec.py --envs-count 8 --learn-steps-period 32 --batch-size 256" \
        "dqn_atari_mp.py --workers-count 2 --learn-steps-period 16 --batch-size 128"    # fewer, larger updates

(a) the bare update rate: the same network, batch and gradient step in a tight loop on random data;
(b) each script's steps/s in the learning phase (one update per --learn-steps-period steps, epsilon
    at its end value so every step also runs the network to act); for dqn_atari.py, where its time
    goes: its loop built up from its parts, an update, 4 acting passes, 4 game steps (learning_parts_ms),
    against the script itself, whose rest is its logging and bookkeeping;
(c) each script's steps/s in the warm-up phase (before learning starts, epsilon near 1 as in the
    first 80,000 steps of a default run);
(d) the bare emulator: ale-py's AtariVectorEnv with random actions and nothing else;
(e) the replay memory's bytes per transition;
(f) with --all, the vectorized script's learning phase at K=32 and at K=4: the seed notes' question in time;
(g) with --learn-steps-periods, dqn_atari.py's learning phase at other K, against K=4 and K x the bare updates;
(h) with --threads-counts, dqn_atari.py's learning phase (and with --all dqn_atari_mp.py's) with other torch
    thread counts (OMP_NUM_THREADS), interleaved with its runs at torch's default, one thread per core;
(i) with --settings, the learning phase of each setting, a DQN script and its flags, interleaved with dqn_atari.py's
    runs at K=4 batch 32, as a ratio to its rate: are fewer, larger updates at the same replay ratio (batch / K
    transitions sampled a step, 32 / 4 = 8 for the reference) faster? Each learns for 500 updates at least, so
    that the phase gives several progress lines at K=32 too.
Rates come from the wall-clock times of the scripts' own TensorBoard events, so start-up is excluded.
"""

import argparse
import os
import shlex
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

sys.path.insert(0, os.path.join(ROOT, "benchmark"))  # stopping.py, shared with the developers' checks
sys.path.insert(0, os.path.join(ROOT, "experiments"))
from sweep import flags_error, load_script, torch_default_threads  # noqa: E402

DQN_SCRIPTS = ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py"]  # those that log charts/updates

# Learning: epsilon already at 0.01, one update per 4 steps.
LEARNING_FLAGS = [
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
# Warm-up: epsilon 1 -> 0.92.
# 60k steps: long enough for several progress lines (one per 5 s) even where the warm-up runs at 5,000 steps/s
WARM_UP_FLAGS = [
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


def learning_parts_ms(seconds, batch_size=32):
    """ms per 4 learning steps as dqn_atari.py's loop is built up from its parts, each build run in
    turns of one second, interleaved: (1) one update (a replay sample, the TD target, a gradient
    step); (2) and 4 acting passes (batch 1); (3) and 4 steps of the game, stored in the replay, the
    emulator playing the 4th during the update: the loop without its logging and bookkeeping."""
    q_network = dqn_atari.QNetwork(4).to(memory_format=torch.channels_last)
    target_network = dqn_atari.QNetwork(4).to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4, fused=True)
    games, replay, rng = dqn_atari.AtariGames("breakout", 1, 0), dqn_atari.ReplayMemory(10_000, 1), np.random.default_rng(0)

    def update():
        states, actions, rewards, next_states, dones = replay.sample(batch_size, rng)
        states, next_states = torch.from_numpy(states), torch.from_numpy(next_states)
        with torch.no_grad():
            next_q_max = target_network(next_states).max(1).values
            target = dqn_atari.td_target(torch.from_numpy(rewards).float(), torch.from_numpy(dones).float(), next_q_max, 0.99)
        q_values = q_network(states).gather(1, torch.from_numpy(actions).long()[:, None]).squeeze(1)
        loss = F.mse_loss(q_values, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def play(epsilon, learn_at=None):
        for step in range(4):
            obs, firsts = games.obs, games.firsts
            actions = dqn_atari.epsilon_greedy(q_network, obs, epsilon, 4, rng, "cpu")
            agent_acted = games.send(actions)
            if step == learn_at:
                update()
            rewards, dones, _ = games.recv()
            replay.add(obs[:, -1], actions, rewards, dones, agent_acted, firsts)

    def update_and_act():
        for _ in range(4):
            dqn_atari.epsilon_greedy(q_network, games.obs, 0.0, 4, rng, "cpu")
        update()

    for _ in range(500):  # 2,000 random steps in the replay to sample from
        play(1.0)
    builds = {
        "update": update,
        "+ 4 acting passes": update_and_act,
        "+ 4 game steps": lambda: play(0.0, learn_at=3),  # epsilon 0: every step acts with the network
    }
    spent, periods = dict.fromkeys(builds, 0.0), dict.fromkeys(builds, 0)
    for build in builds.values():
        build()  # warm
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for name, build in builds.items():
            turn = time.perf_counter()
            while time.perf_counter() - turn < 1.0:
                build()
                periods[name] += 1
            spent[name] += time.perf_counter() - turn
    games.envs.close()
    return {name: 1000 * spent[name] / periods[name] for name in builds}


def each_part(cumulative_ms):
    """{build: ms} of builds that each add a part to the one before -> {part: the ms it adds}."""
    names, totals = list(cumulative_ms), list(cumulative_ms.values())
    return {name: total - before for name, total, before in zip(names, totals, [0.0] + totals[:-1])}


def phase_rate(script, args, learning, threads=None):
    """Steps/s of one script run, from the wall times of its charts/updates events in one phase;
    threads: its torch thread count (OMP_NUM_THREADS), None for torch's default."""
    env = {name: value for name, value in os.environ.items() if name not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as cwd:
        run = subprocess.run(
            [sys.executable, os.path.join(ROOT, script), "--no-cuda", *args],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,  # shown if it fails; not the note of a warm-up run ("this run only plays")
            text=True,
            env=env,
        )
        if run.returncode:
            sys.exit(f"error: {script} {' '.join(args)} failed (exit status {run.returncode}):\n{run.stderr.strip()[-3000:]}")
        run_dir = os.path.join(cwd, "runs", os.listdir(os.path.join(cwd, "runs"))[0])
        events = EventAccumulator(run_dir)
        events.Reload()
        points = [e for e in events.Scalars("charts/updates") if (e.value > 0) == learning]
    if len(points) < 2:  # (a progress line every 5 s) a large K makes few updates: the phase goes by too fast to time
        sys.exit(f"error: {script}: fewer than two progress lines in the phase timed; a smaller K, or more --total-timesteps")
    first, last = points[0], points[-1]
    return (last.step - first.step) / (last.wall_time - first.wall_time)


def learning_setting(entry, learn):
    """A --settings entry, 'SCRIPT FLAGS' -> its script, the flags of its learning-phase runs, the transitions
    it samples a step (batch / K); ValueError where it is refused. Its flags come after learn's and the phase's
    steps, so that they may set those too."""
    try:
        script, *flags = shlex.split(entry) or [""]
    except ValueError as error:  # an unclosed quote
        raise ValueError(f"{entry!r} cannot be split as a shell would: {error}") from None
    if script not in DQN_SCRIPTS:
        raise ValueError(f"{entry!r} does not start with a DQN script: {', '.join(DQN_SCRIPTS)}")
    if error := flags_error(os.path.join(ROOT, script), [*learn, *flags], os.getcwd()):
        raise ValueError(f"{entry!r}: {script} refuses its flags: {error}")
    parsed = load_script(os.path.join(ROOT, script)).parse_args([*learn, *flags])
    # 500 updates at least: at K=32 the reference's 4,000 learning steps are 125, too few for several progress lines
    steps = parsed.learning_starts + max(4000, 500 * parsed.learn_steps_period)
    return script, [*learn, "--total-timesteps", str(steps), *flags], parsed.batch_size / parsed.learn_steps_period


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--all", action="store_true", help="also measure dqn_atari_vec.py and dqn_atari_mp.py")
    p.add_argument("--seconds", type=float, default=30, help="length of each bare measurement")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="learning-phase runs of dqn_atari.py (and of each --settings; with --all, of dqn_atari_mp.py), interleaved; "
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
    p.add_argument(
        "--threads-counts",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="also measure the learning phase with N torch threads (OMP_NUM_THREADS), interleaved with torch's default",
    )
    p.add_argument(
        "--settings",
        nargs="+",
        default=[],
        metavar="'SCRIPT FLAGS'",
        help="also measure the learning phase of each, a DQN script and its flags, quoted, interleaved with dqn_atari.py's "
        "runs at K=4 batch 32, e.g. 'dqn_atari_vec.py --envs-count 8 --learn-steps-period 32 --batch-size 256' (its "
        "flags come last: they may set the phase's --total-timesteps too)",
    )
    args = p.parse_args(argv)
    # 1 s at least: a shorter bare measurement may end before its first update, a rate of 0 divided by later
    if not 1 <= args.seconds < float("inf"):
        p.error(f"argument --seconds: must be a finite number of seconds, 1 or more, got {args.seconds}")
    if args.repeats < 1:
        p.error(f"argument --repeats: must be a positive integer, got {args.repeats}")
    if any(not 1 <= k <= 1000 for k in args.learn_steps_periods):  # the phase timed is 4,000 steps: a few updates at least
        p.error("argument --learn-steps-periods: each K must be an integer from 1 to 1,000")
    if any(not 1 <= n <= os.cpu_count() for n in args.threads_counts):  # more would only wait for each other
        p.error(f"argument --threads-counts: each N must be an integer from 1 to the {os.cpu_count()} cores here")
    learn = LEARNING_FLAGS  # (a list the runs below extend, never change)
    settings = {}  # each --settings entry: its script, the flags of its learning-phase runs, its transitions sampled a step
    for entry in args.settings:
        try:
            settings[entry] = learning_setting(entry, learn)
        except ValueError as error:
            p.error(f"argument --settings: {error}")
    default_threads = torch_default_threads()  # the scripts run with it unless --threads-counts says
    torch.set_num_threads(default_threads)  # the bare measurements too
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__} with {default_threads} threads (its default)")

    updates_per_s = bare_update_rate(args.seconds)
    built_ms = learning_parts_ms(args.seconds * 1.5)
    env_1 = bare_env_rate(1, args.seconds / 3)
    rows = [
        ("bare update rate, batch 32 (updates/s)", f"{updates_per_s:.1f}", ""),
        ("bare emulator, 1 env (steps/s)", f"{env_1:,.0f}", ""),
    ]
    warm = WARM_UP_FLAGS
    bound = 4 * updates_per_s
    parts_ms = built_ms["+ 4 game steps"]  # the loop without its logging and bookkeeping
    parts_bound = 4000 / parts_ms  # steps/s
    mp = ["--workers-count", "2"]
    learning_runs, mp_learning_runs = [], []
    other_k_runs = {k: [] for k in args.learn_steps_periods}
    settings_runs = {entry: [] for entry in settings}
    other_threads_runs = {
        (script, n): [] for n in args.threads_counts for script in ["dqn_atari.py"] + ["dqn_atari_mp.py"] * args.all
    }
    for _ in range(args.repeats):  # interleaved, so that a drift of the machine's speed hits both alike
        learning_runs.append(phase_rate("dqn_atari.py", learn, learning=True))
        for k in other_k_runs:
            other_k_runs[k].append(phase_rate("dqn_atari.py", learn + ["--learn-steps-period", str(k)], learning=True))
        for entry, (script, flags, _) in settings.items():
            settings_runs[entry].append(phase_rate(script, flags, learning=True))
        if args.all:
            mp_learning_runs.append(phase_rate("dqn_atari_mp.py", learn + mp, learning=True))
        for script, n in other_threads_runs:
            flags = learn + (mp if script == "dqn_atari_mp.py" else [])
            other_threads_runs[script, n].append(phase_rate(script, flags, learning=True, threads=n))
    learning = float(np.mean(learning_runs))
    warmup = phase_rate("dqn_atari.py", warm, learning=False)
    rows += [
        (
            f"dqn_atari.py learning phase (steps/s; runs: {', '.join(f'{r:.1f}' for r in learning_runs)})",
            f"{learning:.1f}",
            f"{learning / parts_bound:.0%} of its loop's parts, {parts_bound:.1f} (target >= 90%); "
            f"{learning / bound:.0%} of 4 x bare updates",
        ),
    ]
    script_ms = 4000 / learning
    # The rest is a difference of two measures: below 0 where the script ran faster than its parts built alone (noise)
    rest = "+ logging and bookkeeping" if script_ms >= parts_ms else "+ logging and bookkeeping (< 0: within the noise)"
    rows += [
        (f"  ms per 4 learning steps: {name}", f"{ms:.1f}", f"{ms / script_ms:.0%} of dqn_atari.py's")
        for name, ms in {**each_part(built_ms), rest: script_ms - parts_ms}.items()
    ]
    rows += [
        ("  ms per 4 learning steps: dqn_atari.py", f"{script_ms:.1f}", "runs' mean"),
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
    for entry, runs in settings_runs.items():
        rate = float(np.mean(runs))
        rows.append(
            (
                f"{entry}, learning (steps/s; runs: {', '.join(f'{r:.1f}' for r in runs)})",
                f"{rate:.1f}",
                f"{rate / learning:.2f} x dqn_atari.py at K=4 batch 32; {settings[entry][2]:g} transitions sampled a step "
                "(dqn_atari.py: 8)",
            )
        )
    for (script, n), runs in other_threads_runs.items():
        rate = float(np.mean(runs))
        default_rate = learning if script == "dqn_atari.py" else float(np.mean(mp_learning_runs))
        rows.append(
            (
                f"{script}{' --workers-count 2' * (script == 'dqn_atari_mp.py')} learning, {n} torch thread(s) "
                f"(steps/s; runs: {', '.join(f'{r:.1f}' for r in runs)})",
                f"{rate:.1f}",
                f"{rate / default_rate:.2f} x at torch's default ({default_threads})",
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
    from stopping import run_until_stopped  # benchmark/stopping.py (benchmark/ is on sys.path, above)

    sys.exit(run_until_stopped(main))
