"""The standard Atari setup, as all six scripts build it on real Breakout: a game starts with
no-op frames, then a FIRE step and an action-2 step played for the agent; after a lost life the
game is relaunched for the agent (whatever it does), and every episode, a game's or a life's,
starts with a stack of four copies of its first frame."""

import signal
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import read_scalars
from torch.distributions import Categorical

import a2c_batched
import dqn_atari
import dqn_atari_mp
import dqn_atari_vec
import ppo_atari
import pqn_atari

SCRIPTS = [dqn_atari, dqn_atari_vec, dqn_atari_mp, a2c_batched, ppo_atari, pqn_atari]
# A Breakout game in which the agent never moves and never presses FIRE: five lives of about 25
# steps each once the ball is relaunched for it; without the relaunch the game would stand still
# until the time limit (27,000 steps).
NOOP_GAME_STEPS = 200
RELAUNCH_STEPS = 1  # the step after a lost life (FIRE) or after a game's end (the reset)
LAUNCH_STEPS = 2  # a game's start, after the reset: FIRE, then action 2 (CleanRL's FireResetEnv)


def test_push_frames_by_hand():  # the same code in every script: test_long_runs.py checks it
    obs = np.arange(2 * 4).reshape(2, 4, 1, 1).astype(np.uint8)  # env 0: frames 0-3, env 1: frames 4-7
    frames = np.array([10, 20], dtype=np.uint8).reshape(2, 1, 1, 1)
    stacks = dqn_atari.push_frames(obs, frames, np.array([False, True]))
    assert stacks[0].ravel().tolist() == [1, 2, 3, 10]  # the oldest frame drops out
    assert stacks[1].ravel().tolist() == [20, 20, 20, 20]  # a new episode: four copies of its first frame
    assert obs.ravel().tolist() == list(range(8)), "the old stacks are left as they were"


def test_only_breakout_and_other_fire_games_get_fire():  # the same code in every script: test_long_runs.py checks it
    for game, expected in [("breakout", 1), ("pong", 1), ("freeway", 0)]:  # Freeway has no FIRE
        games = dqn_atari.AtariGames(game, 1, 0)
        action_set = games.envs.ale.get_action_set()
        assert games.fire == expected and (expected == 0 or action_set[expected].name == "FIRE")
        assert games.launch == ([expected, 2] if expected else [])  # FIRE, then action 2, where the game has FIRE
        games.envs.close()


def spy_on_stacks(script, monkeypatch):
    """Record every push_frames call of the script's loop: (starts, the stacks it made, the new frames)."""
    calls, push = [], script.push_frames

    def spy(obs, frames, starts):
        stacks = push(obs, frames, starts)
        calls.append((starts.copy(), stacks.copy(), frames.copy()))
        return stacks

    monkeypatch.setattr(script, "push_frames", spy)
    return calls


def check_noop_games(calls, lengths, scalars=None, total=None):
    """A never-moving agent still plays whole games, each life relaunched; each episode's first
    stack is four copies of its first frame, and only then. With a run's scalars: the run counted
    the agent's steps only, not the relaunches and resets (CleanRL's count), and stopped at the total."""
    assert len(lengths) >= 3 and (lengths <= NOOP_GAME_STEPS).all(), lengths
    starts = np.stack([c[0] for c in calls])
    stacks = np.stack([c[1] for c in calls])
    frames = np.stack([c[2] for c in calls])
    assert starts.sum() >= 5 * len(lengths) - len(starts[0]), "a start for every life of every game"
    for column in starts.T:
        edges = np.flatnonzero(np.diff(np.concatenate([[0], column.astype(int), [0]])))
        runs = edges[1::2] - edges[::2]  # lengths of the runs of steps that were not the agent's
        assert edges[0] == 0 and runs[0] == LAUNCH_STEPS, "the first game is launched before the agent acts"
        # after a lost life the relaunch; after a game's end the reset, then the launch (the run's end may cut one)
        assert set(runs[1:-1]) <= {RELAUNCH_STEPS, RELAUNCH_STEPS + LAUNCH_STEPS}, runs
        assert RELAUNCH_STEPS + LAUNCH_STEPS in runs, "a game ended and the next one was launched"
    np.testing.assert_array_equal(stacks[starts], np.repeat(frames[starts], 4, axis=1))
    # elsewhere a stack is the previous one shifted by a frame: no episode reaches into another
    later = starts[1:]
    np.testing.assert_array_equal(stacks[1:][~later][:, :-1], stacks[:-1][~later][:, 1:])
    if scalars is not None:
        agent_steps = np.count_nonzero(~starts)  # push_frames's starts are the steps that relaunched or reset
        assert scalars["charts/SPS"][0][-1] == agent_steps < starts.size, (agent_steps, starts.size)
        assert total <= agent_steps < total + len(starts[0])


