"""dqn_atari.py on real ALE games, plus its pure pieces checked against hand-computed values."""

import os
import signal

import catch
import numpy as np
import pytest
import torch
from ale_py.vector_env import AtariVectorEnv
from conftest import (
    assert_refused,
    catch_returns,
    check_seeding,
    dqn_updates_by_hand,
    read_scalars,
    read_text,
    record_batches,
    record_networks,
    run_bad,
    run_script,
)

import dqn_atari
import plumbing.checkpoints
import plumbing.run

# A short Breakout run: 600 warm-up steps, then 1,200 learning steps at one update per 2 steps.
SHORT = [
    "--env-id",
    "BreakoutNoFrameskip-v4",
    "--total-timesteps",
    "1800",
    "--learning-starts",
    "600",
    "--buffer-size",
    "5000",
    "--batch-size",
    "8",
    "--learn-steps-period",
    "2",
    "--target-network-frequency",
    "300",
    "--exploration-fraction",
    "0.5",
    "--seed",
    "3",
]
SHORT_UPDATES = (1800 - 600) // 2


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("short")
    proc, run_dir = run_script("dqn_atari.py", SHORT + ["--save-model", "--eval-episodes", "1", "--keep-checkpoint"], cwd)
    return proc, run_dir


def test_short_run_logs_what_a_user_reads(short_run):
    proc, run_dir = short_run
    scalars = read_scalars(run_dir)
    for tag in [
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/SPS",
        "charts/epsilon",
        "charts/updates",
        "losses/td_loss",
        "losses/q_values",
        "eval/episodic_return",
    ]:
        assert tag in scalars, tag
        steps, values = scalars[tag]
        assert np.all(np.isfinite(values)), tag
        if not tag.startswith("eval/"):
            assert steps.min() >= 0 and steps.max() <= 1800, tag
    # Whole Breakout games under a mostly random policy: integer scores, 0 to a few dozen,
    # and lengths of full five-life games (far more than one life's ~40 steps).
    returns = scalars["charts/episodic_return"][1]
    assert len(returns) >= 3
    assert np.all(returns >= 0) and np.all(returns <= 60) and np.all(returns == np.round(returns))
    assert np.median(scalars["charts/episodic_length"][1]) > 100
    # One update per learn_steps_period steps after learning starts, as charts/updates reports.
    steps, updates = scalars["charts/updates"]
    assert steps[-1] == 1800 and updates[-1] == SHORT_UPDATES
    assert len(scalars["losses/td_loss"][1]) == int(updates[-1]) // 100
    eps_steps, eps = scalars["charts/epsilon"]
    # From 1 to 0.01 over --exploration-fraction 0.5 of the run, 900 steps, then 0.01 (logged with each
    # 5-second progress line: how many fall before step 900 depends on the machine's pace). The value
    # logged at step s is the last step's: s - 1 before an agent's step made it s, s after one played for it.
    schedule = lambda step: np.maximum(1.0 - 0.99 * step / 900, 0.01)  # noqa: E731
    assert np.all(np.isclose(eps, schedule(eps_steps), rtol=1e-6) | np.isclose(eps, schedule(eps_steps - 1), rtol=1e-6))
    assert np.all(scalars["charts/SPS"][1] > 0)
    assert len(scalars["eval/episodic_return"][1]) == 1
    assert os.path.isfile(os.path.join(run_dir, "dqn_atari.pt"))
    assert "|learn_steps_period|2|" in read_text(run_dir)
    assert "step 1,800/1,800" in proc.stdout and "steps/s" in proc.stdout


def test_saved_model_loads_into_the_network(short_run):
    """The model is the trained network: the one the last checkpoint holds after all the run's Adam
    steps (the checkpoint's network is the live one, bit for bit: tests/test_resume.py)."""
    _, run_dir = short_run
    saved = torch.load(os.path.join(run_dir, "dqn_atari.pt"), weights_only=True)["state_dict"]
    checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert checkpoint["finished"] and checkpoint["updates"] == SHORT_UPDATES
    assert all(int(state["step"]) == SHORT_UPDATES for state in checkpoint["optimizer"]["state"].values())
    assert saved.keys() == checkpoint["state_dict"].keys()
    for name, weights in saved.items():
        assert torch.equal(weights, checkpoint["state_dict"][name]), name
    q_network = dqn_atari.QNetwork(4)
    q_network.load_state_dict(saved)
    assert q_network(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 4)


