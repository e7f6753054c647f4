"""Tests of a2c_batched.py: a short real Atari run read back from TensorBoard, seeding, bad input,
one update redone by hand, and learning on Catch.

    python -m pytest tests/test_a2c_batched.py -q
"""

import math
import os
import sys

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
import catch  # noqa: E402
from conftest import (  # noqa: E402
    assert_refused,
    catch_returns,
    check_breakout_events,
    check_seeding,
    read_scalars,
    record_draws,
    record_networks,
    run_bad,
)

import a2c_batched  # noqa: E402

TAGS = [
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "losses/actor_loss",
    "losses/critic_loss",
    "losses/entropy",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_breakout_run_logs_every_tag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    envs, steps = 4, 1600
    run_dir = a2c_batched.main(
        [
            "--total-timesteps",
            str(steps),
            "--envs-count",
            str(envs),
            "--rollout-length",
            "5",
            "--seed",
            "3",
            "--save-model",
            "--eval-episodes",
            "1",
        ]
    )
    assert os.path.basename(os.path.dirname(run_dir)) == "runs"
    assert os.path.basename(run_dir).startswith("BreakoutNoFrameskip-v4__a2c_batched__3__")
    assert os.path.isfile(os.path.join(run_dir, "a2c_batched.pt"))
    scalars = read_scalars(run_dir)
    returns, lengths = check_breakout_events(scalars, TAGS, steps, envs)
    assert sum(lengths) <= steps  # no game is longer than what was played

    # One gradient step per 5 steps of 4 environments, and an entropy no higher than uniform's. The
    # relaunch after each of a game's five lives fills a place in a rollout but is no agent's step.
    updates = len(scalars["losses/actor_loss"][1])
    assert steps // (envs * 5) - 2 <= updates <= (steps + 5 * (len(lengths) + envs)) // (envs * 5)
    entropy = scalars["losses/entropy"][1]
    assert ((0 < entropy) & (entropy <= math.log(4) + 1e-6)).all()
    assert (scalars["losses/critic_loss"][1] >= 0).all()


def test_same_seed_same_run(in_tmp):
    check_seeding(
        a2c_batched.main,
        ["--total-timesteps", "300", "--envs-count", "2", "--rollout-length", "5"],
        ["losses/actor_loss", "losses/critic_loss", "losses/entropy"],
    )


BAD_INPUTS = [
    ("--envs-count", "0"),
    ("--rollout-length", "0"),
    ("--learning-rate", "-1"),
    ("--gamma", "1.5"),
    ("--env-id", "NoSuchGame-v4"),
    ("--ent-coef", "-0.1"),
    ("--vf-coef", "1e40"),  # inf in float32
    ("--total-timesteps", "ten"),
]


@pytest.mark.parametrize("flag,value", BAD_INPUTS)
def test_bad_input_is_refused_before_any_work(flag, value, in_tmp, capsys):
    assert_refused(a2c_batched.main, [flag, value], flag, capsys)


def test_bad_input_from_the_command_line(tmp_path):
    assert (
        run_bad("a2c_batched.py", ["--gamma", "1.5"], tmp_path)
        == "a2c_batched.py: error: argument --gamma: must be a number in [0, 1], got 1.5"
    )


def test_learns_catch(in_tmp, monkeypatch):
    # Catch is small and needs a fast start: a higher learning rate than Atari's, a larger entropy bonus,
    # which keeps the policy from settling on one move before the critic has learned what the states are
    # worth (its advantage is only as good as those values), and a shorter horizon, gamma 0.9 (a game's
    # one reward comes 5 steps in), which the critic learns sooner. Seeds 1-8 here: 0.55 at the least.
    flags = ["--total-timesteps", "12000", "--envs-count", "4", "--rollout-length", "5", "--learning-rate", "1e-3"]
    returns = catch_returns(a2c_batched, flags + ["--ent-coef", "0.03", "--gamma", "0.9", "--seed", "1"], monkeypatch)
    random_return = catch.random_policy_return()  # about -0.65
    assert np.mean(returns[-200:]) > 0.3 > random_return + 0.9, (np.mean(returns[-200:]), random_return)


def test_one_update_matches_a_hand_computation(in_tmp, monkeypatch):
    """One rollout of Catch (2 environments, 8 steps with losses), redone by hand from the observations
    the agent saw, the actions it drew and the rewards it got: each step's TD error against a fixed
    target r + gamma * V(s') (semi-gradient: no gradient through V(s')), the actor's loss scaled by it,
    the critic's its square, their means over the agent's steps weighted by --vf-coef and --ent-coef,
    the gradient clipped to --max-grad-norm, one Adam step; and the three logged losses.
    --max-grad-norm 1e-6 keeps the clipped gradient far below Adam's eps (1e-5), where Adam's first
    step is proportional to it: every part of the loss shows in the step."""
    monkeypatch.setattr(a2c_batched, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    networks, frames = record_networks(monkeypatch, a2c_batched, "Agent")
    drawn = record_draws(monkeypatch, a2c_batched)

    acted, rewards_dones = [], []

    def recorded_send(self, actions, real=a2c_batched.AtariGames.send):
        acted.append(torch.from_numpy(real(self, actions).copy()))
        return acted[-1].numpy()

    def recorded_td_target(rewards, dones, next_values, gamma, real=a2c_batched.td_target):
        rewards_dones.append((rewards.clone(), dones.clone()))
        return real(rewards, dones, next_values, gamma)

    monkeypatch.setattr(a2c_batched.AtariGames, "send", recorded_send)
    monkeypatch.setattr(a2c_batched, "td_target", recorded_td_target)
    lr, max_norm, vf_coef, ent_coef = 1.0, 1e-6, 0.5, 0.01
    flags = ["--total-timesteps", "20", "--envs-count", "2", "--rollout-length", "8", "--learning-rate", str(lr)]
    scalars = read_scalars(a2c_batched.main(flags + ["--max-grad-norm", str(max_norm)]))
    steps = 9  # Catch resets both games at step 5, a step with no loss; 16 agent steps, then 20 is reached

    ((trained, initial_state),) = networks
    agent = a2c_batched.Agent(3).to(memory_format=torch.channels_last)
    agent.load_state_dict(initial_state)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, fused=True)
    logits, values = agent(torch.cat(frames[: steps + 1]))  # every observation of the rollout, and the one after
    logits, values = logits.view(steps + 1, 2, 3)[:-1], values.view(steps + 1, 2)
    rewards, dones = (torch.stack(parts[:steps]) for parts in zip(*rewards_dones))
    actions, agent_acted = torch.stack(drawn[:steps]), torch.stack(acted[:steps])
    assert agent_acted.sum() == 16 and not agent_acted[5].any()
    assert torch.equal(dones.bool(), rewards != 0)  # on Catch, a game's end is its only reward
    td_errors = rewards + 0.99 * values[1:].detach() * (1 - dones) - values[:-1]
    log_probs = torch.log_softmax(logits, 2)
    actor_loss = (-log_probs.gather(2, actions[..., None]).squeeze(2) * td_errors.detach())[agent_acted].mean()
    critic_loss = (td_errors**2)[agent_acted].mean()
    entropy = -(log_probs.exp() * log_probs).sum(2)[agent_acted].mean()
    (actor_loss + vf_coef * critic_loss - ent_coef * entropy).backward()
    torch.nn.utils.clip_grad_norm_(agent.parameters(), max_norm)
    optimizer.step()

    for tag, value in [("actor_loss", actor_loss), ("critic_loss", critic_loss), ("entropy", entropy)]:
        assert scalars[f"losses/{tag}"][1].tolist() == pytest.approx([value.item()], rel=1e-4, abs=1e-7), tag
    changes = [
        torch.cat([(state[k] - initial_state[k]).flatten() for k, _ in agent.named_parameters()])
        for state in (trained.state_dict(), agent.state_dict())
    ]
    assert (changes[0] - changes[1]).norm() < 1e-3 * changes[1].norm()