@pytest.mark.parametrize(
    "script, extra", [(dqn_atari, []), (dqn_atari_vec, ["--envs-count", "2"])], ids=["dqn_atari", "dqn_atari_vec"]
)
def test_dqn_loop_relaunches_every_life_and_starts_fresh_stacks(script, extra, in_tmp, monkeypatch):
    monkeypatch.setattr(script, "epsilon_greedy", lambda net, obs, *args: np.zeros(len(obs), dtype=np.int64))
    calls = spy_on_stacks(script, monkeypatch)
    run_dir = script.main(["--total-timesteps", "1400", "--learning-starts", "1400", "--buffer-size", "2000"] + extra)
    scalars = read_scalars(run_dir)
    check_noop_games(calls, scalars["charts/episodic_length"][1], scalars, 1400)


class NoopCategorical(Categorical):
    def sample(self, sample_shape=torch.Size()):
        return torch.zeros(self.logits.shape[:-1], dtype=torch.long)


@pytest.mark.parametrize("script", [a2c_batched, ppo_atari], ids=lambda m: m.__name__)
def test_policy_gradient_loop_relaunches_every_life_and_starts_fresh_stacks(script, in_tmp, monkeypatch, one_torch_thread):
    monkeypatch.setattr(script, "Categorical", NoopCategorical)
    calls = spy_on_stacks(script, monkeypatch)
    run_dir = script.main(["--total-timesteps", "1280", "--envs-count", "2", "--rollout-length", "64"])
    scalars = read_scalars(run_dir)
    check_noop_games(calls, scalars["charts/episodic_length"][1], scalars, 1280)


def test_pqn_loop_relaunches_every_life_and_starts_fresh_stacks(in_tmp, monkeypatch, one_torch_thread):
    monkeypatch.setattr(
        pqn_atari, "epsilon_greedy_from_q_values", lambda q_values, *args: torch.zeros(len(q_values), dtype=torch.int64)
    )
    calls = spy_on_stacks(pqn_atari, monkeypatch)
    run_dir = pqn_atari.main(
        ["--total-timesteps", "1280", "--envs-count", "2", "--rollout-length", "64", "--update-epochs", "1"]
    )
    scalars = read_scalars(run_dir)
    check_noop_games(calls, scalars["charts/episodic_length"][1], scalars, 1280)


