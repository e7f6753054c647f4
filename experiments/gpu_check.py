"""The GPU path of all six training scripts, checked in one call, with their speed on GPU and CPU.

    python experiments/gpu_check.py                      # on a machine with CUDA: a few minutes
    python experiments/gpu_check.py --cpu-only --quick   # anywhere: the same checks on the CPU, tiny runs (the suite's)
    python experiments/gpu_check.py --scripts dqn_atari.py dqn_atari_vec.py dqn_atari_mp.py \
        --workers-counts 2 --cpu-threads               # the DQN scripts alone: are fewer, larger updates faster?

For each script, as a user runs it (a subprocess, in a scratch directory that is deleted after):
(1) a short training run on the GPU with --save-model, which ends with one evaluation game;
(2) --eval-model on the model it saved, on the GPU; (3) both runs' TensorBoard events: the
script's loss tags, charts/episodic_return and eval/episodic_return are there, every loss value is
finite, and each run says it ran on the GPU; (4) the same training on the CPU (--no-cuda; with
--cpu-only, run (1) stands for it). It prints
each script's learning-phase steps/s on the GPU, on the CPU and their ratio; the same for fewer, larger
updates at dqn_atari.py's replay ratio (batch / K = 32 / 4 = 8 transitions sampled a step), 500 updates
each: dqn_atari_vec.py --envs-count 8 --learn-steps-period 32 --batch-size 256 and dqn_atari_mp.py
--workers-count 2 --learn-steps-period 16 --batch-size 128, each also as a ratio to dqn_atari.py's rate
on the same device (are they faster?); then dqn_atari_mp.py's
on the GPU at --workers-count 1, 2, 4 and 8: how many actors a GPU learner keeps up with, where
cores and a GPU are plenty; and what its learner's copy of the weights for the workers (after every
message of 32 transitions, from the GPU into shared CPU memory) costs against a message's time;
and dqn_atari.py's learning phase on the CPU at 2, 4, 8 and 16 torch threads (--cpu-threads; given
no count, none): whether torch's default, one thread per core, which the scripts keep, is best there too.
Exit status 0 when every check passes, 1 with the failures listed, 2 when there is no CUDA device
and no --cpu-only (which puts the CPU in the GPU's place).

The learning phase: the DQN scripts learn after --learning-starts steps, the others from their first
rollout. Its steps/s come from TensorBoard's wall times: the steps from a run's first loss event (the
scripts log their losses at every update of A2C, PPO and PQN, at every 100th of the DQN scripts) to
its last loss or charts/SPS event (one every 5 s and one at the end), over the seconds between the
two. Start-up, the warm-up and the first updates, with CUDA's own warm-up, are left out.

Thread counts are set, not inherited from the caller's environment: each run's OMP_NUM_THREADS is
torch's default (one thread a physical core) less one for each of its actor processes (dqn_atari_mp.py's
workers set their own single thread; the other scripts get torch's default). The count is the same on GPU and
CPU, so that the ratio compares the devices alone: on the CPU the learner needs those threads, on
the GPU they have little to do (the network and the batches live there). --threads sets another.
"""

import argparse
import datetime
import glob
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmark"))  # stopping.py, shared with the developers' checks
sys.path.insert(0, os.path.join(ROOT, "experiments"))
from sweep import flags_error, torch_default_threads  # noqa: E402  (each planned run's flags, checked by its script)

SCRIPTS = ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py", "a2c_batched.py", "ppo_atari.py", "pqn_atari.py"]