def test_same_seed_same_losses_and_returns(in_tmp, one_torch_thread):
    """Two runs with one seed log the same values, value for value; a third with another seed differs."""
    flags = ["--total-timesteps", "500", "--learning-starts", "200", "--buffer-size", "1000", "--batch-size", "8"]
    tags = ["losses/td_loss", "losses/q_values", "charts/episodic_return", "charts/episodic_length"]
    check_seeding(dqn_atari.main, flags + ["--learn-steps-period", "2"], tags)


@pytest.mark.parametrize("script", ["dqn_atari", "dqn_atari_vec"])
def test_a_hundred_updates_match_a_hand_computation(script, in_tmp, monkeypatch, one_torch_thread):
    """100 updates on Catch, redone by hand from the batches the replay gave (conftest's
    dqn_updates_by_hand): the frozen target network, synced every --target-network-frequency steps,
    no bootstrap past a terminal, the mean squared error; the 100th update logs it and the mean
    Q(s, a). dqn_atari_vec.py's loop too, with one environment."""
    dqn = __import__(script)
    monkeypatch.setattr(dqn, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    networks, _ = record_networks(monkeypatch, dqn, "QNetwork")
    batches = record_batches(monkeypatch, dqn)
    warm_up, sync_every = 40, 25  # one update a step after the warm-up; syncs after updates 10, 35, 60, 85
    flags = ["--total-timesteps", "140", "--learning-starts", str(warm_up), "--learn-steps-period", "1"]
    flags += ["--buffer-size", "200", "--batch-size", "8", "--target-network-frequency", str(sync_every)]
    scalars = read_scalars(dqn.main(flags + (["--envs-count", "1"] if script == "dqn_atari_vec" else [])))
    assert len(batches) == 100

    (trained, first_weights), _ = networks  # the Q-network, then the target network
    q_network, _, logged = dqn_updates_by_hand(
        dqn.QNetwork, first_weights, batches, mix_after=lambda update: float((warm_up + update) % sync_every == 0)
    )
    assert scalars["losses/td_loss"][1].tolist() == pytest.approx([logged[99][0]], rel=1e-3)
    assert scalars["losses/q_values"][1].tolist() == pytest.approx([logged[99][1]], rel=1e-3)
    for name, weights in q_network.state_dict().items():
        torch.testing.assert_close(trained.state_dict()[name], weights, rtol=1e-3, atol=1e-6)


def test_td_target_by_hand():
    rewards = torch.tensor([1.0, 0.0, -1.0, 1.0])
    dones = torch.tensor([0.0, 1.0, 0.0, 1.0])
    next_q_max = torch.tensor([2.0, 5.0, 0.5, -3.0])
    target = dqn_atari.td_target(rewards, dones, next_q_max, 0.9)
    torch.testing.assert_close(target, torch.tensor([1.0 + 0.9 * 2.0, 0.0, -1.0 + 0.9 * 0.5, 1.0]))


def test_updates_due_by_hand():
    # learning_starts 100, one update per 4 steps: none until step 104, then one more every 4 steps
    assert [dqn_atari.updates_due(step, 100, 4) for step in (0, 100, 103, 104, 107, 108, 140)] == [0, 0, 0, 1, 1, 2, 10]
    assert dqn_atari.updates_due(5, 0, 1) == 5


def test_multiples_passed_counts_every_multiple_even_when_the_count_jumps():
    period = 1000
    assert dqn_atari.multiples_passed(1000, 1, period) == 1 and dqn_atari.multiples_passed(2003, 8, period) == 1
    assert dqn_atari.multiples_passed(1999, 8, period) == 0 and dqn_atari.multiples_passed(2008, 8, period) == 0
    assert dqn_atari.multiples_passed(3000, 0, period) == 0  # a step played for the agent adds no step
    assert dqn_atari.multiples_passed(2007, 8, 2) == 4 and dqn_atari.multiples_passed(2007, 7, 2) == 3  # 2000-2006
    # counts raised by 0-8 steps at a time, as 8 environments do: each multiple is counted exactly once
    rng, step, passed = np.random.default_rng(0), 0, 0
    while step < 100_000:
        new_steps = int(rng.integers(0, 9))
        step += new_steps
        passed += dqn_atari.multiples_passed(step, new_steps, period)
    assert passed == step // period


def test_epsilon_schedule_by_hand():
    assert dqn_atari.linear_schedule(1.0, 0.01, 1000, 0) == 1.0
    assert dqn_atari.linear_schedule(1.0, 0.01, 1000, 500) == pytest.approx(0.505)
    assert dqn_atari.linear_schedule(1.0, 0.01, 1000, 1000) == pytest.approx(0.01)
    assert dqn_atari.linear_schedule(1.0, 0.01, 1000, 5000) == pytest.approx(0.01)


def play_into_replay(capacity, steps, seed=0):
    """Play Breakout at random the way the training loop does, storing into a replay; keep
    every observation so the replay's rebuilt stacks can be compared with the real ones."""
    games = dqn_atari.AtariGames("BreakoutNoFrameskip-v4", 1, seed)
    replay = dqn_atari.ReplayMemory(capacity, 1)
    rng = np.random.default_rng(seed)
    history = []  # (obs, action, reward, next_obs, done, real transition) of every step
    for _ in range(steps):
        obs, firsts, actions = games.obs, games.firsts, rng.integers(0, 4, size=1)
        agent_acted = games.send(actions)
        rewards, dones, _ = games.recv()
        replay.add(obs[:, -1], actions, rewards, dones, agent_acted, firsts)
        history.append((obs[0], actions[0], rewards[0], games.obs[0], dones[0], agent_acted[0]))
    return replay, history


def test_replay_rebuilds_the_real_stacks_across_games_and_the_wrap():
    capacity, steps = 700, 2000  # the ring wraps almost twice, over several whole games
    replay, history = play_into_replay(capacity, steps)
    assert replay.full
    rows = np.arange(capacity)
    ok = replay.sampleable(rows, np.zeros(capacity, dtype=np.int64))
    first_step = steps - capacity  # the history step that row 0 of the ring... rotated by pos
    checked = episode_starts_seen = 0
    for row in rows[ok]:
        step = first_step + (row - replay.pos) % capacity
        obs, action, reward, next_obs, done, real = history[step]
        assert real, "the step that resets or relaunches a game is never sampled"
        stack = replay.stacks(np.array([row]), np.array([0]))[0]
        next_stack = replay.stacks(np.array([(row + 1) % capacity]), np.array([0]))[0]
        np.testing.assert_array_equal(stack, obs)
        np.testing.assert_array_equal(next_stack, next_obs)
        assert replay.actions[row, 0] == action and replay.rewards[row, 0] == reward and replay.dones[row, 0] == done
        episode_starts_seen += int((obs == obs[-1]).all())  # four copies of one frame: an episode's start
        checked += 1
    assert checked > capacity - 40
    assert episode_starts_seen >= 3 * 5, "several games and lives began inside the ring"
    # The rows that cannot be rebuilt are exactly the reset steps, the newest row and the oldest three.
    assert (~ok).sum() == (~replay.agent_acted[:, 0]).sum() + 1 + 3 - (~replay.agent_acted[:, 0])[
        [(replay.pos + k) % capacity for k in (-1, 0, 1, 2)]
    ].sum()


def test_replay_samples_only_real_transitions():
    replay, history = play_into_replay(1000, 1500, seed=1)
    states, actions, rewards, next_states, dones = replay.sample(4096, np.random.default_rng(0))
    assert states.shape == (4096, 4, 84, 84) and next_states.shape == (4096, 4, 84, 84)
    # the next observation is the current one shifted by one frame, within a game
    np.testing.assert_array_equal(states[:, 1:], next_states[:, :-1])
    assert set(np.unique(rewards)) <= {0, 1} and dones.any() and (~dones).any()


def test_a_time_limit_cut_is_not_a_terminal(in_tmp, monkeypatch):
    """Games cut by the time limit (here 60 frames: too short to lose the ball) are logged as whole
    games, but no transition is stored as a terminal: the TD target bootstraps across each cut."""

    def short_games(*args, **kwargs):
        kwargs["max_num_frames_per_episode"] = 60
        return AtariVectorEnv(*args, **kwargs)

    stored, add = [], dqn_atari.ReplayMemory.add

    def spy(replay, frames, actions, rewards, dones, agent_acted, firsts):
        stored.append((dones.copy(), agent_acted.copy()))
        add(replay, frames, actions, rewards, dones, agent_acted, firsts)

    monkeypatch.setattr(dqn_atari, "AtariVectorEnv", short_games)
    monkeypatch.setattr(dqn_atari.ReplayMemory, "add", spy)
    run_dir = dqn_atari.main(
        ["--total-timesteps", "400", "--learning-starts", "200", "--buffer-size", "1000", "--batch-size", "8"]
    )
    dones, agent_acted = (np.concatenate(column) for column in zip(*stored))
    lengths = read_scalars(run_dir)["charts/episodic_length"][1]
    assert len(lengths) >= 20 and (lengths <= 16).all()  # many games, each cut after about 15 steps
    assert (~agent_acted).sum() >= 20  # every cut is followed by a reset step, which is no transition
    assert not dones.any()


def test_replay_costs_one_frame_per_transition():
    replay = dqn_atari.ReplayMemory(10_000, 1)
    total = sum(
        a.nbytes for a in (replay.frames, replay.actions, replay.rewards, replay.dones, replay.agent_acted, replay.firsts)
    )
    assert total / 10_000 == plumbing.checkpoints.REPLAY_BYTES_PER_TRANSITION <= 7_500


def test_a_second_ctrl_c_while_saving_waits_for_the_save(in_tmp, monkeypatch):
    """A Ctrl-C at step 300 ends the loop; a second one in the middle of writing the checkpoint only
    joins the first (no exception cuts the save short): the checkpoint reads back, exit status 130."""
    monkeypatch.setattr(dqn_atari, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    monkeypatch.setattr(plumbing.run, "stop_signals", [])
    show, save = plumbing.run.Run.show, plumbing.checkpoints.save_atomically

    def show_then_ctrl_c(progress, step, *rest):
        show(progress, step, *rest)
        if step >= 300 and not plumbing.run.stop_signals:
            signal.raise_signal(signal.SIGINT)  # the handler runs as raise_signal returns

    def save_with_a_ctrl_c_inside(data, path):
        signal.raise_signal(signal.SIGINT)
        save(data, path)

    monkeypatch.setattr(plumbing.run.Run, "show", show_then_ctrl_c)
    monkeypatch.setattr(plumbing.checkpoints, "save_atomically", save_with_a_ctrl_c_inside)
    handler = signal.signal(signal.SIGINT, plumbing.run.on_stop_signal)  # as when run as a script
    try:
        with pytest.raises(SystemExit) as stop:
            dqn_atari.main(["--total-timesteps", "1000", "--learning-starts", "100", "--buffer-size", "1000"])
    finally:
        signal.signal(signal.SIGINT, handler)
    assert stop.value.code == 130 and plumbing.run.stop_signals == [signal.SIGINT, signal.SIGINT]
    (run_dir,) = [os.path.join("runs", name) for name in os.listdir("runs")]
    checkpoint = plumbing.checkpoints.read_checkpoint(run_dir)
    assert checkpoint["resumable"] and 300 <= checkpoint["global_step"] < 1000, checkpoint and checkpoint["global_step"]


def test_learns_catch_beyond_random(in_tmp, monkeypatch):
    random_return = catch.random_policy_return()
    # A short run: 750 updates, epsilon down to 0.05 by step 1,280, the mean past 0.5 by about step 1,700.
    flags = ["--total-timesteps", "2000", "--learning-starts", "500", "--buffer-size", "10000"]
    flags += ["--learning-rate", "5e-4", "--target-network-frequency", "200", "--exploration-fraction", "0.64"]
    returns = catch_returns(
        dqn_atari,
        flags + ["--end-e", "0.05", "--learn-steps-period", "2"],
        monkeypatch,
    )
    assert random_return < -0.5
    assert returns[-100:].mean() > 0.5, returns[-100:].mean()


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--total-timesteps", "0"], "--total-timesteps"),
        (["--buffer-size", "-5"], "--buffer-size"),
        (["--batch-size", "0"], "--batch-size"),
        (["--learn-steps-period", "0"], "--learn-steps-period"),
        (["--learn-steps-period", "2.5"], "--learn-steps-period"),
        (["--learning-rate", "0"], "--learning-rate"),
        (["--start-e", "1.5"], "--start-e"),
        (["--end-e", "-0.1"], "--end-e"),
        (["--gamma", "2"], "--gamma"),
        (["--env-id", "NoSuchGameNoFrameskip-v4"], "--env-id"),
        (["--buffer-size", str(10**12)], "--buffer-size"),  # more than this machine's free memory
    ],
)
def test_bad_input_fails_at_once(args, flag, in_tmp, capsys):
    assert_refused(dqn_atari.main, args, flag, capsys)


