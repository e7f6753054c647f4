"""dqn_atari_vec.py: the same DQN on several environments, on real ALE games (and on tests/catch.py)."""

import glob
import os

import catch
import numpy as np
import pytest
import torch
from conftest import (
    assert_refused,
    catch_returns,
    dqn_updates_by_hand,
    read_scalars,
    record_batches,
    record_networks,
    refused_before_this,
    run_bad,
    run_script,
)

import dqn_atari
import dqn_atari_vec
import plumbing.checkpoints
import plumbing.flags
import plumbing.run

SAME = [
    "--env-id",
    "BreakoutNoFrameskip-v4",
    "--total-timesteps",
    "1400",
    "--learning-starts",
    "600",
    "--buffer-size",
    "5000",
    "--batch-size",
    "8",
    "--target-network-frequency",
    "300",
    "--exploration-fraction",
    "0.5",
    "--seed",
    "5",
    "--save-model",
    "--eval-episodes",
    "1",
]


def test_one_env_logs_exactly_what_dqn_atari_logs(in_tmp):
    reference = dqn_atari.main(SAME + ["--learn-steps-period", "4"])
    vectorized = dqn_atari_vec.main(SAME + ["--envs-count", "1", "--learn-steps-period", "4"])
    a, b = read_scalars(reference), read_scalars(vectorized)
    for tag in [
        "charts/episodic_return",
        "charts/episodic_length",
        "losses/td_loss",
        "losses/q_values",
        "eval/episodic_return",
    ]:
        assert len(a[tag][1]) > 0, tag
        np.testing.assert_array_equal(a[tag][0], b[tag][0])
        np.testing.assert_array_equal(a[tag][1], b[tag][1])
    assert a["charts/updates"][1][-1] == b["charts/updates"][1][-1] == (1400 - 600) // 4
    # the strongest check: after 200 updates the two networks are the same, weight for weight
    weights_a = torch.load(os.path.join(reference, "dqn_atari.pt"))["state_dict"]
    weights_b = torch.load(os.path.join(vectorized, "dqn_atari_vec.pt"))["state_dict"]
    for name in weights_a:
        torch.testing.assert_close(weights_a[name], weights_b[name], rtol=0, atol=0)


@pytest.mark.parametrize("envs_count, period", [(4, 8), (8, 4)])
def test_updates_follow_learn_steps_period(envs_count, period, in_tmp):
    total, starts = 2000, 800
    run_dir = dqn_atari_vec.main(
        [
            "--total-timesteps",
            str(total),
            "--learning-starts",
            str(starts),
            "--buffer-size",
            "4000",
            "--batch-size",
            "8",
            "--envs-count",
            str(envs_count),
            "--learn-steps-period",
            str(period),
            "--end-e",
            "0.3",
        ]
    )
    scalars = read_scalars(run_dir)
    steps, updates = scalars["charts/updates"]
    assert total <= steps[-1] < total + envs_count  # the agent's steps; the envs step together
    assert abs(updates[-1] - (total - starts) / period) <= 1
    for tag in [
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/SPS",
        "charts/epsilon",
        "losses/td_loss",
        "losses/q_values",
    ]:
        assert tag in scalars and np.all(np.isfinite(scalars[tag][1])), tag
    returns = scalars["charts/episodic_return"][1]
    # whole Breakout games, from the environments that finished one
    assert len(returns) >= envs_count // 2 and np.all(returns >= 0) and np.all(returns == np.round(returns))
    assert np.all(scalars["charts/episodic_length"][1] > 50)


def test_replay_stacks_stay_within_one_environment():
    envs_count, capacity, steps = 3, 900, 500  # 300 rows of 3 columns: the ring wraps
    games = dqn_atari_vec.AtariGames("BreakoutNoFrameskip-v4", envs_count, 7)
    replay = dqn_atari_vec.ReplayMemory(capacity, envs_count)
    rng = np.random.default_rng(7)
    history = []
    for _ in range(steps):  # as the training loop stores them
        obs, firsts, actions = games.obs, games.firsts, rng.integers(0, 4, size=envs_count)
        agent_acted = games.send(actions)
        rewards, dones, _ = games.recv()
        replay.add(obs[:, -1], actions, rewards, dones, agent_acted, firsts)
        history.append((obs, games.obs))
    assert replay.full and replay.frames.shape[:2] == (300, 3)
    rows = np.repeat(np.arange(300), envs_count)
    cols = np.tile(np.arange(envs_count), 300)
    ok = replay.sampleable(rows, cols)
    assert ok.sum() > 0.9 * len(rows)
    stacks, next_stacks = replay.stacks(rows[ok], cols[ok]), replay.stacks((rows[ok] + 1) % 300, cols[ok])
    for stack, next_stack, row, col in zip(stacks, next_stacks, rows[ok], cols[ok]):
        step = steps - 300 + (row - replay.pos) % 300
        np.testing.assert_array_equal(stack, history[step][0][col])
        np.testing.assert_array_equal(next_stack, history[step][1][col])


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--envs-count", "0"], "--envs-count"),
        (["--envs-count", "-2"], "--envs-count"),
        (["--learn-steps-period", "0"], "--learn-steps-period"),
        (["--learn-steps-period", "1.5"], "--learn-steps-period"),
        (["--learn-steps-period", "four"], "--learn-steps-period"),
    ],
)
def test_bad_input_fails_at_once(args, flag, in_tmp, capsys):
    assert_refused(dqn_atari_vec.main, args, flag, capsys)


