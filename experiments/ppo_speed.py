"""How close ppo_atari.py (or pqn_atari.py) runs to the speed of its own network, at its default settings.

On a CPU the Nature CNN's forward and backward passes are most of PPO's work, so their time
sets a bound on the script's speed. pqn_atari.py runs PPO's loop with a Q-network, so
`--script pqn_atari.py` measures it the same way. This measures, in one run:

  bound     the passes one iteration needs, in a tight loop on random data with the same network
            (channels-last weights, the script's optimizer) and the same batch shapes: --rollout-length + 1
            action forwards of --envs-count observations without gradients, and --update-epochs x
            --num-minibatches forward+backward passes of a minibatch. It is timed before and after
            the script's run and the mean is used, since other load on the machine drifts.
  emulator  --rollout-length steps of the --envs-count Atari games alone, with random actions:
            what a synchronous rollout adds to the bound, since the network waits for each step.
  script    the script's main() at its default settings on Breakout for a few iterations; its steps/s
            from the end of the first iteration (start-up and first-touch costs) to the end of the
            last, timed where it logs charts/learning_rate, once per iteration.

It prints the script's rate as a share of the bound (target: at least 85%) and as a share of the
bound with the emulator's time added (the best a rollout that acts and steps in turn can do). On a
shared machine the wall-clock ratio moves with other jobs' load, so it also prints the ratio of CPU
seconds (this process's, the emulator's threads included): a job that takes our core stops our CPU
clock too. Torch's thread count is set on purpose, the same for all measurements: --threads 1 by
default, which stays steady on a shared machine (when another job holds a core, threads that wait
for each other make every operation several times slower); on an idle machine try --threads 2.

    python experiments/ppo_speed.py                     # about 3 minutes on 2 cores
    python experiments/ppo_speed.py --threads 2 --iterations 4
    python experiments/ppo_speed.py --script pqn_atari.py --threads 2
"""

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark"))  # stopping.py
import plumbing.run  # noqa: E402
import ppo_atari  # noqa: E402

SCRIPTS = ("ppo_atari.py", "pqn_atari.py")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", choices=SCRIPTS, default="ppo_atari.py", help="the script measured, at its defaults")
    p.add_argument("--threads", type=ppo_atari.positive_int, default=1, help="torch's intra-op threads for both measurements")
    p.add_argument(
        "--iterations",
        type=ppo_atari.positive_int,
        default=8,
        help="iterations of the script that are timed (one more runs first, untimed)",
    )
    p.add_argument(
        "--bound-iterations",
        type=ppo_atari.positive_int,
        default=2,
        help="iterations' worth of passes timed for the bound, before and after the script",
    )
    args = p.parse_args()
    if args.threads > os.cpu_count():  # more would only wait for each other (and 10**5 crash the emulator)
        p.error(f"argument --threads: must be at most the {os.cpu_count()} cores here, got {args.threads}")
    for flag, value in (("--iterations", args.iterations), ("--bound-iterations", args.bound_iterations)):
        if value > 10_000:  # 10,000 of PPO's: 10M steps, hours; the actions drawn for them are kept in memory
            p.error(f"argument {flag}: must be at most 10,000, got {value}")
    return args


def network_and_optimizer(script, actions_count, learning_rate):
    """The script's network and optimizer, as its main() makes them."""
    if script is ppo_atari:
        agent = ppo_atari.Agent(actions_count).to(memory_format=torch.channels_last)
        return agent, torch.optim.Adam(agent.parameters(), lr=learning_rate, eps=1e-5, fused=True)
    q_network = script.QNetwork(actions_count).to(memory_format=torch.channels_last)
    return q_network, torch.optim.RAdam(q_network.parameters(), lr=learning_rate)