def run_worker_here(index, args, shared_step, stop, steps, monkeypatch):
    """dqn_atari_mp.worker, in this process, with a stand-in learner that copies each full slot out at once;
    stops after `steps` steps. Returns the batches' steps as the learner would find them (STEP records)."""
    slots = bytearray((index + 1) * dqn_atari_mp.SLOTS * dqn_atari_mp.SEND_BATCH * dqn_atari_mp.STEP.itemsize)
    views, copied, batches = (
        np.frombuffer(slots, dtype=dqn_atari_mp.STEP).reshape(index + 1, dqn_atari_mp.SLOTS, -1),
        [0] * (index + 1),
        [],
    )

    def put(message):  # the learner's side: the batch due, copied out; its slot free again
        worker, batch = message
        assert (worker, batch) == (index, copied[index])
        batches.append(views[worker, batch % dqn_atari_mp.SLOTS].copy())
        copied[index] += 1
        stop.value = stop.value or len(batches) * dqn_atari_mp.SEND_BATCH >= steps

    monkeypatch.setattr(dqn_atari_mp.mp, "parent_process", lambda: SimpleNamespace(is_alive=lambda: True))
    messages = SimpleNamespace(put=put, cancel_join_thread=lambda: None)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        dqn_atari_mp.worker(index, args, None, shared_step, stop, slots, copied, messages)
    finally:
        signal.signal(signal.SIGINT, sigint)
    return np.concatenate(batches) if batches else np.empty(0, dtype=dqn_atari_mp.STEP)


def test_mp_worker_relaunches_every_life_and_starts_fresh_stacks(monkeypatch, one_torch_thread):
    """The worker runs here, in this process, so that its agent can be made to stand still."""
    monkeypatch.setattr(dqn_atari_mp, "epsilon_greedy", lambda net, obs, *args: np.zeros(len(obs), dtype=np.int64))
    calls = spy_on_stacks(dqn_atari_mp, monkeypatch)
    args = dqn_atari_mp.parse_args(["--buffer-size", "1000"])
    steps = run_worker_here(0, args, SimpleNamespace(value=0), SimpleNamespace(value=0), 700, monkeypatch)
    lengths = steps["length"][steps["game_over"]]  # the games the batches finished
    check_noop_games(calls[: len(steps)], lengths)


@pytest.mark.parametrize("learner_step, epsilon", [(0, 1.0), (500_000, 0.505), (5_000_000, 0.01)])
def test_mp_workers_explore_at_the_learners_step(learner_step, epsilon, monkeypatch, one_torch_thread):
    """A worker's epsilon follows the learner's global step (shared with it), not its own count of
    steps: 1 to 0.01 over the first 10% of the default 10M steps."""
    seen = []

    def spy_epsilon_greedy(network, obs, epsilon, *rest):
        seen.append(epsilon)
        return np.zeros(len(obs), dtype=np.int64)

    monkeypatch.setattr(dqn_atari_mp, "epsilon_greedy", spy_epsilon_greedy)
    args = dqn_atari_mp.parse_args(["--buffer-size", "1000"])
    run_worker_here(1, args, SimpleNamespace(value=learner_step), SimpleNamespace(value=0), 40, monkeypatch)
    assert len(seen) >= 40
    np.testing.assert_allclose(seen, epsilon)


class Recorder:
    """The script's real environment, with the actions it was given kept in `played`."""

    def __init__(self, envs):
        self.envs, self.played = envs, []

    def __getattr__(self, name):
        return getattr(self.envs, name)

    def send(self, actions):
        self.played.append(int(actions[0]))
        return self.envs.send(actions)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_evaluation_launches_every_game_and_relaunches_every_life(script, one_torch_thread, monkeypatch):
    """The evaluation games of a never-moving agent end as training's do, and start with fresh stacks:
    each game with FIRE and action 2 played for the agent, as CleanRL's FireResetEnv does."""
    recorders, make_env = [], script.make_env
    monkeypatch.setattr(script, "make_env", lambda *args: recorders.append(Recorder(make_env(*args))) or recorders[-1])
    seen = []

    def noop_policy(obs):
        seen.append(obs.clone())
        scores = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(len(obs), 4)
        return (
            scores if script in (dqn_atari, dqn_atari_vec, dqn_atari_mp, pqn_atari) else (scores * 1e4, torch.zeros(len(obs)))
        )

    returns = script.evaluate(noop_policy, "BreakoutNoFrameskip-v4", 5, 2, 0.0, "cpu")
    assert len(returns) == 2 and len(seen) <= 2 * NOOP_GAME_STEPS, len(seen)
    assert (seen[0] == seen[0][:, -1:]).all(), "the first stack is four copies of the game's first frame"
    played = np.array(recorders[0].played)  # FIRE is 1 in Breakout; the agent only ever plays 0
    assert played[:2].tolist() == [1, 2], "FIRE, then action 2, before the agent's first step"
    launches = np.flatnonzero(played == 2)
    assert len(launches) == 2 and (played[launches - 1] == 1).all(), "each game launched: FIRE, then action 2"
    assert (played == 1).sum() >= 2 * 5, "a FIRE for every life of both games"