def test_bad_input_from_the_command_line(tmp_path):
    message = run_bad("dqn_atari_vec.py", ["--envs-count", "0"], tmp_path)
    assert message.startswith("dqn_atari_vec.py: error: argument --envs-count"), message


def test_the_smallest_replay_accepted_learns_and_ends(tmp_path):
    """11 rows an environment and a warm-up of 3 steps an environment: one fewer of either is refused
    (above); these always hold a transition to sample, so the first update cannot wait forever."""
    _, run_dir = run_script(
        "dqn_atari_vec.py",
        [
            "--total-timesteps",
            "400",
            "--envs-count",
            "8",
            "--buffer-size",
            "88",
            "--batch-size",
            "8",
            "--learning-starts",
            "24",
            "--learn-steps-period",
            "8",
        ],
        tmp_path,
        timeout=180,
    )
    steps, updates = read_scalars(run_dir)["charts/updates"]
    assert updates[-1] == (steps[-1] - 24) // 8, updates  # one update per vector step past the warm-up


# A replay too small to sample from, or a warm-up too short to fill it, would make the first update
# wait forever: refused (in this process: faster than a new one, the same check)
@pytest.mark.parametrize(
    "args, flag",
    [
        (["--buffer-size", "87", "--envs-count", "8", "--batch-size", "8", "--learning-starts", "24"], "--buffer-size"),
        (["--buffer-size", "36", "--envs-count", "8"], "--buffer-size"),  # the issue's: 4 rows an environment
        (["--learning-starts", "23", "--envs-count", "8", "--batch-size", "8"], "--learning-starts"),
    ],
)
def test_a_replay_that_could_never_be_sampled_is_refused(args, flag, in_tmp, capsys):
    assert_refused(dqn_atari_vec.main, args, flag, capsys)


def test_the_replay_must_fit_beside_the_games(in_tmp, monkeypatch, capsys):
    """Memory enough for 1,000 transitions, or for 64 games, but not for both: refused."""

    replay, games = 1000 * plumbing.checkpoints.REPLAY_BYTES_PER_TRANSITION, 64 * plumbing.flags.EMULATOR_BYTES
    monkeypatch.setattr(plumbing.flags, "available_memory_bytes", lambda: replay + games - 1)
    monkeypatch.setattr(dqn_atari_vec, "make_env", refused_before_this)
    assert_refused(dqn_atari_vec.main, ["--buffer-size", "1000", "--envs-count", "64"], "--buffer-size", capsys)


def test_learns_catch_beyond_random_from_four_games(in_tmp, monkeypatch):
    """dqn_atari.py's Catch run, its 2,000 steps made by four games stepped together: it must learn as
    well (each game's actions and rewards must land in its own column). Seeds 1-8 here: 0.56 at the
    least, 0.83 on average (with batches of 16, as low as -0.04)."""
    flags = ["--total-timesteps", "2000", "--learning-starts", "500", "--buffer-size", "10000"]
    flags += ["--learning-rate", "5e-4", "--target-network-frequency", "200", "--exploration-fraction", "0.64"]
    flags += ["--end-e", "0.05"]
    returns = catch_returns(dqn_atari_vec, flags + ["--learn-steps-period", "2", "--envs-count", "4"], monkeypatch)
    assert catch.random_policy_return() < -0.5
    assert returns[-100:].mean() > 0.3, returns[-100:].mean()


