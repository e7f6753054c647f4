"""--resume, in all six scripts: a run killed with SIGKILL goes on from its last checkpoint, with
everything as it was saved, to its total; bad input is refused and the directory left as it was.

Real processes on real Breakout (all started together: most of their time is spent starting), and
in-process runs on tests/catch.py for the state's bit-for-bit comparison.

    python -m pytest tests/test_resume.py -q --durations=0
"""

import collections
import copy
import glob
import importlib
import itertools
import os
import random
import signal
import subprocess
import sys
import time
import types

import catch
import numpy as np
import pytest
import torch
from conftest import ROOT, read_scalars, refused_before_this

import plumbing.checkpoints
import plumbing.run

SCRIPTS = ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py", "a2c_batched.py", "ppo_atari.py", "pqn_atari.py"]
DQN_TINY = ["--learning-starts", "50", "--buffer-size", "200", "--batch-size", "8", "--learn-steps-period", "4"]
TINY = {  # a few hundred steps, a checkpoint every 100
    "dqn_atari.py": DQN_TINY,
    "dqn_atari_vec.py": DQN_TINY + ["--envs-count", "2"],
    "dqn_atari_mp.py": DQN_TINY + ["--workers-count", "2"],
    "a2c_batched.py": ["--envs-count", "2", "--rollout-length", "5"],
    "ppo_atari.py": ["--envs-count", "2", "--rollout-length", "16", "--num-minibatches", "2", "--update-epochs", "1"],
    "pqn_atari.py": ["--envs-count", "2", "--rollout-length", "16", "--num-minibatches", "2", "--update-epochs", "1"],
}
TOTAL, SAVE_EVERY = 300, 100


def module(script):
    return importlib.import_module(script[: -len(".py")])


def start(script, args, cwd):
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, script), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def the_run_dir(cwd):
    runs = glob.glob(os.path.join(cwd, "runs", "*"))
    assert len(runs) <= 1, runs
    return runs[0] if runs else None


# ---------------------------------------------------------------- killed, then resumed
@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """Each script's run SIGKILLed once its first checkpoint is written, then resumed to its total."""
    flags = ["--total-timesteps", str(TOTAL), "--save-every", str(SAVE_EVERY), "--seed", "3"]
    cwds = {script: tmp_path_factory.mktemp(script[:-3]) for script in SCRIPTS}
    procs = {script: start(script, flags + TINY[script], cwds[script]) for script in SCRIPTS}
    deadline, waiting = time.time() + 240, set(SCRIPTS)
    while waiting and time.time() < deadline:
        for script in list(waiting):
            run_dir = the_run_dir(cwds[script])
            if run_dir and os.path.exists(os.path.join(run_dir, "checkpoint.pt")):
                procs[script].kill()
                waiting.remove(script)
            elif procs[script].poll() is not None:
                pytest.fail(f"{script} ended before its first checkpoint:\n{procs[script].stdout.read()}")
        time.sleep(0.05)
    assert not waiting, f"no checkpoint within 240 s: {waiting}"
    results = {}
    for script in SCRIPTS:
        procs[script].communicate(timeout=60)
        run_dir = the_run_dir(cwds[script])
        results[script] = {"killed": procs[script].returncode, "run_dir": run_dir, "cwd": cwds[script]}
        results[script]["resumed_at"] = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["global_step"]
        procs[script] = start(script, ["--resume", run_dir], cwds[script])
    for script in SCRIPTS:
        results[script]["output"] = procs[script].communicate(timeout=300)[0]
        results[script]["returncode"] = procs[script].returncode
    return results


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_killed_run_resumes_and_runs_to_its_total(resumed, script):
    run = resumed[script]
    assert run["killed"] == -signal.SIGKILL
    assert run["returncode"] == 0, run["output"]
    assert "Traceback" not in run["output"]
    assert f"{os.path.relpath(run['run_dir'], run['cwd'])}: resumed at step {run['resumed_at']:,}" in run["output"]
    scalars = read_scalars(run["run_dir"])
    for tag, (steps, _) in scalars.items():
        if tag != "charts/episodic_return":  # (several games may end at one step)
            assert len(set(steps)) == len(steps), (tag, steps)  # each step once: the killed run's last ones are hidden
    # The run's last step: the first to reach the total (the progress line's last charts/SPS is logged there).
    last_step = max(steps.max() for steps, _ in scalars.values())
    assert TOTAL <= last_step < TOTAL + 32
    assert not os.path.exists(os.path.join(run["run_dir"], "replay"))  # the run's end deletes the replay's files
    assert os.path.getsize(os.path.join(run["run_dir"], "checkpoint.pt")) < 10_000  # and keeps only what says it ended
    if script.startswith("dqn"):  # where an unbroken run's ends: one update per 4 steps after the 50 of the warm-up
        steps, updates = scalars["charts/updates"]
        assert steps[-1] == last_step and updates[-1] == module(script).updates_due(last_step, 50, 4)


