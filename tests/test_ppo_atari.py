"""Tests of ppo_atari.py: GAE against a step-by-step computation, how a rollout marks the steps
that only reset a game, one whole update redone by hand, a short real Atari run read back from
TensorBoard, seeding, bad input, and learning on Catch.

    python -m pytest tests/test_ppo_atari.py -q
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
import plumbing.checkpoints  # noqa: E402
import ppo_atari  # noqa: E402

TAGS = [
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/old_approx_kl",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------- GAE
def test_gae_matches_a_step_by_step_computation():
    g, lam = 0.9, 0.8
    # Two environments, five steps. Environment 0: its game ends at step 2, step 3 only resets
    # it, the rollout ends mid-game. Environment 1: a time limit cuts its game at step 1 (not a
    # terminal: the bootstrap from V of the game's last observation stays), step 2 only resets
    # it, a life is lost at step 3 (a terminal for learning), the game goes on.
    rewards = [[0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, -1.0], [1.0, 0.0]]
    values = [[0.5, 0.1], [0.6, 0.2], [0.7, 0.3], [0.3, 0.4], [0.2, 0.5]]
    dones = [[0, 0], [0, 0], [1, 0], [0, 1], [0, 0]]
    agent_acted = [[1, 1], [1, 1], [1, 0], [0, 1], [1, 1]]
    next_values = [0.9, -0.4]
    r = np.array(rewards)
    v = np.array(values)

    a0 = [0.0] * 5
    a0[4] = r[4, 0] + g * next_values[0] - v[4, 0]  # the bootstrap at the rollout's end
    a0[3] = 0.0  # only resets the game
    a0[2] = r[2, 0] - v[2, 0]  # the game's end: no bootstrap, nothing from later steps
    a0[1] = r[1, 0] + g * v[2, 0] - v[1, 0] + g * lam * a0[2]
    a0[0] = r[0, 0] + g * v[1, 0] - v[0, 0] + g * lam * a0[1]
    a1 = [0.0] * 5
    a1[4] = r[4, 1] + g * next_values[1] - v[4, 1]
    a1[3] = r[3, 1] - v[3, 1]  # a lost life: no bootstrap
    a1[2] = 0.0  # only resets the game
    a1[1] = r[1, 1] + g * v[2, 1] - v[1, 1]  # truncated: bootstrapped, but nothing from the next game
    a1[0] = r[0, 1] + g * v[1, 1] - v[0, 1] + g * lam * a1[1]

    advantages = ppo_atari.gae(
        torch.tensor(rewards),
        torch.tensor(values),
        torch.tensor(dones, dtype=torch.float32),
        torch.tensor(agent_acted, dtype=torch.bool),
        torch.tensor(next_values),
        g,
        lam,
    )
    assert advantages.shape == (5, 2)
    np.testing.assert_allclose(advantages.numpy(), np.array([a0, a1]).T, rtol=1e-6, atol=1e-6)


def test_gae_limits_are_the_td_error_and_the_monte_carlo_return():
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.tensor([[0.5], [0.25], [1.0]])
    no_dones, all_acted = torch.zeros(3, 1), torch.ones(3, 1, dtype=torch.bool)
    next_values = torch.tensor([4.0])
    # lambda = 0: the one-step TD error, a2c_batched.py's advantage
    td = ppo_atari.gae(rewards, values, no_dones, all_acted, next_values, 0.5, 0.0)
    np.testing.assert_allclose(td[:, 0].numpy(), [1 + 0.5 * 0.25 - 0.5, 0 + 0.5 * 1.0 - 0.25, 2 + 0.5 * 4 - 1.0])
    # lambda = 1, gamma = 1: the sum of the rewards left plus the bootstrap, minus V
    mc = ppo_atari.gae(rewards, values, no_dones, all_acted, next_values, 1.0, 1.0)
    np.testing.assert_allclose(mc[:, 0].numpy(), [3 + 4 - 0.5, 2 + 4 - 0.25, 2 + 4 - 1.0])


def test_rollout_marks_the_steps_that_only_reset_a_game(tmp_path, monkeypatch):
    """On Catch every game lasts 5 steps, so each environment's rollout rows follow a known pattern."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ppo_atari, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    seen = []
    real_gae = ppo_atari.gae

    def spy(rewards, values, dones, agent_acted, next_values, gamma, gae_lambda):
        advantages = real_gae(rewards, values, dones, agent_acted, next_values, gamma, gae_lambda)
        seen.append((rewards.clone(), dones.clone(), agent_acted.clone(), advantages))
        return advantages

    monkeypatch.setattr(ppo_atari, "gae", spy)
    ppo_atari.main(
        [
            "--total-timesteps",
            "96",
            "--envs-count",
            "2",
            "--rollout-length",
            "16",
            "--num-minibatches",
            "2",
            "--update-epochs",
            "1",
        ]
    )
    assert len(seen) == 3
    rewards, dones, agent_acted, advantages = (torch.cat(parts) for parts in zip(*seen))
    step = torch.arange(48)
    assert torch.equal(agent_acted, (step % 6 != 5)[:, None].expand(48, 2))  # step 5 of every 6 only resets
    assert torch.equal(dones.bool(), (step % 6 == 4)[:, None].expand(48, 2))  # the ball lands at step 4
    assert torch.equal(rewards != 0, dones.bool())  # rewards come only when a game ends
    assert torch.all(advantages[~agent_acted] == 0)