# A few thousand steps each: DQN learns for 4,000 steps (1,000 updates, 10 loss events) after 2,000
# of warm-up, with epsilon at its end value from step 600, so every step also runs the network to act.
DQN = ["--total-timesteps", "6000", "--learning-starts", "2000", "--buffer-size", "20000"]
PG = ["--total-timesteps", "4096", "--rollout-length", "64"]  # PPO, PQN: 8 envs, 8 rollouts of 512 steps
FLAGS = {
    "dqn_atari.py": DQN,
    "dqn_atari_vec.py": DQN + ["--envs-count", "8"],
    "dqn_atari_mp.py": DQN + ["--workers-count", "2"],
    "a2c_batched.py": ["--total-timesteps", "4096"],  # 16 envs x 10 steps: 25 updates
    "ppo_atari.py": PG,
    "pqn_atari.py": PG,
}
# --quick: the least that passes every check, so that the suite can take every path. The DQN scripts
# need 110 updates (a loss event at the 100th, then more steps to time), cheap at batch 4 and with
# random actions; the others a few rollouts of one game. Long enough for a game to end in training.
DQN_QUICK = ["--total-timesteps", "472", "--learning-starts", "32", "--buffer-size", "1000", "--batch-size", "4"]
DQN_QUICK += ["--end-e", "1.0"]
PG_QUICK = ["--total-timesteps", "400", "--envs-count", "1", "--rollout-length", "128"]
PG_QUICK += ["--num-minibatches", "2", "--update-epochs", "1"]
QUICK_FLAGS = {
    "dqn_atari.py": DQN_QUICK,
    "dqn_atari_vec.py": DQN_QUICK + ["--envs-count", "2"],
    "dqn_atari_mp.py": DQN_QUICK + ["--workers-count", "2"],
    "a2c_batched.py": ["--total-timesteps", "400", "--envs-count", "1", "--rollout-length", "20"],
    "ppo_atari.py": PG_QUICK,
    "pqn_atari.py": PG_QUICK,
}
# Fewer, larger updates at dqn_atari.py's replay ratio, batch / K transitions sampled a step (32 / 4 = 8; --quick:
# 4 / 4 = 1): are they faster? Timed against dqn_atari.py's learning phase on the same device (see larger_batch_flags).
# --quick: the same shape, tiny: twice the quick batch at twice its K.
LARGER_BATCHES = {
    "dqn_atari_vec.py": ["--envs-count", "8", "--learn-steps-period", "32", "--batch-size", "256"],
    "dqn_atari_mp.py": ["--workers-count", "2", "--learn-steps-period", "16", "--batch-size", "128"],
}
QUICK_LARGER_BATCHES = {
    "dqn_atari_vec.py": ["--envs-count", "2", "--learn-steps-period", "8", "--batch-size", "8"],
    "dqn_atari_mp.py": ["--workers-count", "2", "--learn-steps-period", "8", "--batch-size", "8"],
}
DQN_LOSSES = ["losses/td_loss", "losses/q_values"]
LOSSES = {  # the tags that must be logged and finite
    "dqn_atari.py": DQN_LOSSES,
    "dqn_atari_vec.py": DQN_LOSSES,
    "dqn_atari_mp.py": DQN_LOSSES,
    "a2c_batched.py": ["losses/actor_loss", "losses/critic_loss", "losses/entropy"],
    # not losses/explained_variance: NaN, rightly, where a rollout's returns do not vary
    "ppo_atari.py": ["losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac"],
    "pqn_atari.py": ["losses/td_loss", "losses/q_values"],
}


class CheckFailed(Exception):
    pass


def flag_value(flags, name, default):
    """The value of a flag in a command line: the last one given, as argparse reads it."""
    values = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == name]
    return int(values[-1]) if values else default


def cuda_flag(device):
    return "--no-cuda" if device == "cpu" else "--cuda"


def set_flag(flags, name, value):
    """flags with name's value set to value: replaced where given, else added."""
    i = flags.index(name) if name in flags else len(flags)
    return flags[:i] + [name, str(value)] + flags[i + 2 :]


def larger_batch_flags(script, quick):
    """The flags of a script's runs with fewer, larger updates: the check's, with the setting's K and batch, and
    steps for 500 updates after the warm-up (--quick: 110): a loss event comes at every 100th, and the phase timed
    starts at the first (at K=32, the check's 4,000 learning steps would give 125 updates, one loss event)."""
    flags, setting = (DQN_QUICK, QUICK_LARGER_BATCHES[script]) if quick else (DQN, LARGER_BATCHES[script])
    for name, value in zip(setting[::2], setting[1::2]):
        flags = set_flag(flags, name, value)
    starts, k = flag_value(flags, "--learning-starts", 0), flag_value(flags, "--learn-steps-period", 4)
    return set_flag(flags, "--total-timesteps", starts + (110 if quick else 500) * k)


