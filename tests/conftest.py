import os
import subprocess
import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# The README's command runs the suite in two processes (pytest -n 2): one torch thread each, in them and
# in every script a test starts. Two threads each on two cores wait on each other: a short DQN run took
# 4x longer so on a loaded machine. Set before torch is first imported: the test modules import it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# The suite checks the CPU's arithmetic (updates redone by hand beside the runs): a GPU, if any, is hidden from all
os.environ["CUDA_VISIBLE_DEVICES"] = ""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))


def read_scalars(run_dir):
    """{tag: (steps, values)} from a run directory's TensorBoard events."""
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {
        tag: (np.array([e.step for e in events.Scalars(tag)]), np.array([e.value for e in events.Scalars(tag)]))
        for tag in events.Tags()["scalars"]
    }


def read_text(run_dir, tag="hyperparameters"):
    events = EventAccumulator(run_dir, size_guidance={"tensors": 0})
    events.Reload()
    tag = next(t for t in events.Tags()["tensors"] if t.startswith(tag))
    return events.Tensors(tag)[0].tensor_proto.string_val[0].decode()


def run_script(script, args, cwd, timeout=300, env=None):
    """Run a project script as a user would; return (completed process, the run directory it made)."""
    before = set(os.listdir(os.path.join(cwd, "runs"))) if os.path.isdir(os.path.join(cwd, "runs")) else set()
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    made = sorted(set(os.listdir(os.path.join(cwd, "runs"))) - before)
    assert len(made) == 1, made
    return proc, os.path.join(cwd, "runs", made[0])


def run_bad(script, args, tmp_path):
    """Run a script with bad input: it must fail at once with a usage error (exit 2), no traceback."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(os.path.join(tmp_path, "runs")), "no run directory for bad input"
    return proc.stderr.strip().splitlines()[-1]


def assert_refused(main, argv, flag, capsys):
    """main(argv) stops at once: exit status 2, one error line naming the flag, no traceback, no run directory."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"error: argument {flag}" in errors[0], err
    assert "Traceback" not in err
    assert not os.path.exists("runs")


def refused_before_this(*args, **kwargs):
    """Patched over what starts a run (its games, its workers): a refusal must come first."""
    raise AssertionError("bad input must be refused before any game or worker starts")