# ---------------------------------------------------------------- a real Atari run
def test_breakout_run_logs_every_tag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    envs, length, steps = 4, 32, 1536
    run_dir = ppo_atari.main(
        [
            "--total-timesteps",
            str(steps),
            "--envs-count",
            str(envs),
            "--rollout-length",
            str(length),
            "--num-minibatches",
            "2",
            "--update-epochs",
            "2",
            "--seed",
            "3",
            "--save-model",
            "--eval-episodes",
            "1",
        ]
    )
    assert os.path.basename(run_dir).startswith("BreakoutNoFrameskip-v4__ppo_atari__3__")
    assert os.path.isfile(os.path.join(run_dir, "ppo_atari.pt"))
    scalars = read_scalars(run_dir)
    returns, lengths = check_breakout_events(scalars, TAGS, steps, envs)

    # One update per rollout, at its end; the learning rate falls linearly from 2.5e-4 towards 0
    # with the agent's steps taken before the rollout (relaunches fill rollout places, uncounted).
    lr_steps, lr = scalars["charts/learning_rate"]
    assert len(lr) >= steps // (envs * length) and (np.diff(lr_steps) <= envs * length).all()
    np.testing.assert_allclose(lr, 2.5e-4 * (1 - np.concatenate([[0], lr_steps[:-1]]) / steps), rtol=1e-5)
    # (clipfrac, approx_kl and explained_variance: their values in test_one_update_matches_a_hand_computation)
    entropy = scalars["losses/entropy"][1]
    assert ((0 < entropy) & (entropy <= math.log(4) + 1e-6)).all()
    assert (scalars["losses/value_loss"][1] >= 0).all()


def test_same_seed_same_run(in_tmp):
    check_seeding(
        ppo_atari.main,
        [
            "--total-timesteps",
            "384",
            "--envs-count",
            "2",
            "--rollout-length",
            "32",
            "--num-minibatches",
            "2",
            "--update-epochs",
            "2",
        ],
        ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl"],
    )


# ---------------------------------------------------------------- bad input
BAD_INPUTS = [
    ("--envs-count", "0"),
    ("--rollout-length", "0"),
    ("--rollout-length", "3"),  # no longer than the 3 steps played for the agent as a game starts
    ("--learning-rate", "-1"),
    ("--gamma", "1.5"),
    ("--env-id", "NoSuchGame-v4"),
    ("--gae-lambda", "2"),
    ("--clip-coef", "0"),
    ("--clip-coef", "1e39"),  # inf in float32: the clamp's bound would not convert
    ("--num-minibatches", "0"),
    ("--num-minibatches", "1000"),
    ("--target-kl", "-0.01"),
]