def bound_seconds_per_iteration(script, defaults, actions_count, iterations):
    """Wall and CPU seconds of bare network passes per iteration, on random data."""
    agent, optimizer = network_and_optimizer(script, actions_count, defaults.learning_rate)
    frames = (ppo_atari.STACK, *ppo_atari.FRAME_SHAPE)
    batch = defaults.envs_count * defaults.rollout_length
    step_obs = torch.randint(0, 256, (defaults.envs_count, *frames), dtype=torch.uint8)
    minibatch_obs = torch.randint(0, 256, (batch // defaults.num_minibatches, *frames), dtype=torch.uint8)

    def one_iteration():
        for _ in range(defaults.rollout_length + 1):  # the actions, and V of the observation after the last step
            with torch.no_grad():
                agent(step_obs)
        for _ in range(defaults.update_epochs * defaults.num_minibatches):
            outputs = agent(minibatch_obs)  # PPO: logits and V(s); PQN: Q(s, .)
            optimizer.zero_grad()
            sum(output.mean() for output in (outputs if isinstance(outputs, tuple) else [outputs])).backward()
            optimizer.step()

    one_iteration()  # warm-up: oneDNN picks its kernels, memory gets allocated
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(iterations):
        one_iteration()
    return (time.perf_counter() - wall) / iterations, (time.process_time() - cpu) / iterations


def emulator_seconds_per_iteration(script, defaults, iterations):
    """Wall and CPU seconds of one rollout's environment steps, alone (the emulator's C++ threads count in the CPU time)."""
    envs = script.make_env(defaults.env_id, defaults.envs_count)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, envs.single_action_space.n, size=(iterations + 1, defaults.rollout_length, envs.num_envs))
    for a in actions[0]:  # warm-up
        envs.step(a)
    wall, cpu = time.perf_counter(), time.process_time()
    for a in actions[1:].reshape(-1, envs.num_envs):
        envs.step(a)
    seconds = (time.perf_counter() - wall) / iterations, (time.process_time() - cpu) / iterations
    envs.close()
    return seconds


def script_steps_per_second(script, iterations):
    """The script's own steps per wall and per CPU second at its defaults, over `iterations`
    iterations after the first."""
    ends = []  # (global step, wall clock, CPU clock) at the end of each iteration

    class TimingWriter(SummaryWriter):
        def add_scalar(self, tag, value, global_step=None, *args, **kwargs):
            if tag == "charts/learning_rate":
                ends.append((global_step, time.perf_counter(), time.process_time()))
            super().add_scalar(tag, value, global_step, *args, **kwargs)

    defaults = script.parse_args([])
    batch = defaults.envs_count * defaults.rollout_length
    work_dir, cwd = tempfile.mkdtemp(prefix="ppo_speed_"), os.getcwd()
    plumbing.run.SummaryWriter = TimingWriter  # the run's writer, made by plumbing.Run
    try:
        os.chdir(work_dir)
        script.main(["--total-timesteps", str(batch * (iterations + 1)), "--exp-name", "ppo_speed"])
    finally:
        plumbing.run.SummaryWriter = SummaryWriter
        os.chdir(cwd)
        shutil.rmtree(work_dir, ignore_errors=True)
    (first_step, first_wall, first_cpu), (last_step, last_wall, last_cpu) = ends[0], ends[-1]
    return (last_step - first_step) / (last_wall - first_wall), (last_step - first_step) / (last_cpu - first_cpu)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    script = importlib.import_module(args.script.removesuffix(".py"))
    defaults = script.parse_args([])
    envs = script.make_env(defaults.env_id, 1)
    actions_count = envs.single_action_space.n
    envs.close()
    batch = defaults.envs_count * defaults.rollout_length
    print(
        f"{args.script} defaults: {defaults.env_id}, {defaults.envs_count} envs x {defaults.rollout_length} steps, "
        f"{defaults.update_epochs} epochs x {defaults.num_minibatches} minibatches of {batch // defaults.num_minibatches}"
        f" | torch threads {torch.get_num_threads()} | load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    before = bound_seconds_per_iteration(script, defaults, actions_count, args.bound_iterations)
    print(
        f"bound, before: {before[0]:.2f} s of network passes per iteration ({before[1]:.2f} CPU s) = "
        f"{batch / before[0]:,.0f} steps/s",
        flush=True,
    )
    emulator = emulator_seconds_per_iteration(script, defaults, args.iterations)
    print(f"emulator alone: {emulator[0]:.2f} s of environment steps per iteration ({emulator[1]:.2f} CPU s)", flush=True)
    rate, rate_cpu = script_steps_per_second(script, args.iterations)
    print(f"script: {rate:,.0f} steps/s ({rate_cpu:,.0f} per CPU s) over {args.iterations} iterations", flush=True)
    after = bound_seconds_per_iteration(script, defaults, actions_count, args.bound_iterations)
    print(
        f"bound, after: {after[0]:.2f} s of network passes per iteration ({after[1]:.2f} CPU s) = "
        f"{batch / after[0]:,.0f} steps/s",
        flush=True,
    )

    bound = batch / ((before[0] + after[0]) / 2)
    bound_cpu = batch / ((before[1] + after[1]) / 2)
    with_emulator = batch / ((before[0] + after[0]) / 2 + emulator[0])
    print(
        f"bound {bound:,.0f} steps/s | script {rate:,.0f} steps/s | ratio {rate / bound:.1%} (target >= 85%) | "
        f"bound with the emulator {with_emulator:,.0f} steps/s, script at {rate / with_emulator:.1%} of it (target >= 80%) | "
        f"per CPU second: bound {bound_cpu:,.0f}, script {rate_cpu:,.0f}, ratio {rate_cpu / bound_cpu:.1%} | "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    from stopping import run_until_stopped  # benchmark/stopping.py (benchmark/ is on sys.path, above)

    sys.exit(run_until_stopped(main))