@pytest.mark.parametrize("script", ["dqn_atari", "dqn_atari_vec", "dqn_atari_mp"])
def test_a_run_that_will_never_learn_says_so_before_it_starts(script, in_tmp, capsys):
    """--learning-starts at or past --total-timesteps is allowed (a benchmark times the acting alone),
    but a learner who shortened the run and kept the 80,000-step warm-up is told."""
    parse_args = __import__(script).parse_args
    parse_args(["--total-timesteps", "50000"])
    assert "will not learn" in capsys.readouterr().err
    parse_args(["--total-timesteps", "80001"])
    assert "will not learn" not in capsys.readouterr().err


def test_bad_input_from_the_command_line(tmp_path):
    message = run_bad("dqn_atari.py", ["--total-timesteps", "0"], tmp_path)
    assert message.startswith("dqn_atari.py: error: argument --total-timesteps"), message


def test_capture_video_without_imageio_fails_at_once(in_tmp, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "imageio", None)
    with pytest.raises(SystemExit) as exit_info:
        dqn_atari.main(["--capture-video", "--save-model"])
    assert exit_info.value.code == 2 and "pip install imageio" in capsys.readouterr().err
    assert not os.path.exists("runs")


def hide_meminfo(monkeypatch):
    """/proc/meminfo gone, as on every system but Linux."""
    real_open = open

    def open_without_meminfo(path, *args, **kwargs):
        if str(path) == "/proc/meminfo":
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", open_without_meminfo)