def test_soft_updates_count_every_environments_steps(in_tmp, monkeypatch, one_torch_thread):
    """--tau 0.5 at a target-network-frequency of 1, four games, an update a step: a loop pass of n
    steps makes n updates, then n soft updates, 1 - 0.5^n of the way to the Q-network (one of 0.5, as
    a one-game run would make after each step, lets the target fall behind). Redone by hand from the
    batches the replay gave, the steps of each pass as the loop counted them."""
    monkeypatch.setattr(dqn_atari_vec, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    networks, _ = record_networks(monkeypatch, dqn_atari_vec, "QNetwork")
    batches = record_batches(monkeypatch, dqn_atari_vec)
    passes, multiples_passed = [], dqn_atari_vec.multiples_passed

    def record_pass(step, new_steps, period):
        passes.append((step, new_steps))
        return multiples_passed(step, new_steps, period)

    monkeypatch.setattr(dqn_atari_vec, "multiples_passed", record_pass)
    warm_up, tau = 40, 0.5
    flags = ["--total-timesteps", "140", "--learning-starts", str(warm_up), "--learn-steps-period", "1", "--envs-count", "4"]
    flags += ["--buffer-size", "200", "--batch-size", "8", "--target-network-frequency", "1", "--tau", str(tau)]
    dqn_atari_vec.main(flags)

    mixes, updates = {}, 0  # the soft updates after each pass's last update
    for step, new_steps in passes:
        updates = dqn_atari_vec.updates_due(step, warm_up, 1)
        if step > warm_up and new_steps > 0:
            mixes[updates] = 1.0 - (1.0 - tau) ** new_steps
    assert len(batches) == updates >= 100 and max(new_steps for _, new_steps in passes) == 4
    (trained, first_weights), (target, _) = networks
    q_network, target_network, _ = dqn_updates_by_hand(
        dqn_atari_vec.QNetwork, first_weights, batches, mix_after=lambda update: mixes.get(update, 0.0)
    )
    for mine, theirs in ((q_network, trained), (target_network, target)):
        for name, weights in mine.state_dict().items():
            torch.testing.assert_close(theirs.state_dict()[name], weights, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("script", [dqn_atari, dqn_atari_vec], ids=lambda m: m.__name__)
def test_td_targets_come_from_the_target_network_that_follows_the_q_network(script, in_tmp, monkeypatch):
    """Catch, 2 games (1 in dqn_atari.py), the target network copied every 100 steps, an update every 2:
    every TD target bootstraps from the target network, never from the network being trained, and
    that network changes only where a copy is due; --save-model saves the network trained."""
    forwards, bootstraps, ended = [], [], []
    forward, td_target, end_run = script.QNetwork.forward, script.td_target, plumbing.run.Run.end

    def spy_forward(self, frames):
        forwards.append(self)
        return forward(self, frames)

    def spy_td_target(rewards, dones, next_q_max, gamma):
        target_network = forwards[-1]  # the pass that gave next_q_max, just before
        bootstraps.append((target_network, [p.detach().clone() for p in target_network.parameters()]))
        return td_target(rewards, dones, next_q_max, gamma)

    def spy_end_run(run, network, *rest):
        ended.append(network)
        return end_run(run, network, *rest)

    monkeypatch.setattr(script, "td_target", spy_td_target)
    monkeypatch.setattr(plumbing.run.Run, "end", spy_end_run)
    monkeypatch.setattr(script.QNetwork, "forward", spy_forward)
    envs = ["--envs-count", "2"] if script is dqn_atari_vec else []
    flags = ["--total-timesteps", "450", "--learning-starts", "100", "--buffer-size", "400", "--batch-size", "8"]
    save = ["--save-model", "--eval-episodes", "1"]
    catch_returns(
        script, flags + envs + save + ["--learn-steps-period", "2", "--target-network-frequency", "100"], monkeypatch
    )
    (q_network,) = ended
    assert len(bootstraps) >= 140 and all(network is not q_network for network, _ in bootstraps)
    assert len({id(network) for network, _ in bootstraps}) == 1, "one target network"
    copies = sum(
        any(not torch.equal(a, b) for a, b in zip(before, after))
        for (_, before), (_, after) in zip(bootstraps, bootstraps[1:])
    )
    assert copies == 3, "copied at steps 200, 300 and 400 (at 100 learning has not started: the copy is the same network)"
    # --save-model saves the network trained, not the target network, which has missed the updates since step 400
    (model_path,) = glob.glob(os.path.join("runs", "*", f"{script.__name__}.pt"))
    saved = torch.load(model_path, weights_only=True)["state_dict"]
    assert all(torch.equal(saved[name], weights) for name, weights in q_network.state_dict().items())
    assert not all(torch.equal(saved[name], weights) for name, weights in bootstraps[-1][0].state_dict().items())