def check_breakout_events(scalars, tags, steps, envs):
    """What every policy-gradient script's short Breakout run must log (scalars as read_scalars
    gives them). Every tag finite and in range; whole games with real scores (Breakout's bricks are
    worth 1, 4 or 7 points, two walls at most 864); one whole-game evaluation."""
    for tag in tags + ["eval/episodic_return"]:
        assert tag in scalars, f"{tag} was not logged"
        assert np.isfinite(scalars[tag][1]).all(), tag
    for tag in tags:
        tag_steps = scalars[tag][0]
        # the agent's steps: the run stops at the first step of its envs that reaches the total
        assert ((0 < tag_steps) & (tag_steps < steps + envs)).all(), (tag, tag_steps)
    returns, lengths = scalars["charts/episodic_return"][1], scalars["charts/episodic_length"][1]
    assert len(returns) == len(lengths) >= 1
    assert ((returns >= 0) & (returns == returns.round()) & (returns <= 864)).all(), returns
    assert ((20 <= lengths) & (lengths <= steps // envs)).all(), lengths  # five lives take more than a few steps
    evaluation = scalars["eval/episodic_return"][1]
    assert len(evaluation) == 1 and evaluation[0] >= 0 and evaluation[0] == int(evaluation[0])
    return returns, lengths


def catch_returns(script_module, argv, monkeypatch):
    """Run a script's main() on tests/catch.py instead of Atari; the returns of its games in order."""
    import catch

    monkeypatch.setattr(script_module, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    return read_scalars(script_module.main(argv))["charts/episodic_return"][1]


def check_seeding(main, argv, tags):
    """Two runs of main(argv) with the same --seed log the same values; a third with another seed differs."""
    first, second, other = (read_scalars(main(argv + ["--seed", seed])) for seed in ("5", "5", "6"))
    for tag in tags:
        np.testing.assert_array_equal(first[tag][0], second[tag][0], err_msg=tag)
        np.testing.assert_array_equal(first[tag][1], second[tag][1], err_msg=tag)
    assert any(not np.array_equal(first[tag][1], other[tag][1]) for tag in tags)


# ---------------------------------------------------------------- updates redone by hand
# The tests that redo an update by hand record, while a short Catch run goes, what its loop computed from:
# the network's first weights, the observations it was shown, the actions drawn, the replay's batches.


def record_networks(monkeypatch, script, class_name):
    """Patch script.<class_name> with a subclass that records each network made, with its first weights,
    and every batch of observations given to one. Returns the two lists, filled as the run goes."""
    networks, frames = [], []

    class Recorded(getattr(script, class_name)):
        def __init__(self, actions_count):
            super().__init__(actions_count)
            networks.append((self, {k: v.clone() for k, v in self.state_dict().items()}))

        def forward(self, batch):
            frames.append(batch.clone())
            return super().forward(batch)

    monkeypatch.setattr(script, class_name, Recorded)
    return networks, frames


def record_draws(monkeypatch, script):
    """Patch script.Categorical to record every action it samples; returns the list."""
    drawn = []

    class Recorded(script.Categorical):
        def sample(self, sample_shape=()):
            drawn.append(super().sample(sample_shape))
            return drawn[-1]

    monkeypatch.setattr(script, "Categorical", Recorded)
    return drawn


def record_batches(monkeypatch, script):
    """Patch script.ReplayMemory.sample to record a copy of every batch it gives, as tensors."""
    import torch

    batches = []

    def recorded_sample(self, batch_size, rng, real=script.ReplayMemory.sample):
        batch = real(self, batch_size, rng)
        batches.append([torch.from_numpy(np.copy(part)) for part in batch])
        return batch

    monkeypatch.setattr(script.ReplayMemory, "sample", recorded_sample)
    return batches


def dqn_updates_by_hand(network_class, first_weights, batches, mix_after, lr=1e-4, gamma=0.99):
    """DQN's updates redone on the recorded batches of a Catch run: the target r + gamma * max_a'
    Q_target(s', a'), no bootstrap past a terminal; the mean squared error of Q(s, a); Adam. After
    each update the target network moves the fraction mix_after(update) of the way to the Q-network
    (0: not at all, 1: a copy). Returns both networks and each update's loss and mean Q(s, a)."""
    import torch

    q_network, target_network = (network_class(3).to(memory_format=torch.channels_last) for _ in range(2))
    q_network.load_state_dict(first_weights)
    target_network.load_state_dict(first_weights)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=lr, fused=True)
    logged = []
    for update, (states, actions, rewards, next_states, dones) in enumerate(batches, 1):
        assert torch.equal(dones.bool(), rewards != 0)  # on Catch, a game's end is its only reward
        with torch.no_grad():
            target = rewards + gamma * target_network(next_states).max(1).values * (1 - dones.float())
        q_taken = q_network(states).gather(1, actions.long()[:, None]).squeeze(1)
        loss = ((q_taken - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logged.append((loss.item(), q_taken.mean().item()))
        mix = mix_after(update)
        if mix > 0:
            with torch.no_grad():
                for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                    target_param.copy_(mix * param + (1.0 - mix) * target_param)
    return q_network, target_network, logged


@pytest.fixture
def one_torch_thread():
    # The policy-gradient tests' batches are small: a second thread gains little, and on a busy
    # machine threads that wait for each other make a run several times slower.
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def let_go_of_run_dirs():
    """A script holds each run directory it makes or resumes for as long as its process lives
    (hold_run_dir); the tests run many scripts' mains in one process: each test's are let go after it."""
    yield
    held = getattr(sys.modules.get("plumbing.checkpoints"), "HELD_RUN_DIRS", {})
    for descriptor in held.values():
        os.close(descriptor)  # (closing it lets go of its lock)
    held.clear()


def descendants(pid):
    """Every process under pid, children first (Linux: read from /proc; elsewhere none)."""
    parents = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        except (ValueError, OSError):  # not a process, or one that has just ended
            pass
    found, todo = [], [pid]
    while todo:
        found += (children := parents.get(todo.pop(), []))
        todo += children
    return found


@pytest.fixture(autouse=True)
def no_process_outlives_its_test():
    """A test that fails halfway may leave the runs it started going (1M steps, a day): each would slow
    every later test on a 2-core machine till they time out too. Whatever a test started that is still
    running when it ends is killed (multiprocessing's resource tracker, shared by the in-process mp
    runs, stays)."""
    before = set(descendants(os.getpid()))
    yield
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if pid in before or b"resource_tracker" in f.read():
                    continue
            os.kill(pid, 9)
        except OSError:  # it ended meanwhile
            pass


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path