def end_group(group, within):
    """Wait `within` s for the processes of a group to end by themselves, then SIGKILL those left."""
    deadline = time.time() + within
    try:
        while time.time() < deadline:
            os.killpg(group, 0)  # ProcessLookupError once none is left
            time.sleep(0.1)
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(script, flags, scratch, args, threads=None):
    """Run a script as a user does, in a directory of its own; its output and its run directory.
    threads: its OMP_NUM_THREADS, where not --threads or the threads its workers leave of torch's default."""
    command = [script, *flags, *args.extra]
    workers = flag_value(command, "--workers-count", 0) if script == "dqn_atari_mp.py" else 0
    threads = str(threads or args.threads or max(1, args.default_threads - workers))
    print(f"  python {shlex.join(command)}  (OMP_NUM_THREADS={threads})", end="", flush=True)
    cwd, start = tempfile.mkdtemp(dir=scratch), time.time()
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, script), *command[1:]],
        cwd=cwd,
        env=dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own: a timeout or a stop ends dqn_atari_mp.py's workers with it
    )
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(flush=True)
        raise CheckFailed(f"python {shlex.join(command)} ran past --timeout {args.timeout:g} s") from None
    finally:
        if proc.poll() is None:  # (the workers left would take cores from the next run timed)
            # The learner alone first: its workers end as they see it gone, and then multiprocessing's
            # resource tracker removes the queue's semaphores from /dev/shm (killed with it, it could not).
            proc.kill()
            proc.communicate()
            if hasattr(os, "killpg"):  # Windows: no process groups
                end_group(proc.pid, within=10)
    print(f": {time.time() - start:.0f} s", flush=True)
    if proc.returncode != 0:
        tail = " | ".join((err or out).strip().splitlines()[-3:])
        raise CheckFailed(f"python {shlex.join(command)} exited {proc.returncode}: {tail}")
    return out, os.path.join(cwd, "runs", os.listdir(os.path.join(cwd, "runs"))[0])


def scalars(run_dir):
    """{tag: [events (wall_time, step, value)]} of a run directory."""
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})  # 0: every event, not a sample
    events.Reload()
    return {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}


def check_run(stdout, logged, device, tags, finite):
    # the scripts' first line: 'runs/NAME: ... steps on cuda' (training), '... by MODEL on cuda' (--eval-model)
    if not any(line.startswith("runs") and line.endswith(f" on {device}") for line in stdout.splitlines()):
        raise CheckFailed(f"the run did not say it ran on {device}: {stdout.splitlines()[:1]}")
    missing = [tag for tag in tags if tag not in logged]
    if missing:
        raise CheckFailed(f"not logged: {', '.join(missing)} (logged: {', '.join(sorted(logged))})")
    not_finite = [tag for tag in finite if not np.isfinite([e.value for e in logged[tag]]).all()]
    if not_finite:
        raise CheckFailed(f"not finite: {', '.join(not_finite)}")


def learning_phase_rate(logged, losses):
    """Steps/s of the learning phase: from the first loss event to the last loss or charts/SPS event."""
    first = min((e for tag in losses for e in logged.get(tag, [])), key=lambda e: e.wall_time, default=None)
    last = max((e for tag in losses + ["charts/SPS"] for e in logged.get(tag, [])), key=lambda e: e.wall_time, default=None)
    if first is None or last.step <= first.step or last.wall_time <= first.wall_time:
        raise CheckFailed("no learning-phase events after the first loss event: the run needs more steps")
    return (last.step - first.step) / (last.wall_time - first.wall_time)


def check_script(script, flags, device, scratch, args):
    """Steps (1) to (4) of the docstring for one script; its learning-phase steps/s on the GPU and on the CPU."""
    losses = LOSSES[script]
    on_device = cuda_flag(device)
    stdout, run_dir = run(script, [on_device, *flags, "--save-model", "--eval-episodes", "1"], scratch, args)
    logged = scalars(run_dir)
    check_run(stdout, logged, device, losses + ["charts/episodic_return", "eval/episodic_return"], losses)
    models = [path for path in glob.glob(os.path.join(run_dir, "*.pt")) if os.path.basename(path) != "checkpoint.pt"]
    if len(models) != 1:
        raise CheckFailed(f"--save-model left {len(models)} models in its run directory, not one")
    stdout, eval_dir = run(script, [on_device, "--eval-model", models[0], "--eval-episodes", "1"], scratch, args)
    check_run(stdout, scalars(eval_dir), device, ["eval/episodic_return"], ["eval/episodic_return"])
    if device == "cpu":  # --cpu-only: the run above is the CPU's too
        return (learning_phase_rate(logged, losses),) * 2
    _, cpu_dir = run(script, ["--no-cuda", *flags], scratch, args)  # no model: only its speed is wanted
    return learning_phase_rate(logged, losses), learning_phase_rate(scalars(cpu_dir), losses)