def test_trains_where_the_system_does_not_say_how_much_memory_is_free(in_tmp, monkeypatch):
    """No /proc/meminfo and no os.sysconf (as on Windows): the replay's memory check is skipped, the run trains."""
    hide_meminfo(monkeypatch)
    monkeypatch.delattr(os, "sysconf")
    assert plumbing.flags.available_memory_bytes() is None
    flags = ["--total-timesteps", "300", "--learning-starts", "100", "--buffer-size", "1000", "--batch-size", "8"]
    scalars = read_scalars(dqn_atari.main(flags + ["--learn-steps-period", "1"]))
    assert scalars["charts/updates"][1][-1] == 300 - 100  # it learnt: one update a step
    assert np.isfinite(scalars["losses/td_loss"][1]).all() and len(scalars["losses/td_loss"][1]) == 2  # every 100 updates


def test_the_smallest_replay_accepted_learns_and_ends(in_tmp):
    """11 rows and a warm-up of 3 steps: one fewer of either is refused (below); these always hold a
    transition to sample, so no update can wait forever (after a --resume too: the test below)."""
    flags = ["--total-timesteps", "300", "--buffer-size", "11", "--batch-size", "1", "--learning-starts", "3"]
    run_dir = dqn_atari.main(flags + ["--learn-steps-period", "4"])
    assert read_scalars(run_dir)["charts/updates"][1][-1] == (300 - 3) // 4


# A replay too small to sample from, or a warm-up too short to fill it, would make the first update
# wait forever: refused (in this process: faster than a new one, the same check)
@pytest.mark.parametrize(
    "args, flag",
    [
        (["--buffer-size", "10", "--batch-size", "1", "--learning-starts", "3"], "--buffer-size"),
        (["--learning-starts", "2", "--batch-size", "1"], "--learning-starts"),
    ],
)
def test_a_replay_that_could_never_be_sampled_is_refused(args, flag, in_tmp, capsys):
    assert_refused(dqn_atari.main, args, flag, capsys)
