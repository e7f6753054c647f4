"""Long runs, in all six scripts: Ctrl-C and kill stop a run cleanly and save it, checkpoints survive
SIGKILL, a diverging run ends with one line, a saved agent can be watched again (--eval-model), and the
time left follows the recent rate.

Real processes on real Breakout, started together where they can be (most of their time is spent
waiting for a progress line), with small sizes and a budget they never reach: they are stopped.

    python -m pytest tests/test_long_runs.py -q --durations=0
"""

import glob
import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types

import catch
import pytest
import torch
import torch.utils.tensorboard
from conftest import ROOT, read_scalars, read_text, run_bad

import dqn_atari
import plumbing.checkpoints
import plumbing.evaluation
import plumbing.run

SCRIPTS = ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py", "a2c_batched.py", "ppo_atari.py", "pqn_atari.py"]
DQN_SMALL = ["--learning-starts", "1000", "--buffer-size", "5000", "--batch-size", "8"]
SMALL = {  # small sizes; the budget is never reached
    "dqn_atari.py": DQN_SMALL,
    "dqn_atari_vec.py": DQN_SMALL + ["--envs-count", "2"],
    "dqn_atari_mp.py": DQN_SMALL + ["--workers-count", "2"],
    "a2c_batched.py": ["--envs-count", "2", "--rollout-length", "5"],
    "ppo_atari.py": ["--envs-count", "2", "--rollout-length", "32", "--num-minibatches", "2", "--update-epochs", "1"],
    "pqn_atari.py": ["--envs-count", "2", "--rollout-length", "32", "--num-minibatches", "2", "--update-epochs", "1"],
}
NETWORK = {
    "dqn_atari.py": "QNetwork",
    "dqn_atari_vec.py": "QNetwork",
    "dqn_atari_mp.py": "QNetwork",
    "a2c_batched.py": "Agent",
    "ppo_atari.py": "Agent",
    "pqn_atari.py": "QNetwork",
}


def module(script):
    return importlib.import_module(script[: -len(".py")])