# ---------------------------------------------------------------- what comes back is what was saved
# On Catch: a checkpoint at step 300, the run killed at about step 480 (DQN: once the rows after the
# checkpoint have filled a whole ring), DQN with random actions (no forward pass to wait for).
DQN_ON_CATCH = ["--learning-starts", "50", "--buffer-size", "200", "--batch-size", "8", "--learn-steps-period", "8"]
DQN_ON_CATCH += ["--start-e", "1", "--end-e", "1"]
IN_PROCESS = {
    "dqn_atari.py": DQN_ON_CATCH,
    "dqn_atari_vec.py": DQN_ON_CATCH + ["--envs-count", "2"],
    "a2c_batched.py": TINY["a2c_batched.py"],
    "ppo_atari.py": TINY["ppo_atari.py"],
    "pqn_atari.py": TINY["pqn_atari.py"],
}


def live_state(checkpoints, step, updates):
    """Everything a checkpoint is to save, copied from the running objects themselves."""
    c = checkpoints
    state = {
        "step": int(step),
        "updates": int(updates),
        "network": copy.deepcopy(c.network.state_dict()),
        "optimizer": copy.deepcopy(c.optimizer.state_dict()),
        "target_network": None if c.target_network is None else copy.deepcopy(c.target_network.state_dict()),
        "generator": None if c.rng is None else copy.deepcopy(c.rng.bit_generator.state),
        "numpy_random": np.random.get_state(),
        "torch_random": torch.get_rng_state(),
        "python_random": random.getstate(),
        "returns": list(c.run.returns),
    }
    if c.replay is not None:
        replay = c.replay.replay
        state["replay"] = [field.copy() for field in c.replay.fields] + [copy.copy(replay.pos), copy.copy(replay.full)]
    return state