def larger_batch_rates(script, flags, device, scratch, args):
    """A larger-batch setting's learning-phase steps/s on the GPU and on the CPU (--cpu-only: one run for both)."""
    stdout, run_dir = run(script, [cuda_flag(device), *flags], scratch, args)
    logged = scalars(run_dir)
    check_run(stdout, logged, device, DQN_LOSSES, DQN_LOSSES)
    if device == "cpu":
        return (learning_phase_rate(logged, DQN_LOSSES),) * 2
    _, cpu_dir = run(script, ["--no-cuda", *flags], scratch, args)
    return learning_phase_rate(logged, DQN_LOSSES), learning_phase_rate(scalars(cpu_dir), DQN_LOSSES)


def weight_copy_ms(device, copies=50):
    """ms of dqn_atari_mp.py's weight copy for its workers: the learner's Q-network on `device` into
    the shared-memory CPU copy they act with (Breakout's 4 actions), as the learner does it."""
    sys.path.insert(0, ROOT)
    import dqn_atari_mp  # a tool may import a script; scripts never import each other

    q_network = dqn_atari_mp.QNetwork(4).to(device, memory_format=torch.channels_last)
    acting_network = dqn_atari_mp.QNetwork(4).to(memory_format=torch.channels_last).share_memory()
    for _ in range(5):
        acting_network.load_state_dict(q_network.state_dict())
    start = time.perf_counter()
    for _ in range(copies):
        acting_network.load_state_dict(q_network.state_dict())
    return 1000 * (time.perf_counter() - start) / copies


def workers_rates(flags, device, scratch, args, checked_rate):
    """dqn_atari_mp.py's learning-phase steps/s on the GPU at each of --workers-counts; failures."""
    rates, failures = {}, []
    for workers in args.workers_counts:
        if workers == flag_value(flags + args.extra, "--workers-count", 2) and checked_rate is not None:
            rates[workers] = checked_rate  # the check's own run, above
            continue
        try:
            _, run_dir = run(
                "dqn_atari_mp.py", [cuda_flag(device), *set_flag(flags, "--workers-count", workers)], scratch, args
            )
            rates[workers] = learning_phase_rate(scalars(run_dir), DQN_LOSSES)
            print(f"    learning phase: {rates[workers]:,.0f} steps/s", flush=True)
        except CheckFailed as failure:
            failures.append(f"dqn_atari_mp.py --workers-count {workers}: {failure}")
    return rates, failures