def test_gray_frame_is_cleanrls_gray_to_one_level():
    """The emulator's gray palette, maxed and resized in C++, against CleanRL's order (max of RGB frames,
    resized, then gray with ITU-R 601 weights, as cv2 converts) on the same 300 steps of Breakout:
    the two differ by at most one gray level, so the order of those steps is no difference that matters."""

    def game(grayscale):
        envs = dqn_atari.AtariVectorEnv(
            "breakout",
            1,
            noop_max=30,
            frameskip=4,
            maxpool=True,
            use_fire_reset=True,
            stack_num=1,
            img_height=84,
            img_width=84,
            grayscale=grayscale,
            repeat_action_probability=0.0,
            reward_clipping=False,
        )
        envs.reset(seed=3)
        return envs

    gray_env, rgb_env = game(True), game(False)
    actions = np.random.default_rng(0).integers(0, 4, size=300)
    differences = []
    for action in actions:
        gray = gray_env.step(np.array([action]))[0].reshape(84, 84).astype(np.float64)
        rgb = rgb_env.step(np.array([action]))[0].reshape(84, 84, 3).astype(np.float64)
        differences.append(np.abs(np.round(rgb @ [0.299, 0.587, 0.114]) - gray))
    differences = np.array(differences)
    assert len(np.unique(gray)) > 5, "a real screen, not a blank one"
    assert differences.max() <= 1 and differences.mean() < 0.01


def test_learning_sees_clipped_rewards_and_a_terminal_at_each_lost_life_the_logs_whole_scores():
    """Space Invaders at random (aliens are worth 5 to 30 points, three lives): every reward learnt from
    is the sign of the game's, every lost life ends an episode for learning, and each finished game's
    logged score is the sum of its real rewards, its length the agent's steps in it (not the launches
    played for it). AtariGames is the same class in every script."""
    games, rng = dqn_atari.AtariGames("SpaceInvadersNoFrameskip-v4", 2, 3), np.random.default_rng(3)
    real_recv, seen = games.envs.recv, []

    def recv():  # what the emulator gave: the real rewards, and where a game ended
        step = real_recv()
        seen.append((step[1].copy(), step[2] | step[3]))
        return step

    games.envs.recv = recv
    real_sums, agent_steps, scores, lives_lost, played_for_it = np.zeros(2), np.zeros(2, dtype=int), [], 0, 0
    while len(scores) < 2:
        lives = games.lives.copy()
        agent_acted = games.send(rng.integers(0, games.action_space.n, size=2))
        agent_steps, played_for_it = agent_steps + agent_acted, played_for_it + int((~agent_acted).sum())
        rewards, dones, ended = games.recv()
        real_rewards, game_over = seen[-1]
        np.testing.assert_array_equal(rewards, np.sign(real_rewards))
        lost = games.lives < lives
        assert dones[lost].all(), "a lost life ends the episode for learning"
        lives_lost += int((lost & ~game_over).sum())
        real_sums += real_rewards
        assert [score for score, _ in ended] == real_sums[game_over].tolist()  # the whole game's real score
        assert [length for _, length in ended] == agent_steps[game_over].tolist()
        real_sums[game_over], agent_steps[game_over], scores = 0.0, 0, scores + [score for score, _ in ended]
        assert len(seen) < 20_000, "two random games of Space Invaders end long before"
    assert lives_lost >= 2 and max(max(r) for r, _ in seen) >= 5, "lives were lost, rewards above 1 were clipped"
    assert played_for_it >= 2 * 2 + lives_lost, "each game's launch and each relaunch were steps not counted"