def assert_equal(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_equal(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    else:
        assert a == b, (where, a, b)  # (a score saved as a float, np.float64 in the running deque: the same value)


class Killed(BaseException):
    """What SIGKILL does to a run, in-process: it stops at once, with nothing saved."""


@pytest.mark.parametrize("script", list(IN_PROCESS))
def test_a_resumed_run_starts_from_exactly_what_was_saved(script, in_tmp, monkeypatch):
    """A run on Catch saves a checkpoint at step 300, then plays on past a whole ring of the replay
    (its files written, TensorBoard flushed) and is killed. Resumed, it stops before its first step:
    its state then is what the first had at the checkpoint, bit for bit, the replay included (rebuilt
    from the checkpoint's files alone), and TensorBoard shows no step after the checkpoint's."""
    mod, saves, writers = module(script), [], []
    real_save = plumbing.run.Checkpoints.save

    def save(self, step, updates, finished=False):
        saves.append(live_state(self, step, updates))
        real_save(self, step, updates, finished)

    class Writer(plumbing.run.SummaryWriter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            writers.append(self)

    class KilledCatch(catch.CatchVectorEnv):
        steps = 0

        def recv(self):
            self.steps += 1
            if self.steps == 560 // self.num_envs:
                writers[-1].flush()  # what came after the checkpoint is on disk: TensorBoard must hide it
                raise Killed
            return super().recv()

    monkeypatch.setattr(plumbing.run.Checkpoints, "save", save)
    monkeypatch.setattr(plumbing.run, "SummaryWriter", Writer)
    monkeypatch.setattr(plumbing.run, "stop_signals", [])
    monkeypatch.setattr(mod, "make_env", lambda env_id, envs_count: KilledCatch(envs_count))
    with pytest.raises(Killed):
        mod.main(["--total-timesteps", "1000", "--save-every", "300", "--seed", "4"] + IN_PROCESS[script])
    (run_dir,) = glob.glob(os.path.join("runs", "*"))
    assert len(saves) == 1 and saves[0]["step"] >= 300
    steps_logged = [steps for steps, _ in read_scalars(run_dir).values()]
    assert max(s.max() for s in steps_logged) > saves[0]["step"]  # the killed run logged beyond its checkpoint

    monkeypatch.setattr(mod, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    plumbing.run.stop_signals.append(signal.SIGINT)  # the resumed run stops at its loop's top: its state is the restored one
    with pytest.raises(SystemExit) as exit_info:
        mod.main(["--resume", run_dir])
    assert exit_info.value.code == 130
    assert_equal(saves[1], saves[0])
    for steps in [steps for steps, _ in read_scalars(run_dir).values()]:
        assert steps.max(initial=0) <= saves[0]["step"]  # (a tag logged only after the checkpoint is left empty)


def test_the_mp_learners_state_comes_back_bit_for_bit(in_tmp):
    """dqn_atari_mp.py's learner, whose workers cannot run in-process: its networks, optimizer, random
    streams, scores and replay (rows from two workers), saved, then restored into new objects."""
    mod, data_rng = module("dqn_atari_mp.py"), np.random.default_rng(0)
    args = mod.parse_args(["--buffer-size", "1000", "--workers-count", "2", "--learning-starts", "64", "--seed", "7"])
    run_dir = plumbing.run.new_run_dir("mp_state")

    def learner():
        q_network, target_network = mod.QNetwork(4), mod.QNetwork(4)
        optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
        replay = mod.ReplayMemory(args.buffer_size, args.workers_count)
        files = plumbing.checkpoints.ReplayFiles(replay, run_dir, mod.SEND_BATCH)
        objects = (q_network, optimizer, target_network, np.random.default_rng(args.seed), files)
        # what Checkpoints reads of its run (no TensorBoard: the weights are finite)
        run = types.SimpleNamespace(args=args, script="dqn_atari_mp.py", dir=run_dir, returns=collections.deque(maxlen=100))
        run.stop_if_diverged = lambda weights, step: None
        return plumbing.run.Checkpoints(run, 4, *objects)

    saving = learner()
    for _ in range(3):  # an optimizer with state, networks that differ, streams moved on
        saving.optimizer.zero_grad()
        saving.network(torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)).pow(2).mean().backward()
        saving.optimizer.step()
    saving.rng.random(5), np.random.random(3), torch.rand(3), random.random()
    saving.run.returns.extend([3.0, 5.0, 0.0])
    for _ in add_rows("dqn_atari_mp.py", saving.replay.replay, data_rng, 1600):  # the ring wraps
        saving.replay.keep_up()
    saved = live_state(saving, 6400, 1234)
    saving.save(6400, 1234)
    saving.replay.thread.shutdown()
    np.random.random(3), torch.rand(3), random.random()  # the streams move on after the save, as a run's do

    restored = learner()
    assert restored.restore(plumbing.checkpoints.read_checkpoint(run_dir)) == (6400, 1234)
    assert_equal(live_state(restored, 6400, 1234), saved)


# ---------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A short dqn_atari.py run on Catch that ended with --keep-checkpoint: its directory can go on."""
    cwd = tmp_path_factory.mktemp("finished")
    argv = ["--total-timesteps", "120", "--keep-checkpoint", "--seed", "5"] + IN_PROCESS["dqn_atari.py"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(module("dqn_atari.py"), "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
        return os.path.join(cwd, module("dqn_atari.py").main(argv))


def tree(path):
    """Every file under path with its size and time of change: what a refused --resume must leave as it was."""
    return {
        os.path.join(root, name): (os.stat(os.path.join(root, name)).st_size, os.stat(os.path.join(root, name)).st_mtime_ns)
        for root, dirs, files in os.walk(path)
        for name in files + dirs
    }


def refused(script, argv, capsys):
    """main(argv) stops at once: exit status 2, one error line (returned), no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        module(script).main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def copied_run(run_dir, tmp_path, checkpoint=None, checkpoint_bytes=None):
    """A copy of run_dir, its checkpoint replaced by the dict or the bytes given."""
    import shutil

    copy_dir = os.path.join(tmp_path, "copy")
    shutil.copytree(run_dir, copy_dir)
    if checkpoint is not None:
        torch.save(checkpoint, os.path.join(copy_dir, "checkpoint.pt"))
    if checkpoint_bytes is not None:
        with open(os.path.join(copy_dir, "checkpoint.pt"), "wb") as f:
            f.write(checkpoint_bytes)
    return copy_dir


class RunsCode:
    """A pickled object that would create a file when unpickled: weights_only must refuse it unrun."""

    def __reduce__(self):
        return (open, ("ran_code", "w"))


def bad_runs(finished, tmp_path):
    checkpoint = torch.load(os.path.join(finished, "checkpoint.pt"), weights_only=True)
    with open(os.path.join(finished, "checkpoint.pt"), "rb") as f:
        whole = f.read()
    os.makedirs(os.path.join(tmp_path, "empty"))
    return [
        (os.path.join(tmp_path, "nowhere"), [], "is not a directory"),
        (os.path.join(tmp_path, "empty"), [], "has no checkpoint.pt (a run writes one every --save-every steps"),
        (finished, [], "has run its 120 steps: to go on, add a larger --total-timesteps"),
        (finished, ["--learning-rate", "0.5"], "error: argument --learning-rate: a resumed run keeps its own (0.0001); only"),
        (finished, ["--total-timesteps", "100"], "has run its 120 steps"),
        (
            copied_run(finished, tmp_path / "a", checkpoint | {"script": "ppo_atari.py"}),
            [],
            "is a run of ppo_atari.py: resume it",
        ),
        (  # its replay/ still there, as after a kill while the run's end deleted it
            copied_run(finished, tmp_path / "b", checkpoint | {"resumable": False}),
            ["--total-timesteps", "200"],
            "kept no checkpoint (--keep-checkpoint keeps one); its replay files are of no more use: rm -r ",
        ),
        (
            copied_run(finished, tmp_path / "c", checkpoint_bytes=whole[: len(whole) // 2]),
            [],
            "is truncated or is not a checkpoint",
        ),
        (copied_run(finished, tmp_path / "d", RunsCode()), [], "is truncated or is not a checkpoint"),
        (copied_run(finished, tmp_path / "e", {"state_dict": {}}), [], "is truncated or is not a checkpoint"),
    ]


def test_bad_resume_is_refused_and_leaves_the_directory_as_it_was(finished_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cases = bad_runs(finished_run, tmp_path)
    missing_chunk = copied_run(finished_run, tmp_path / "f")
    os.remove(sorted(glob.glob(os.path.join(missing_chunk, "replay", "*")))[0])
    cases.append((missing_chunk, ["--total-timesteps", "200"], "which the checkpoint needs, is missing or truncated"))
    unwritable = copied_run(finished_run, tmp_path / "g")  # (chmod would not stop root: os.access says what would)
    monkeypatch.setattr(os, "access", lambda path, mode, real=os.access: path != unwritable and real(path, mode))
    cases.append((unwritable, ["--total-timesteps", "200"], f"error: argument --resume: cannot write in {unwritable}"))
    for run_dir, flags, why in cases:
        before = tree(tmp_path) | tree(finished_run)  # finished_run is a folder of its own, outside tmp_path
        error = refused("dqn_atari.py", ["--resume", str(run_dir)] + flags, capsys)
        assert why in error, (run_dir, error)
        assert tree(tmp_path) | tree(finished_run) == before, run_dir
    assert not os.path.exists("ran_code")


def test_a_finished_run_with_its_replay_goes_on_to_a_larger_total(finished_run, tmp_path, monkeypatch, capsys):
    run_dir = copied_run(finished_run, tmp_path)
    monkeypatch.setattr(module("dqn_atari.py"), "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    module("dqn_atari.py").main(["--resume", run_dir, "--total-timesteps", "150", "--no-keep-checkpoint"])
    out = capsys.readouterr().out
    (resumed_line,) = [line for line in out.splitlines() if "resumed at" in line]
    assert resumed_line.startswith(f"{run_dir}: resumed at step 120, ")  # and the flags it changes:
    assert "--total-timesteps 150 (was 120)" in resumed_line and "--keep-checkpoint False (was True)" in resumed_line
    assert "step 150/150" in out
    assert read_scalars(run_dir)["charts/updates"][1][-1] == (150 - 50) // 8
    assert not os.path.exists(os.path.join(run_dir, "replay"))  # no --keep-checkpoint this time: only what says it ended
    assert os.path.getsize(os.path.join(run_dir, "checkpoint.pt")) < 10_000
    # and that small checkpoint is no model: --eval-model says so, not a KeyError
    error = refused("dqn_atari.py", ["--eval-model", os.path.join(run_dir, "checkpoint.pt")], capsys)
    assert "is a finished run's checkpoint and holds no network: watch the model --save-model wrote beside it" in error


def test_a_resumed_runs_clock_starts_once_its_replay_has_loaded(finished_run, tmp_path, monkeypatch, capsys):
    """A full replay takes seconds to minutes to load: the resumed run's steps/s are counted from then on.
    (Counted from before it, the first progress line came due at once, at a rate near 0; at a launch step,
    which the agent does not count, at 0: time_left's division ended the run.)"""
    script, run_dir = module("dqn_atari.py"), copied_run(finished_run, tmp_path)
    monkeypatch.setattr(script, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    skipped, real_time, real_load = [0.0], time.time, plumbing.checkpoints.ReplayFiles.load

    def a_minute_to_load(self, state):
        real_load(self, state)
        skipped[0] += 60.0

    monkeypatch.setattr(time, "time", lambda: real_time() + skipped[0])
    monkeypatch.setattr(plumbing.checkpoints.ReplayFiles, "load", a_minute_to_load)
    script.main(["--resume", run_dir, "--total-timesteps", "400"])
    steps, rates = read_scalars(run_dir)["charts/SPS"]
    assert skipped == [60.0] and (rates[steps > 120] > 10).all(), (steps, rates)  # Catch: hundreds of steps/s
    assert " 0 steps/s" not in capsys.readouterr().out


def test_a_finished_run_that_goes_on_keeps_its_model_and_saves_the_next_beside_it(in_tmp, monkeypatch, capsys):
    """--save-model's NAME.pt of a finished run stays as it was when the run goes on: the new model is
    NAME_2.pt, through a stop and a resume as well, its evaluation logged as eval_2/episodic_return.
    (Checkpoints and evaluate_and_log are the same in all six scripts.)"""
    script = module("pqn_atari.py")
    monkeypatch.setattr(script, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    flags = ["--save-model", "--eval-episodes", "1"]
    run_dir = script.main(["--total-timesteps", "64", "--keep-checkpoint", *flags, *TINY["pqn_atari.py"]])
    with open(os.path.join(run_dir, "pqn_atari.pt"), "rb") as f:
        first_model = f.read()
    monkeypatch.setattr(plumbing.run, "stop_signals", [signal.SIGINT])  # Ctrl-C as the resumed run starts
    with pytest.raises(SystemExit):
        script.main(["--resume", run_dir, "--total-timesteps", "128", *flags])
    monkeypatch.setattr(plumbing.run, "stop_signals", [])
    script.main(["--resume", run_dir])
    out = capsys.readouterr().out
    second = os.path.join(run_dir, "pqn_atari_2.pt")
    assert out.count(f"model saved to {os.path.join(run_dir, 'pqn_atari.pt')} ") == 1  # the first run's end alone
    assert out.count(f"model saved to {second} ") == 2 and "step 128/128" in out
    with open(os.path.join(run_dir, "pqn_atari.pt"), "rb") as f:
        assert f.read() == first_model
    assert not os.path.exists(os.path.join(run_dir, "pqn_atari_3.pt"))
    assert torch.load(second, weights_only=True)["script"] == "pqn_atari.py"
    # each model's evaluation apart, each game once: not the second's over the first's steps
    scalars = read_scalars(run_dir)
    assert list(scalars["eval/episodic_return"][0]) == [0] and list(scalars["eval_2/episodic_return"][0]) == [0]


def test_a_run_killed_between_the_files_of_its_last_save_keeps_its_model(in_tmp, monkeypatch):
    """The run's end writes --save-model's file, then the checkpoint saying it has ended: killed between
    the two, the trained model is on disk. (The other way round, such a run had ended, so could not be
    resumed, and had no model.) Checkpoints is the same in all six scripts."""
    script, written = module("pqn_atari.py"), []
    monkeypatch.setattr(script, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))

    class Killed(BaseException):
        pass

    def save_then_be_killed(obj, path, real=plumbing.checkpoints.save_atomically):
        real(obj, path)
        written.append(os.path.basename(path))
        raise Killed

    monkeypatch.setattr(plumbing.checkpoints, "save_atomically", save_then_be_killed)
    with pytest.raises(Killed):
        script.main(["--total-timesteps", "64", "--save-model", *TINY["pqn_atari.py"]])  # one save: the end's
    assert written == ["pqn_atari.pt"] and glob.glob("runs/*/*.pt") == glob.glob("runs/*/pqn_atari.pt")


# ---------------------------------------------------------------- a run in use
def test_a_live_run_is_not_resumed_until_its_process_ends(tmp_path, monkeypatch, capsys):
    """A live run holds its directory: resuming it (as a second terminal, or a restart script, would)
    is refused by every script, so no two processes write one run. Killed with SIGKILL, it lets go."""
    run = start(
        "dqn_atari.py", ["--total-timesteps", "100000", "--learning-starts", "90000", "--buffer-size", "1000"], tmp_path
    )
    try:
        assert run.stdout.readline().startswith("runs")  # its first line: the run directory is made and held
        run_dir = the_run_dir(tmp_path)
        monkeypatch.chdir(tmp_path)
        for script in SCRIPTS:
            error = refused(script, ["--resume", run_dir], capsys)
            assert error.endswith(f"argument --resume: {run_dir} is in use: another process is running it"), error
    finally:
        run.kill()
        run.wait()
    # gone with its process: now the directory's own state decides (no checkpoint yet after a SIGKILL this early)
    assert "has no checkpoint.pt" in refused("dqn_atari.py", ["--resume", run_dir], capsys)


# ---------------------------------------------------------------- a closed terminal
def test_a_closed_terminal_stops_the_run_with_a_checkpoint(tmp_path):
    """The run in a terminal of its own (a pty), which is then closed: SIGHUP, and printing to the
    terminal fails from then on. The run still saves a checkpoint and exits 129."""
    import pty
    import select

    argv = [sys.executable, os.path.join(ROOT, "dqn_atari.py"), "--total-timesteps", "100000"] + TINY["dqn_atari.py"]
    pid, terminal = pty.fork()
    if pid == 0:  # the child: straight into the script, in the terminal's session
        os.chdir(tmp_path)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a user's terminal, though pytest may run under nohup
        os.dup2(os.open(os.path.join(tmp_path, "stderr.txt"), os.O_WRONLY | os.O_CREAT), 2)  # what went wrong, if anything
        os.execv(sys.executable, argv)
    output, deadline = b"", time.time() + 120
    while b"steps on cpu" not in output and time.time() < deadline:
        if select.select([terminal], [], [], 1)[0]:
            output += os.read(terminal, 10_000)
    assert b"steps on cpu" in output, output
    os.close(terminal)  # the terminal is closed: its session gets SIGHUP
    deadline = time.time() + 60
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.time() < deadline:
        time.sleep(0.1)
    if waited[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the run went on after its terminal closed")
    assert os.waitstatus_to_exitcode(waited[1]) == 128 + signal.SIGHUP, open(os.path.join(tmp_path, "stderr.txt")).read()
    (run_dir,) = glob.glob(os.path.join(tmp_path, "runs", "*"))
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["script"] == "dqn_atari.py"


# ---------------------------------------------------------------- the replay's files
def add_rows(script, replay, rng, rows):
    """Random rows into the replay as the script adds them: a row a step, or a worker's batch of 32."""
    mod, envs = module(script), replay.frames.shape[1]
    if script != "dqn_atari_mp.py":
        for _ in range(rows):
            flags = [rng.random(envs) < 0.3 for _ in range(3)]
            yield replay.add(rng.integers(0, 256, (envs, 84, 84), dtype=np.uint8), rng.integers(0, 4, envs), 1, *flags)
        return
    for _ in range(rows // mod.SEND_BATCH):
        flags = [rng.random(mod.SEND_BATCH) < 0.3 for _ in range(3)]
        frames = rng.integers(0, 256, (mod.SEND_BATCH, 84, 84), dtype=np.uint8)
        yield replay.add(int(rng.integers(envs)), frames, rng.integers(0, 4, mod.SEND_BATCH), 1, *flags)


@pytest.mark.parametrize(
    "script, buffer_size, envs",
    [("dqn_atari.py", 300, 1), ("dqn_atari_vec.py", 300, 3), ("dqn_atari_mp.py", 1000, 2), ("dqn_atari_mp.py", 66, 2)],
    ids=["dqn", "vec", "mp", "mp-tiny-ring"],
)
def test_the_replay_comes_back_from_the_checkpoints_files_alone(script, buffer_size, envs, tmp_path):
    """The ring as it was at a checkpoint, rebuilt from the files the checkpoint names, though the run
    went on past a whole ring after it (its files written too); and files no checkpoint needs go."""
    mod, rng = module(script), np.random.default_rng(0)
    replay = mod.ReplayMemory(buffer_size, envs)
    batch_rows = mod.SEND_BATCH if script == "dqn_atari_mp.py" else 1  # the rows a column takes at once
    files = plumbing.checkpoints.ReplayFiles(replay, str(tmp_path), batch_rows)
    for _ in add_rows(script, replay, rng, 3 * replay.rows * envs // 2):
        files.keep_up()
    state = files.save()
    files.saved(state)
    saved = [field.copy() for field in files.fields] + [copy.copy(replay.pos), copy.copy(replay.full)]
    for _ in add_rows(script, replay, rng, 2 * replay.rows * envs):  # the run goes on, then is killed
        files.keep_up()
    files.thread.shutdown()  # its last file and deletions done: a killed run's process does nothing more
    rebuilt = mod.ReplayMemory(buffer_size, envs)
    resumed = plumbing.checkpoints.ReplayFiles(rebuilt, str(tmp_path), batch_rows)
    resumed.load(state)
    assert_equal(list(resumed.fields) + [rebuilt.pos, rebuilt.full], saved)
    named = {chunk[0] for chunk in sum(state["chunks"], [])}
    assert {os.path.join("replay", name) for name in os.listdir(tmp_path / "replay")} == named  # the rest deleted
    # The resumed run goes on to its next checkpoint: the files only the last one named go, and what
    # is left holds at most a ring and a file a column.
    for _ in add_rows(script, rebuilt, rng, 3 * rebuilt.rows * envs):
        resumed.keep_up()
    resumed.saved(resumed.save())
    resumed.thread.submit(int).result()  # the deletions, which the background thread does, done
    on_disk = sum(entry.stat().st_size for entry in os.scandir(tmp_path / "replay"))
    assert on_disk <= (rebuilt.rows + resumed.chunk_rows) * envs * (plumbing.checkpoints.REPLAY_BYTES_PER_TRANSITION + 1000)


@pytest.mark.parametrize("script", ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py"])
def test_the_step_a_stop_cut_off_is_never_sampled(script):
    """A resumed run starts new games: the last step stored before the stop has no next frame of its
    own (the next row opens the new game), so it is no transition, though no episode ended there.
    Breakout at random, then a new game in the same replay, as after --resume."""
    mod = module(script)
    replay, ends = mod.ReplayMemory(600, 1), []
    for seed in (0, 1):  # the run, stopped on the agent's step in mid-episode; then the resumed run
        games, rng = mod.AtariGames("BreakoutNoFrameskip-v4", 1, seed), np.random.default_rng(seed)
        for step in itertools.count():
            obs, firsts, actions = games.obs, games.firsts, rng.integers(0, 4, size=1)
            agent_acted = games.send(actions)
            rewards, dones, _ = games.recv()
            row = (obs[:, -1], actions, rewards, dones, agent_acted, firsts)
            replay.add(*row) if script != "dqn_atari_mp.py" else replay.add(0, *row)
            if step >= 150 and agent_acted[0] and not dones[0]:
                break
        ends.append((int(np.atleast_1d(replay.pos)[0]) - 1) % replay.rows)
    cut = ends[0]
    assert replay.agent_acted[cut, 0] and not replay.dones[cut, 0] and replay.firsts[cut + 1, 0]
    assert not replay.sampleable(np.array([cut]), np.array([0]))[0]
    states, _, _, next_states, _ = replay.sample(4096, np.random.default_rng(2))
    np.testing.assert_array_equal(states[:, 1:], next_states[:, :-1])  # every s' goes on from its s


def breakout_rows(steps):
    """What one Breakout game at random stores a step, for the replay: (firsts, agent_acted, dones)."""
    games, rng, rows = module("dqn_atari.py").AtariGames("BreakoutNoFrameskip-v4", 1, 0), np.random.default_rng(0), []
    for _ in range(steps):
        firsts, agent_acted = games.firsts.copy(), games.send(rng.integers(0, 4, size=1)).copy()
        rows.append((firsts, agent_acted, games.recv()[1]))
    games.envs.close()
    return rows


@pytest.mark.parametrize("script", ["dqn_atari.py", "dqn_atari_vec.py"])
def test_the_smallest_replay_always_holds_a_transition_after_a_resume(script):
    """The smallest ring accepted (11 rows an environment), a run stopped at any step of 2,000 of
    Breakout, then resumed: for the resumed run's first steps, while the new game's launch and the
    cut-off step cannot be sampled, at least one transition always can (the update would wait forever
    otherwise). With one row fewer, stops at 10 of these steps leave none (at 8, the old minimum, 74)."""
    mod, rows = module(script), breakout_rows(2000)
    assert sum(not agent_acted[0] for _, agent_acted, _ in rows) > 50  # lost lives and games: played steps
    frame = np.zeros((1, 84, 84), dtype=np.uint8)

    def nothing_to_sample_after_a_stop_at(stop, ring_rows):
        replay = mod.ReplayMemory(ring_rows, 1)
        for firsts, agent_acted, dones in rows[max(stop - 2 * ring_rows, 0) : stop] + rows[:8]:  # the new game's
            if np.all(replay.full) and not replay.sampleable(np.arange(ring_rows), np.zeros(ring_rows, dtype=np.int64)).any():
                return True
            replay.add(frame, np.zeros(1), np.zeros(1), dones, agent_acted, firsts)
        return False

    assert not any(nothing_to_sample_after_a_stop_at(stop, 11) for stop in range(11, len(rows)))
    assert any(nothing_to_sample_after_a_stop_at(stop, 10) for stop in range(10, len(rows)))


@pytest.mark.parametrize("script, envs", [("dqn_atari.py", 1), ("dqn_atari_vec.py", 2)])
def test_the_shortest_warm_up_learns_after_a_resume_at_the_first_step(script, envs, tmp_path):
    """--learning-starts 3 steps an environment, the fewest accepted, and a run kept at its first step,
    then resumed: its first update finds a transition to sample, though the step the checkpoint cut off
    is none, and the run ends. (With 2, once accepted, the update waited forever, deaf to Ctrl-C.)"""
    flags = ["--learning-starts", str(3 * envs), "--batch-size", "1", "--learn-steps-period", "1"]
    flags += ["--buffer-size", str(11 * envs), "--envs-count", str(envs)] if envs > 1 else ["--buffer-size", "11"]
    first = start(script, flags + ["--total-timesteps", str(envs), "--keep-checkpoint"], tmp_path)
    assert first.wait(timeout=120) == 0, first.stdout.read()
    resumed = start(script, ["--resume", the_run_dir(tmp_path), "--total-timesteps", str(20 * envs)], tmp_path)
    try:
        said, _ = resumed.communicate(timeout=120)
    finally:
        resumed.kill()
    assert resumed.returncode == 0, said
    assert read_scalars(the_run_dir(tmp_path))["charts/updates"][1][-1] > 0


@pytest.mark.parametrize("script", ["dqn_atari.py", "dqn_atari_vec.py", "dqn_atari_mp.py"])
def test_a_replay_the_disk_cannot_hold_for_resume_is_refused_at_once(script, in_tmp, monkeypatch, capsys):
    """The replay's files need up to two rings and two files on disk; with 1 GiB free, a ring of 1M
    transitions (7 GB) is refused before the run starts."""
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**40, 2**40 - 2**30, 2**30))
    monkeypatch.setattr(plumbing.flags, "available_memory_bytes", lambda: 2**40)  # memory is checked first: not short

    monkeypatch.setattr(module(script), "make_env", refused_before_this)
    error = refused(script, ["--buffer-size", "1000000"], capsys)
    assert "error: argument --buffer-size: a replay of 1,000,000 transitions needs up to" in error
    assert "GiB on disk for --resume, but only 1.0 GiB is free in" in error
    assert not os.path.exists("runs")