def threads_rates(flags, scratch, args):
    """dqn_atari.py's learning-phase steps/s on the CPU with each of --cpu-threads torch threads; failures."""
    rates, failures = {}, []
    for threads in args.cpu_threads:
        try:
            _, run_dir = run("dqn_atari.py", ["--no-cuda", *flags], scratch, args, threads=threads)
            rates[threads] = learning_phase_rate(scalars(run_dir), DQN_LOSSES)
            print(f"    learning phase: {rates[threads]:,.0f} steps/s", flush=True)
        except CheckFailed as failure:
            failures.append(f"dqn_atari.py with {threads} torch threads: {failure}")
    return rates, failures


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-only", action="store_true", help="run on the CPU what would run on the GPU (where there is no CUDA)")
    p.add_argument("--quick", action="store_true", help="the smallest runs that pass every check; their rates mean little")
    p.add_argument("--scripts", nargs="+", choices=SCRIPTS, default=SCRIPTS, metavar="SCRIPT", help="the scripts to check")
    p.add_argument(
        "--workers-counts",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8],
        metavar="N",
        help="the --workers-count values of dqn_atari_mp.py whose learning phase is timed on the GPU",
    )
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every run (default: the cores its workers leave)")
    p.add_argument(
        "--cpu-threads",
        type=int,
        nargs="*",
        default=[2, 4, 8, 16],
        metavar="N",
        help="torch thread counts at which dqn_atari.py's learning phase is timed on the CPU (those above the cores "
        "are skipped): the scripts keep torch's default, one thread per core; is it the best here?",
    )
    p.add_argument(
        "--extra",
        type=shlex.split,
        default=[],
        help="flags added to every run of every script, e.g. --extra='--env-id PongNoFrameskip-v4'",
    )
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    args = p.parse_args(argv)
    for flag, values in [
        ("--workers-counts", args.workers_counts),
        ("--cpu-threads", args.cpu_threads),
        ("--threads", [] if args.threads is None else [args.threads]),
    ]:
        if min(values, default=1) < 1:
            p.error(f"argument {flag}: must be at least 1, got {min(values)}")
    if not 0 < args.timeout < float("inf"):  # (nan too)
        p.error(f"argument --timeout: must be a finite number of seconds above 0, got {args.timeout}")
    args.cpu_threads = [n for n in args.cpu_threads if n <= os.cpu_count()]
    all_flags = QUICK_FLAGS if args.quick else FLAGS
    for script in args.scripts:  # each run's flags as its script checks them, before the first run (an hour, on a GPU)
        planned = [[*all_flags[script], "--save-model", "--eval-episodes", "1"]]
        if script == "dqn_atari_mp.py":
            planned += [set_flag(all_flags[script], "--workers-count", n) for n in args.workers_counts]
        if script in LARGER_BATCHES:
            planned.append(larger_batch_flags(script, args.quick))
        for flags in planned:
            if error := flags_error(os.path.join(ROOT, script), ["--no-cuda", *flags, *args.extra], os.getcwd()):
                p.error(f"argument --extra or --workers-counts: python {script} refuses its flags: {error}")
    if not args.cpu_only and not torch.cuda.is_available():
        message = f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) finds none"
        p.exit(2, f"{message}; --cpu-only runs the same checks on the CPU\n")
    device, gpu = ("cpu", "CPU as GPU") if args.cpu_only else ("cuda", "GPU")  # gpu: the GPU column's name
    gpu_name = "none, --cpu-only: the CPU stands in" if args.cpu_only else torch.cuda.get_device_name()
    args.default_threads = torch_default_threads()  # one a physical core: fewer than the CPUs where cores run 2 threads
    machine = f"torch {torch.__version__} (CUDA {torch.version.cuda}) | GPU: {gpu_name} | {os.cpu_count()} CPUs"
    machine += f", torch's default {args.default_threads} threads"
    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M} | {machine}", flush=True)
    rates, mp_rates, cpu_rates, failures = {}, {}, {}, []
    larger, larger_rates = [script for script in LARGER_BATCHES if script in args.scripts], {}
    larger_settings = QUICK_LARGER_BATCHES if args.quick else LARGER_BATCHES
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as scratch:
        for script in args.scripts:
            print(f"{script}:", flush=True)
            try:
                rates[script] = check_script(script, all_flags[script], device, scratch, args)
                # as it comes, so that a run cut short by a time limit still tells what it measured
                print(
                    f"    learning phase: {rates[script][0]:,.0f} steps/s on the {gpu}, {rates[script][1]:,.0f} on the CPU",
                    flush=True,
                )
            except CheckFailed as failure:
                failures.append(f"{script}: {failure}")
        for script in larger:
            print(f"{script} {shlex.join(larger_settings[script])}:", flush=True)
            try:
                flags = larger_batch_flags(script, args.quick)
                larger_rates[script] = larger_batch_rates(script, flags, device, scratch, args)
                on_gpu, on_cpu = larger_rates[script]
                print(f"    learning phase: {on_gpu:,.0f} steps/s on the {gpu}, {on_cpu:,.0f} on the CPU", flush=True)
            except CheckFailed as failure:
                failures.append(f"{script} {shlex.join(larger_settings[script])}: {failure}")
        if "dqn_atari_mp.py" in args.scripts:
            print(f"dqn_atari_mp.py on the {gpu} at --workers-count {' '.join(map(str, args.workers_counts))}:", flush=True)
            checked_rate = rates.get("dqn_atari_mp.py", (None, None))[0]
            mp_rates, mp_failures = workers_rates(all_flags["dqn_atari_mp.py"], device, scratch, args, checked_rate)
            failures += mp_failures
        if args.cpu_threads:
            print(f"dqn_atari.py on the CPU with {' '.join(map(str, args.cpu_threads))} torch threads:", flush=True)
            cpu_rates, cpu_failures = threads_rates(all_flags["dqn_atari.py"], scratch, args)
            failures += cpu_failures

    quick = " (--quick: tiny runs, the rates mean little)" if args.quick else ""
    print(f"\nLearning phase, steps/s{quick}\n\n| script | {gpu} | CPU | {gpu} / CPU |\n|---|---:|---:|---:|")
    for script in args.scripts:
        if script in rates:
            on_gpu, on_cpu = rates[script]
            print(f"| {script} | {on_gpu:,.0f} | {on_cpu:,.0f} | {on_gpu / on_cpu:.2f} |")
        else:
            print(f"| {script} | failed | | |")
    if larger:
        reference = rates.get("dqn_atari.py")  # the ratios' base, on the same device
        note = "" if reference else "; dqn_atari.py not timed: no ratio to it"
        print(
            f"\nFewer, larger updates at dqn_atari.py's replay ratio (batch / K), learning phase, steps/s{quick}{note}\n\n"
            f"| setting | {gpu} | CPU | {gpu} / CPU | {gpu}: to dqn_atari.py | CPU: to dqn_atari.py |\n"
            "|---|---:|---:|---:|---:|---:|"
        )
        for script in larger:
            setting = f"{script} {shlex.join(larger_settings[script])}"
            if script in larger_rates:
                on_gpu, on_cpu = larger_rates[script]
                to_gpu, to_cpu = (f"{on_gpu / reference[0]:.2f}", f"{on_cpu / reference[1]:.2f}") if reference else ("", "")
                print(f"| {setting} | {on_gpu:,.0f} | {on_cpu:,.0f} | {on_gpu / on_cpu:.2f} | {to_gpu} | {to_cpu} |")
            else:
                print(f"| {setting} | failed | | | | |")
    if "dqn_atari_mp.py" in args.scripts:
        untimed = [n for n in (1, 2, 4, 8) if n not in args.workers_counts]
        note = f"; not timed: --workers-count {', '.join(map(str, untimed))}" if untimed else ""
        first = args.workers_counts[0]
        print(f"\ndqn_atari_mp.py, learning phase on the {gpu}, steps/s{quick}{note}\n")
        print(f"| --workers-count | steps/s | against {first} |\n|---:|---:|---:|")
        for workers in args.workers_counts:
            rate, base = mp_rates.get(workers), mp_rates.get(first)
            ratio = f"{rate / base:.2f}" if rate and base else ""
            print(f"| {workers} | {f'{rate:,.0f}' if rate else 'failed'} | {ratio} |")
    if args.cpu_threads:
        print(
            f"\ndqn_atari.py, learning phase on the CPU by torch threads, steps/s{quick} (the scripts keep torch's "
            f"default, one thread per physical core: {args.default_threads} here, with {os.cpu_count()} CPUs)\n"
        )
        print("| torch threads | steps/s |\n|---:|---:|")
        for threads in args.cpu_threads:
            rate = cpu_rates.get(threads)
            print(f"| {threads} | {f'{rate:,.0f}' if rate else 'failed'} |")
    if "dqn_atari_mp.py" in args.scripts:
        copy_ms = weight_copy_ms(device)
        line = f"\ndqn_atari_mp.py's weight copy for its workers, {gpu} to shared CPU memory: {copy_ms:.2f} ms"
        rate = mp_rates.get(flag_value(all_flags["dqn_atari_mp.py"] + args.extra, "--workers-count", 2))
        if rate:  # a message brings 32 transitions: 32 / rate seconds of the learning phase
            line += f", {copy_ms / (32_000 / rate):.1%} of a message's time in the learning phase"
        print(line)
    if failures:
        print(f"\nFAILED, {len(failures)} check(s):\n" + "\n".join(f"- {failure}" for failure in failures))
        return 1
    print("\nAll checks passed.")
    return 0


if __name__ == "__main__":
    from stopping import run_until_stopped  # benchmark/stopping.py (benchmark/ is on sys.path, above)

    sys.exit(run_until_stopped(main))