@pytest.mark.parametrize("script", [ppo_atari, pqn_atari], ids=lambda m: m.__name__)
def test_the_update_learns_only_from_the_agents_steps(script, in_tmp, monkeypatch, one_torch_thread):
    """Breakout, two games, rollouts of 16 steps: the update's minibatches together hold exactly the
    rollout's steps of the agent, never the launches and resets played for it (the first rollout has
    four: FIRE and action 2 in each game)."""
    returns_name, network_class = ("gae", script.Agent) if script is ppo_atari else ("q_lambda_returns", script.QNetwork)
    events, returns_of, forward = [], getattr(script, returns_name), network_class.forward

    def spy_returns(rewards, values, dones, agent_acted, *rest):
        events.append(("rollout", int(agent_acted.sum()), agent_acted.numel()))
        return returns_of(rewards, values, dones, agent_acted, *rest)

    def spy_forward(self, frames):
        events.append(("pass", len(frames)))  # 2: acting, or V of the next observations; more: a minibatch
        return forward(self, frames)

    monkeypatch.setattr(script, returns_name, spy_returns)
    monkeypatch.setattr(network_class, "forward", spy_forward)
    flags = ["--envs-count", "2", "--rollout-length", "16", "--num-minibatches", "2", "--update-epochs", "1"]
    script.main(flags + ["--total-timesteps", "90"])
    rollouts = [i for i, event in enumerate(events) if event[0] == "rollout"]
    assert len(rollouts) >= 2 and events[rollouts[0]][1] <= 32 - 4  # the first rollout's launches are not learnt from
    for start, end in zip(rollouts, rollouts[1:] + [len(events)]):
        _, agent_steps, rows = events[start]
        learnt_from = sum(size for kind, size in events[start + 1 : end] if kind == "pass" and size != 2)
        assert learnt_from == agent_steps <= rows


def test_a2c_learns_only_from_the_agents_steps(in_tmp, monkeypatch, one_torch_thread):
    """Breakout, two games, rollouts of 16 steps: the losses that make each update have exactly one
    row per step of the agent. The FIRE after a lost life in one game, while the other game's agent
    acts, adds no row (both games' launches at the start fall on the same steps: no loss at all)."""
    events, send, cat = [], a2c_batched.AtariGames.send, torch.cat

    def spy_send(self, actions):
        agent_acted = send(self, actions)
        events.append(("step", int(agent_acted.sum()), len(agent_acted)))
        return agent_acted

    def spy_cat(tensors, *rest, **kwargs):
        joined = cat(tensors, *rest, **kwargs)
        if sys._getframe(1).f_globals["__name__"] == "a2c_batched":  # the update's batches, nobody else's
            events.append(("batch", len(joined), None))
        return joined

    monkeypatch.setattr(a2c_batched.AtariGames, "send", spy_send)
    with monkeypatch.context() as only_here:  # torch.cat is everybody's: spied on for the run alone
        only_here.setattr(torch, "cat", spy_cat)
        a2c_batched.main(["--envs-count", "2", "--rollout-length", "16", "--total-timesteps", "400"])
    batches, agent_steps, played_beside_the_agent, previous = [], 0, 0, None
    for kind, count, envs in events:
        if kind == "step":
            agent_steps = (0 if previous == "batch" else agent_steps) + count  # a new rollout after an update
            played_beside_the_agent += 0 < count < envs
        else:  # the update's three batches (actor, critic, entropy), each with the rows of the steps since the last
            batches.append((count, agent_steps))
        previous = kind
    assert len(batches) >= 30 and played_beside_the_agent >= 2
    for rows, steps in batches:
        assert rows == steps, "one row per step of the agent, none for the steps played for it"