@pytest.mark.parametrize("flag,value", BAD_INPUTS)
def test_bad_input_is_refused_before_any_work(flag, value, in_tmp, capsys):
    assert_refused(ppo_atari.main, [flag, value], flag, capsys)


def test_bad_input_from_the_command_line(tmp_path):
    assert (
        run_bad("ppo_atari.py", ["--envs-count", "0"], tmp_path)
        == "ppo_atari.py: error: argument --envs-count: must be an integer in [1, 2**62], got 0"
    )


# ---------------------------------------------------------------- learning
def test_learns_catch(in_tmp, monkeypatch):
    # Seeds 1-8 here: 0.48 at the least, 0.77 on average (with 2 epochs instead of 4, as low as 0.18)
    flags = ["--total-timesteps", "6144", "--envs-count", "8", "--rollout-length", "32"]
    returns = catch_returns(ppo_atari, flags + ["--learning-rate", "1e-3", "--seed", "1"], monkeypatch)
    random_return = catch.random_policy_return()  # about -0.65
    assert np.mean(returns[-200:]) > 0.3 > random_return + 0.9, (np.mean(returns[-200:]), random_return)


def test_clipped_surrogate_loss_by_hand():
    """clip 0.2. A > 0: the ratio's gain stops at 1.2 (1.5 counts as 1.2, and moves it no more); A < 0: a
    ratio that grew is paid in full (1.5), one that fell gains only down to 0.8 (0.5 counts as 0.8)."""
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    ratio = torch.tensor([1.5, 0.9, 1.5, 0.5], requires_grad=True)
    loss = ppo_atari.clipped_surrogate_loss(advantages, ratio, 0.2)
    torch.testing.assert_close(loss, torch.tensor((-1.2 - 0.9 + 1.5 + 0.8) / 4))
    loss.backward()
    torch.testing.assert_close(ratio.grad, torch.tensor([0.0, -0.25, 0.25, 0.0]))  # clipped terms push no further