class Run:
    """A script started as a user starts it; a thread collects its output lines (stderr included)."""

    def __init__(self, script, args, cwd):
        self.script, self.cwd = script, cwd
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, script), *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def wait_for(self, text, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(text in line for line in list(self.lines)):
                return
            assert self.proc.poll() is None, f"{self.script} ended before printing '{text}':\n{self.output()}"
            time.sleep(0.05)
        raise AssertionError(f"{self.script}: no '{text}' within {timeout} s:\n{self.output()}")

    def finish(self, timeout=120):
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return self.proc.returncode, self.output()

    def output(self):
        return "".join(self.lines)

    def run_dir(self):
        runs = glob.glob(os.path.join(self.cwd, "runs", "*"))
        assert len(runs) == 1, runs
        return runs[0]


def loads_into_the_network(script, path):
    """The saved file is a dict of tensors, strings and ints; its state_dict loads into the script's network."""
    model = torch.load(path, weights_only=True)
    assert model["script"] == script and model["env_id"] == "BreakoutNoFrameskip-v4" and model["actions_count"] == 4
    network = getattr(module(script), NETWORK[script])(model["actions_count"])
    network.load_state_dict(model["state_dict"])
    with torch.no_grad():
        out = network(torch.zeros(2, 4, 84, 84, dtype=torch.uint8))
    assert (out[0] if isinstance(out, tuple) else out).shape == (2, 4)


# ---------------------------------------------------------------- Ctrl-C and kill
# kill (SIGTERM) for one script, Ctrl-C (SIGINT) for the others: the handler is the same in all six
STOPS = {script: signal.SIGTERM if script == "dqn_atari_vec.py" else signal.SIGINT for script in SCRIPTS}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """Every script started with --save-model, then stopped once it has printed a progress line. (A
    second Ctrl-C while a run saves: tests/test_dqn_atari.py, in-process, at a known moment; here it
    could land after the save, as Python's exit restores the default handlers, and kill the run.)"""
    runs = {}
    for script, signum in STOPS.items():
        cwd = tmp_path_factory.mktemp(f"{script[:-3]}_{signum.name}")
        runs[script] = Run(script, ["--total-timesteps", "1000000", "--save-model"] + SMALL[script], cwd)
    for script, run in runs.items():
        run.wait_for("step ")  # the loop has run for 5 s and logged to TensorBoard
        with open(f"/proc/{run.proc.pid}/task/{run.proc.pid}/children") as f:
            run.children = [int(pid) for pid in f.read().split()]  # dqn_atari_mp.py's workers, among others
        run.proc.send_signal(STOPS[script])
    results = {}
    for script, run in runs.items():
        returncode, output = run.finish()
        deadline = time.time() + 10  # an orphan ends on its own once it sees the run gone: give it a moment
        while any(map(is_running, run.children)) and time.time() < deadline:
            time.sleep(0.1)
        run_dir = run.run_dir()
        results[script] = types.SimpleNamespace(
            cwd=run.cwd,
            returncode=returncode,
            output=output,
            run_dir=run_dir,
            model_path=os.path.join(run_dir, f"{script[:-3]}.pt"),
            children=run.children,
            children_left=[pid for pid in run.children if is_running(pid)],
        )
    return results


def is_running(pid):
    """A process that has not exited (a zombie waiting for its reaper has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("script, signum", STOPS.items(), ids=[f"{s}-{n.name}" for s, n in STOPS.items()])
def test_a_stop_signal_saves_flushes_and_exits(stopped, script, signum):
    run = stopped[script]
    assert run.returncode == 128 + signum, run.output  # 130 after Ctrl-C, 143 after kill
    assert run.children_left == [] and len(run.children) >= (2 if script == "dqn_atari_mp.py" else 0), run.children
    assert "Traceback" not in run.output, run.output
    assert f"stopped by {signum.name} at step " in run.output
    assert f"model saved to {os.path.relpath(run.model_path, run.cwd)}" in run.output
    assert "evaluation over" not in run.output  # a stopped run skips the evaluation games
    loads_into_the_network(script, run.model_path)
    run_dir = run.run_dir
    assert f"checkpoint saved; to go on: python {script} --resume {os.path.relpath(run_dir, run.cwd)}" in run.output
    replay = ["replay"] if script.startswith("dqn") else []  # what --resume needs is kept
    events = glob.glob("events.out.tfevents.*", root_dir=run_dir)
    assert sorted(os.listdir(run_dir)) == sorted([f"{script[:-3]}.pt", "checkpoint.pt"] + replay + events)
    scalars = read_scalars(run_dir)  # flushed: the progress line's scalars are there
    assert "charts/SPS" in scalars and "eval/episodic_return" not in scalars
    assert "|save_every|100000|" in read_text(run_dir)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_diverging_run_ends_with_one_line_and_keeps_its_checkpoint_from_before(script, tmp_path):
    # A learning rate no network survives: nan or inf within a few updates, where A2C and PPO would end in
    # Categorical's traceback and the DQN scripts and PQN would train on with nan. A checkpoint every 16 steps
    # (DQN) or every rollout, the first update one gradient step: the weights it leaves are still finite.
    flags = SMALL[script] + ["--learning-rate", "1e30", "--total-timesteps", "20000"]  # the last of a flag counts
    if script.startswith("dqn"):
        flags += ["--learning-starts", "32", "--buffer-size", "1000", "--batch-size", "4", "--save-every", "16"]
    else:
        flags += ["--save-every", "1"] + (["--num-minibatches", "1"] if script != "a2c_batched.py" else [])
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *flags], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    stopped = re.fullmatch(
        r"error: nan or inf at step ([\d,]+): training diverged \(is --learning-rate too high\?\); "
        r"(runs/\S+)'s last checkpoint, if any, is from before",
        lines[-1],
    )
    assert len(lines) == 1 and stopped, proc.stderr[-3000:]
    # the last checkpoint was written before (the rollout scripts: at the step where the next rollout stopped), its
    # weights all finite
    checkpoint = torch.load(tmp_path / stopped.group(2) / "checkpoint.pt", weights_only=False)
    assert 0 < checkpoint["global_step"] <= int(stopped.group(1).replace(",", ""))
    assert all(weights.isfinite().all() for weights in checkpoint["state_dict"].values())
    assert "|learning_rate|1e+30|" in read_text(str(tmp_path / stopped.group(2)))  # TensorBoard's events flushed


@pytest.mark.parametrize("script", [script for script in SCRIPTS if script != "dqn_atari_mp.py"])  # its class as theirs
def test_weights_an_update_made_nan_are_never_saved(script, in_tmp, monkeypatch):
    # An update whose loss was finite leaves nan weights (here made so after each optimizer step): the checkpoint
    # due next ends the run instead of writing them over the last good one, which a --resume would take
    optimizer = torch.optim.RAdam if script == "pqn_atari.py" else torch.optim.Adam
    real_step = optimizer.step

    def step_to_nan(self, *args, **kwargs):
        result = real_step(self, *args, **kwargs)
        with torch.no_grad():
            for group in self.param_groups:
                for weights in group["params"]:
                    weights.fill_(float("nan"))
        return result

    monkeypatch.setattr(optimizer, "step", step_to_nan)
    flags = SMALL[script] + ["--total-timesteps", "2000", "--save-every", "1"]
    if script.startswith("dqn"):
        flags += ["--learning-starts", "32", "--buffer-size", "1000", "--batch-size", "4"]
    with pytest.raises(SystemExit) as stopped:
        module(script).main(flags)
    assert str(stopped.value.code).startswith("error: nan or inf at step "), stopped.value.code
    for path in glob.glob("runs/*/checkpoint.pt"):  # the DQN scripts': saved while their replay filled
        assert all(weights.isfinite().all() for weights in torch.load(path, weights_only=False)["state_dict"].values())


@pytest.mark.parametrize("script", ["dqn_atari_vec.py", "ppo_atari.py", "pqn_atari.py"])
def test_a_stop_during_a_long_update_ends_it_after_the_gradient_step_in_progress(script, in_tmp, monkeypatch):
    """Ctrl-C or kill during an update of many gradient steps (16 environments' steps to catch up on at
    --learn-steps-period 1, or --update-epochs 1000) stops it after the step in progress, with a checkpoint,
    exit status 143: not after all of them, deaf to the signal meanwhile."""
    mod = module(script)
    optimizer = torch.optim.RAdam if script == "pqn_atari.py" else torch.optim.Adam
    steps, real_step = [], optimizer.step

    def step_then_be_stopped(self, *args, **kwargs):
        steps.append(1)
        if len(steps) == 3:  # the update's third gradient step: kill
            plumbing.run.stop_signals.append(signal.SIGTERM)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(plumbing.run, "stop_signals", [])
    monkeypatch.setattr(optimizer, "step", step_then_be_stopped)
    flags = {"dqn_atari_vec.py": ["--envs-count", "16", "--learn-steps-period", "1", "--learning-starts", "48"]}
    flags = flags.get(script, SMALL[script] + ["--update-epochs", "1000"]) + ["--total-timesteps", "10000"]
    with pytest.raises(SystemExit) as stopped:
        mod.main(flags + ["--buffer-size", "1000", "--batch-size", "8"] if script.startswith("dqn") else flags)
    assert stopped.value.code == 143 and len(steps) == 3
    assert len(glob.glob("runs/*/checkpoint.pt")) == 1


# ---------------------------------------------------------------- checkpoints
def test_sigkill_leaves_the_last_complete_checkpoint(tmp_path):
    # A checkpoint every 64 steps. Once one is complete, the kill comes as soon as the next one is
    # being written: most often it lands in that write.
    run = Run("dqn_atari.py", ["--total-timesteps", "1000000", "--save-model", "--save-every", "64"] + DQN_SMALL, tmp_path)
    deadline, seen = time.time() + 120, []
    for name in ["dqn_atari.pt", "dqn_atari.pt.tmp"]:
        while not (found := glob.glob(os.path.join(tmp_path, "runs", "*", name))) and time.time() < deadline:
            time.sleep(0.001)
        seen.append(bool(found))
    run.proc.kill()
    returncode, output = run.finish()
    assert returncode == -signal.SIGKILL, output
    assert seen == [True, True], "a model saved, then the next written into its .tmp file before it replaces it"
    run_dir = run.run_dir()
    assert sorted(glob.glob("*.pt", root_dir=run_dir)) == ["checkpoint.pt", "dqn_atari.pt"]  # a temporary file is no model
    written = {"dqn_atari.pt", "dqn_atari.pt.tmp", "checkpoint.pt", "checkpoint.pt.tmp", "replay"}
    assert set(os.listdir(run_dir)) - written == set(glob.glob("events.*", root_dir=run_dir))
    loads_into_the_network("dqn_atari.py", os.path.join(run_dir, "dqn_atari.pt"))
    assert plumbing.checkpoints.read_checkpoint(run_dir) is not None  # and --resume can go on from checkpoint.pt


# ---------------------------------------------------------------- watching a saved agent
@pytest.fixture(scope="module")
def watched(stopped, tmp_path_factory):
    """Each script watches its model from the stopped run, two games, all six at once. The models
    have hardly learned, and one that holds still plays long games: nine random actions in ten keep
    the games short (the network still picks the tenth)."""
    runs = {}
    for script in SCRIPTS:
        trained = stopped[script]
        runs[script] = Run(
            script, ["--eval-model", trained.model_path, "--eval-episodes", "2", "--eval-epsilon", "0.9"], trained.cwd
        )
        runs[script].model = (trained.model_path, os.path.getmtime(trained.model_path))
    return {script: (run, *run.finish(timeout=300)) for script, run in runs.items()}


@pytest.mark.parametrize("script", SCRIPTS)
def test_eval_model_plays_and_logs_the_games_asked_for(watched, script):
    run, returncode, output = watched[script]
    assert returncode == 0, output
    assert "Traceback" not in output
    assert "evaluation over 2 games" in output
    model_path, mtime = run.model
    assert os.path.getmtime(model_path) == mtime  # the saved model is read, never written
    runs = sorted(glob.glob(os.path.join(run.cwd, "runs", "*")), key=os.path.getmtime)
    assert len(runs) == 2 and runs[0] == os.path.dirname(model_path)  # a new run directory for the games
    assert "_eval__" in os.path.basename(runs[1])
    assert os.listdir(runs[1]) == glob.glob("events.out.tfevents.*", root_dir=runs[1])  # no training, no model
    returns = read_scalars(runs[1])["eval/episodic_return"]
    assert returns[0].tolist() == [0, 1]
    assert all(value >= 0 and value == int(value) for value in returns[1])
    assert f"(scores {', '.join(f'{value:g}' for value in returns[1])})" in output


def test_a_stop_before_the_games_start_ends_eval_model_without_a_game(stopped, tmp_path):
    """Ctrl-C that comes while --eval-model starts (its flags checked, its model loaded) is kept, as
    in training, by the script's handler: the games, which the default handler would end at once, must
    not start and play on. Each script, its handler set as when run as a script, Ctrl-C at once."""
    programs = {}
    for script in SCRIPTS:
        model = stopped[script].model_path
        programs[script] = (
            f"import os, signal, sys; sys.path.insert(0, {ROOT!r}); import {script[:-3]} as s, plumbing.run; "
            "signal.signal(signal.SIGINT, plumbing.run.on_stop_signal); os.kill(os.getpid(), signal.SIGINT); "
            f"s.main(['--eval-model', {model!r}, '--eval-episodes', '2'])"
        )
    procs = {
        script: subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for script, code in programs.items()
    }
    for script, proc in procs.items():
        output = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == -signal.SIGINT, (script, output)
        assert "Traceback" not in output and "evaluation over" not in output and "games of" in output, (script, output)


@pytest.mark.parametrize("script", SCRIPTS)
def test_eval_model_refuses_what_it_cannot_play(stopped, script, in_tmp, capsys):
    own = stopped[script].model_path
    other_script = SCRIPTS[SCRIPTS.index(script) - 1]
    other = stopped[other_script].model_path
    with open("notes.pt", "w") as f:
        f.write("not a model\n")
    for argv, why in [
        (["--eval-model", "missing.pt"], "cannot read missing.pt: No such file or directory"),
        (["--eval-model", other], f"{other} was saved by {other_script}: watch it with python {other_script}"),
        (  # Atlantis has Breakout's 4 actions: the game is told by its name, not by the network's shape
            ["--eval-model", own, "--env-id", "AtlantisNoFrameskip-v4"],
            "plays BreakoutNoFrameskip-v4, not AtlantisNoFrameskip-v4: add --env-id BreakoutNoFrameskip-v4",
        ),
        (["--eval-model", "notes.pt"], f"notes.pt is not a model saved by {script} --save-model"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            module(script).main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1 and "error: argument --eval-model: " in errors[0] and why in errors[0], err
        assert "Traceback" not in err
        assert not os.path.exists("runs")


def test_eval_model_refused_on_the_command_line(stopped, tmp_path):
    dqn_model = stopped["dqn_atari.py"].model_path
    message = run_bad("ppo_atari.py", ["--eval-model", dqn_model], tmp_path)
    assert message == (
        f"ppo_atari.py: error: argument --eval-model: {dqn_model} was saved by dqn_atari.py: "
        f"watch it with python dqn_atari.py --eval-model {dqn_model}"
    )


# ---------------------------------------------------------------- time left


# ---------------------------------------------------------------- input every script refuses
SIZES = {  # the flag that sizes what each script holds in memory, at a value no machine has memory for
    "dqn_atari.py": ("--buffer-size", "10000000000"),
    "dqn_atari_vec.py": ("--envs-count", "100000000"),
    "dqn_atari_mp.py": ("--workers-count", "100000000"),
    "a2c_batched.py": ("--rollout-length", "100000000"),
    "ppo_atari.py": ("--rollout-length", "100000000"),
    "pqn_atari.py": ("--rollout-length", "100000000"),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_seeds_names_numbers_and_sizes_out_of_range_are_refused_at_once(script, in_tmp, capsys, recwarn):
    """ALE takes seeds below 2**31; --exp-name names a file in the run directory, so it may not leave
    it or take the checkpoint's name; a learning rate past float32's range would train to NaN; --capture-video
    films the evaluation, which only --save-model or --eval-model plays; a size beyond the free memory
    would fail (or swap) after the run had started. Each error is two lines: usage, then the error."""
    flag, size = SIZES[script]
    name_rule = "must be a name of 1 to 100 bytes, no / or \\, not checkpoint; got"
    for argv, why in [
        (["--seed", "-1"], "argument --seed: must be an integer in [0, 2**30], got -1"),
        (["--seed", str(2**31)], f"argument --seed: must be an integer in [0, 2**30], got {2**31}"),
        (["--exp-name", "checkpoint"], f"argument --exp-name: {name_rule} 'checkpoint'"),
        (["--exp-name", "CheckPoint"], f"argument --exp-name: {name_rule} 'CheckPoint'"),  # one file where case is ignored
        (["--exp-name", "../mine"], f"argument --exp-name: {name_rule} '../mine'"),
        (["--exp-name", "x" * 101], f"argument --exp-name: {name_rule} '{'x' * 101}'"),
        (["--exp-name", "学" * 90], f"argument --exp-name: {name_rule} '{'学' * 90}'"),  # 270 bytes: too long a file name
        (["--env-id", "x" * 260 + "/breakout"], "argument --env-id: unknown Atari game"),  # ALE/ or no namespace only
        (["--learning-rate", "inf"], "argument --learning-rate: must be a number in (0, 3.4e38], got inf"),
        (["--learning-rate", "1e39"], "argument --learning-rate: must be a number in (0, 3.4e38], got 1e39"),  # inf in float32
        (["--total-timesteps", "1e6"], "argument --total-timesteps: must be an integer in [1, 2**62], got 1e6"),
        (["--save-every", str(2**63)], f"argument --save-every: must be an integer in [1, 2**62], got {2**63}"),  # int64
        (["--capture-video"], "argument --capture-video: films the evaluation games, played only with --save-model or"),
        # a replay file each checkpoint: at most 1,000 a ring, or checkpoints slow the run down more and more
        *[(["--save-every", "99", "--buffer-size", "100000"], "must be at least --buffer-size / 1,000 = 100")]
        * (script[:3] == "dqn"),
        ([flag, size], f"argument {flag}: "),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            module(script).main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1 and why in errors[0] and "Traceback" not in err, err
        assert len(err.splitlines()) == 2 and err.startswith("usage: ") and "[flags] (all of them: --help)\n" in err
        assert not os.path.exists("runs")
    assert "GiB of memory is free" in errors[0]  # the size's refusal, the last one
    assert not [w for w in recwarn if "not supported" in str(w.message)]  # ale-py's warning of an unknown game: not asked


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_runs_path_that_is_no_folder_stops_the_run_with_one_line(script, in_tmp, capsys):
    """The run directories go in ./runs: where a file has that name, the run cannot start; it says why."""
    with open("runs", "w") as f:
        f.write("the user's")
    with pytest.raises(SystemExit) as exit_info:
        module(script).main(["--total-timesteps", "10"])
    assert str(exit_info.value.code).startswith("error: cannot make the run's directory runs/BreakoutNoFrameskip-v4__")
    assert str(exit_info.value.code).endswith(": Not a directory") and "Traceback" not in capsys.readouterr().err
    assert open("runs").read() == "the user's"


def test_time_left_follows_the_rate_once_dqn_learns(in_tmp, monkeypatch, capsys):
    """dqn_atari.py's main loop on a simulated clock, with the rates of the issue's run: a step takes
    1/2,700 s in the warm-up, 1/150 s once learning starts. From the first progress line after
    learning starts, the time left is within 25% of the truth (the run's average rate would say a
    tenth of it)."""
    learning_starts, total, stop_at = 14_000, 10_000_000, 15_700
    clock = types.SimpleNamespace(now=1_000_000.0)

    class TimedCatch(catch.CatchVectorEnv):
        steps = 0

        def recv(self):
            if self.finished[0]:  # a reset: no step of the agent's, for the script or for the clock
                return super().recv()
            self.steps += 1
            clock.now += 1 / 150 if self.steps > learning_starts else 1 / 2_700
            if self.steps == stop_at:
                plumbing.run.stop_signals.append(signal.SIGINT)  # as Ctrl-C does
            return super().recv()

    monkeypatch.setattr(dqn_atari, "make_env", lambda env_id, envs_count: TimedCatch(envs_count))
    monkeypatch.setattr(plumbing.run, "time", types.SimpleNamespace(time=lambda: clock.now))
    monkeypatch.setattr(plumbing.run, "stop_signals", [])
    with pytest.raises(SystemExit) as exit_info:
        dqn_atari.main(
            [
                "--total-timesteps",
                str(total),
                "--learning-starts",
                str(learning_starts),
                "--buffer-size",
                "5000",
                "--batch-size",
                "8",
                "--learn-steps-period",
                "200",
                "--start-e",
                "1",
                "--end-e",
                "1",
            ]
        )
    assert exit_info.value.code == 130
    learning_lines = 0
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith("step "):
            continue
        step = int(line.split()[1].split("/")[0].replace(",", ""))
        hours, minutes = line.split(" | ")[2].removesuffix(" left").split("h")
        told = int(hours) * 3600 + int(minutes.removesuffix("m")) * 60
        if step > learning_starts:
            learning_lines += 1
            truth = (total - step) / 150
            assert abs(told - truth) <= 0.25 * truth, line
    assert learning_lines >= 2


@pytest.mark.parametrize("script", SCRIPTS)
def test_eval_epsilon_is_the_share_of_random_actions_in_the_evaluation(script, in_tmp, monkeypatch, capsys):
    """A network that always prefers LEFT (action 3 of Breakout's 4) plays three evaluation games with
    --eval-epsilon 0.25: LEFT on 0.75 + 0.25 / 4 of the agent's steps, every other action on about
    1/16 (the steps played for the agent, its launches, left out)."""
    mod = module(script)
    network_class, actions = getattr(mod, NETWORK[script]), []
    prefer_left = torch.tensor([0.0, 0.0, 0.0, 10.0])

    def forward(self, frames):
        preferences = prefer_left.expand(len(frames), 4)
        return (preferences, torch.zeros(len(frames))) if network_class.__name__ == "Agent" else preferences

    def spy_send(self, chosen):
        agent_acted = send(self, chosen)
        actions.extend(chosen[agent_acted].tolist())
        return agent_acted

    send = mod.AtariGames.send
    monkeypatch.setattr(network_class, "forward", forward)
    monkeypatch.setattr(mod.AtariGames, "send", spy_send)
    args = mod.parse_args(["--eval-epsilon", "0.25", "--eval-episodes", "3"])
    with torch.utils.tensorboard.SummaryWriter(str(in_tmp)) as writer:
        plumbing.evaluation.evaluate_and_log(network_class(4), mod.evaluate, args, str(in_tmp), writer, torch.device("cpu"))
    shares = [actions.count(action) / len(actions) for action in range(4)]
    assert len(actions) >= 300 and 0.75 <= shares[3] <= 0.875, shares  # three standard deviations either side
    assert all(0.02 <= share <= 0.105 for share in shares[:3]), shares


@pytest.mark.parametrize("script", SCRIPTS)
def test_eval_epsilon_defaults_to_the_final_epsilon_unless_told(script, in_tmp):
    """As CleanRL's evaluations: the Q-learning scripts' at --end-e (CleanRL's DQN passes its end_e),
    A2C's and PPO's with no random action (the policy draws its own)."""
    mod = module(script)
    if hasattr(mod.parse_args([]), "end_e"):
        assert mod.parse_args([]).eval_epsilon == 0.01 and mod.parse_args(["--end-e", "0.2"]).eval_epsilon == 0.2
        assert mod.parse_args(["--end-e", "0.2", "--eval-epsilon", "0.05"]).eval_epsilon == 0.05
    else:
        assert mod.parse_args([]).eval_epsilon == 0.0


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_evaluation_leaves_nohups_sighup_ignored(script, in_tmp, monkeypatch):
    """Run as a script, Ctrl-C and kill stop the evaluation games at once (nothing is left to save),
    but a run started under nohup keeps SIGHUP ignored: a closed terminal must not end it."""
    mod = module(script)
    handlers = {signum: signal.getsignal(signum) for signum in plumbing.run.STOP_SIGNALS}
    args = mod.parse_args(["--eval-episodes", "1", "--eval-epsilon", "1.0"])  # random play: a short game
    try:
        signal.signal(signal.SIGINT, plumbing.run.on_stop_signal)  # as __main__ sets them under nohup
        signal.signal(signal.SIGTERM, plumbing.run.on_stop_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with torch.utils.tensorboard.SummaryWriter(str(in_tmp)) as writer:
            network = getattr(mod, NETWORK[script])(4)
            plumbing.run.play_evaluation(network, mod.evaluate, args, str(in_tmp), writer, torch.device("cpu"))
        now = {signum: signal.getsignal(signum) for signum in plumbing.run.STOP_SIGNALS}
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert now == {signal.SIGINT: signal.SIG_DFL, signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_IGN}


@pytest.mark.parametrize("script", SCRIPTS)
def test_eval_model_plays_with_the_saved_weights(script, in_tmp, monkeypatch):
    """--eval-model's games are played by a network with exactly the weights in the file (here a
    network of another seed than the run's, saved as --save-model saves one)."""
    mod, network_class, players = module(script), getattr(module(script), NETWORK[script]), []
    torch.manual_seed(123)
    saved = network_class(4).state_dict()
    torch.save({"script": script, "env_id": "BreakoutNoFrameskip-v4", "actions_count": 4, "state_dict": saved}, "model.pt")
    forward = network_class.forward

    def spy_forward(self, frames):
        players.append(self)
        return forward(self, frames)

    monkeypatch.setattr(network_class, "forward", spy_forward)
    mod.main(["--eval-model", "model.pt", "--eval-episodes", "1"])
    assert len({id(player) for player in players}) == 1
    assert all(torch.equal(value, saved[name]) for name, value in players[0].state_dict().items())