def test_one_update_matches_a_hand_computation(in_tmp, monkeypatch):
    """One rollout of Catch (2 environments, 16 steps), 2 epochs of one minibatch, redone by hand from
    the observations the agent saw and the actions it drew, as CleanRL's PPO computes them: returns
    are the advantages plus V(s); the clipped objective, the clipped value loss, the entropy bonus,
    the gradient clipped to --max-grad-norm, Adam; the logged losses, KL estimates, clip fraction
    and explained variance. A large learning rate moves the policy past the clip in the 2nd epoch."""
    monkeypatch.setattr(ppo_atari, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    networks, frames = record_networks(monkeypatch, ppo_atari, "Agent")
    drawn = record_draws(monkeypatch, ppo_atari)

    gae_calls = []

    def recorded_gae(*args, real=ppo_atari.gae):
        advantages = real(*args)
        gae_calls.append(([a.clone() if torch.is_tensor(a) else a for a in args], advantages))
        return advantages

    monkeypatch.setattr(ppo_atari, "gae", recorded_gae)
    lr, clip, max_norm = 0.003, 0.1, 0.5
    flags = ["--total-timesteps", "30", "--envs-count", "2", "--rollout-length", "16", "--num-minibatches", "1"]
    flags += ["--update-epochs", "2", "--learning-rate", str(lr)]
    scalars = read_scalars(ppo_atari.main(flags))  # 28 agent steps (a reset every 6), one update; then 30 reached
    logged = {tag: values for tag, (_, values) in scalars.items() if tag.startswith("losses/")}
    assert all(len(values) == 1 for values in logged.values())

    ((_, values, _, agent_acted, _, *_), advantages), *more = gae_calls
    assert not more
    ((trained, initial_state),) = networks
    agent = ppo_atari.Agent(3).to(memory_format=torch.channels_last)
    agent.load_state_dict(initial_state)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, fused=True)
    obs, actions = torch.stack(frames[:16])[agent_acted], torch.stack(drawn[:16])[agent_acted]
    with torch.no_grad():
        logits, old_values = agent(obs)
    torch.testing.assert_close(old_values, values[agent_acted])
    old_log_probs = torch.log_softmax(logits, 1).gather(1, actions[:, None]).squeeze(1)
    adv, returns = advantages[agent_acted], advantages[agent_acted] + old_values
    adv = (adv - adv.mean()) / (adv.std(correction=0) + 1e-8)
    clip_fractions = []
    for epoch in range(2):
        logits, new_values = agent(obs)
        log_ratio = torch.log_softmax(logits, 1).gather(1, actions[:, None]).squeeze(1) - old_log_probs
        ratio = log_ratio.exp()
        clip_fractions.append(((ratio - 1).abs() > clip).float().mean().item())
        policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
        clipped_values = old_values + (new_values - old_values).clamp(-clip, clip)
        value_loss = 0.5 * torch.max((new_values - returns) ** 2, (clipped_values - returns) ** 2).mean()
        entropy = -(torch.softmax(logits, 1) * torch.log_softmax(logits, 1)).sum(1).mean()
        optimizer.zero_grad()
        (policy_loss + 0.5 * value_loss - 0.01 * entropy).backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), max_norm)
        optimizer.step()
    assert 0 < clip_fractions[1] < 1  # the 2nd epoch's ratios are clipped in part: the clip is tested
    by_hand = {
        "losses/policy_loss": policy_loss.item(),
        "losses/value_loss": value_loss.item(),
        "losses/entropy": entropy.item(),
        "losses/old_approx_kl": (-log_ratio).mean().item(),
        "losses/approx_kl": ((ratio - 1) - log_ratio).mean().item(),
        "losses/clipfrac": np.mean(clip_fractions),
        "losses/explained_variance": (1 - (returns - old_values).var() / returns.var()).item(),
    }
    assert logged.keys() == by_hand.keys()
    for tag, value in by_hand.items():
        assert logged[tag][0] == pytest.approx(value, rel=1e-3, abs=1e-6), tag
    for name, weights in agent.state_dict().items():
        torch.testing.assert_close(trained.state_dict()[name], weights, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("script", [a2c_batched, ppo_atari], ids=lambda m: m.__name__)
def test_the_entropy_bonus_keeps_the_policy_spread(script, in_tmp, monkeypatch, one_torch_thread):
    """Catch (3 actions), the entropy bonus alone (--ent-coef 1, --vf-coef 0): every update leaves the
    policy's entropy near its largest, log 3; with the bonus's sign turned it falls to 0 within a few."""
    monkeypatch.setattr(script, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    flags = ["--envs-count", "4", "--rollout-length", "32", "--ent-coef", "1", "--vf-coef", "0", "--learning-rate", "1e-3"]
    steps = ["--total-timesteps", "1500"] if script is a2c_batched else ["--total-timesteps", "600", "--num-minibatches", "2"]
    entropies = read_scalars(script.main(flags + steps))["losses/entropy"][1]
    assert len(entropies) >= 4 and entropies.min() > 0.99 * np.log(3), entropies


def test_target_kl_ends_the_epochs_once_the_policy_has_moved_that_far(in_tmp, monkeypatch, one_torch_thread):
    """Catch, 2 rollouts of 4 x 32 steps in 2 minibatches, 4 epochs: 16 gradient steps; with a target
    KL that the first epoch always passes, one epoch a rollout, 4."""
    monkeypatch.setattr(ppo_atari, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    flags = ["--envs-count", "4", "--rollout-length", "32", "--num-minibatches", "2", "--total-timesteps", "256"]
    updates = [
        plumbing.checkpoints.read_checkpoint(ppo_atari.main(flags + more))["updates"] for more in ([], ["--target-kl", "1e-9"])
    ]
    assert updates == [16, 4]


def test_target_kl_ends_the_epochs_at_the_first_that_passes_it(in_tmp, monkeypatch, one_torch_thread):
    """Catch, one rollout in one minibatch at lr 3e-3, as the hand-computed update: the first epoch's
    KL is 0 (the policy has not moved yet), the second's, k, is logged. With 3 epochs and a target
    just below k the epochs end after the second: 2 gradient steps, and the same k logged."""
    monkeypatch.setattr(ppo_atari, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    flags = ["--total-timesteps", "30", "--envs-count", "2", "--rollout-length", "16", "--num-minibatches", "1"]
    flags += ["--learning-rate", "3e-3"]
    (kl,) = read_scalars(ppo_atari.main(flags + ["--update-epochs", "2"]))["losses/approx_kl"][1]
    assert kl > 0
    run_dir = ppo_atari.main(flags + ["--update-epochs", "3", "--target-kl", str(0.99 * kl)])
    assert plumbing.checkpoints.read_checkpoint(run_dir)["updates"] == 2
    assert read_scalars(run_dir)["losses/approx_kl"][1].tolist() == [kl]


@pytest.mark.parametrize("norm_adv", [True, False])
def test_norm_adv_and_the_gradient_clip(norm_adv, in_tmp, monkeypatch, one_torch_thread):
    """Catch, 2 rollouts, 2 minibatches, 4 epochs: 16 gradient steps. --norm-adv gives each minibatch's
    advantages mean 0 and std 1 (--no-norm-adv leaves them as GAE made them); every step's gradient is
    clipped to --max-grad-norm before Adam takes it."""
    monkeypatch.setattr(ppo_atari, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    advantages, clipped = [], []
    loss, clip = ppo_atari.clipped_surrogate_loss, torch.nn.utils.clip_grad_norm_

    def spy_loss(mb_advantages, ratio, clip_coef):
        advantages.append(mb_advantages.detach().clone())
        return loss(mb_advantages, ratio, clip_coef)

    def spy_clip(parameters, max_norm):
        parameters = list(parameters)
        clip(parameters, max_norm)
        clipped.append((max_norm, torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters]))))

    monkeypatch.setattr(ppo_atari, "clipped_surrogate_loss", spy_loss)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy_clip)
    flags = ["--envs-count", "4", "--rollout-length", "32", "--num-minibatches", "2", "--total-timesteps", "256"]
    flags += ["--max-grad-norm", "0.01", "--norm-adv" if norm_adv else "--no-norm-adv"]
    ppo_atari.main(flags)
    assert len(advantages) == len(clipped) == 16
    means = torch.stack([a.mean() for a in advantages]).abs()
    stds = torch.stack([a.std(correction=0) for a in advantages])
    if norm_adv:
        assert means.max() < 1e-5 and (stds - 1).abs().max() < 1e-4, (means, stds)
    else:  # Catch's returns are within [-1, 1]: raw advantages are spread far less than 1
        assert (stds - 1).abs().min() > 0.1 and means.max() > 1e-3, (means, stds)
    assert all(max_norm == 0.01 and norm <= 0.01 * (1 + 1e-5) for max_norm, norm in clipped), clipped[:3]


def test_clip_vloss_charges_the_larger_of_the_plain_and_the_clipped_value_error(in_tmp, monkeypatch, one_torch_thread):
    """Catch, one rollout, one minibatch, 2 epochs. The first gradient step is the same with and
    without --clip-vloss (the values have not moved yet, so clipping changes nothing); it moves
    V(s) towards the returns by more than --clip-coef (0.1), so the second step's critic loss, the
    one logged, is larger with --clip-vloss: each error is the larger of the plain one and that of
    the value kept within clip_coef of the rollout's."""
    monkeypatch.setattr(ppo_atari, "make_env", lambda env_id, envs_count: catch.CatchVectorEnv(envs_count))
    flags = ["--envs-count", "4", "--rollout-length", "32", "--num-minibatches", "1", "--update-epochs", "2"]
    flags += ["--total-timesteps", "128", "--learning-rate", "1e-3"]
    losses = [
        read_scalars(ppo_atari.main(flags + [clip]))["losses/value_loss"][1] for clip in ("--clip-vloss", "--no-clip-vloss")
    ]
    assert len(losses[0]) == len(losses[1]) == 1
    assert losses[0][0] > 1.01 * losses[1][0], losses  # 0.78 against 0.68 (seeds 1-8: 1.05-1.7 times)
