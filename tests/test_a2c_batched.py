"""Tests of a2c_batched.py: a short real Atari run read back from TensorBoard, seeding, bad input,
and learning on Catch.

    python -m pytest tests/test_a2c_batched.py -q
"""

import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
import catch  # noqa: E402
from conftest import assert_refused, catch_returns, check_breakout_events, check_seeding, read_scalars, run_bad  # noqa: E402

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
    ("--total-timesteps", "ten"),
]


@pytest.mark.parametrize("flag,value", BAD_INPUTS)
def test_bad_input_is_refused_before_any_work(flag, value, in_tmp, capsys):
    assert_refused(a2c_batched.main, [flag, value], flag, capsys)


def test_bad_input_from_the_command_line(tmp_path):
    assert (
        run_bad("a2c_batched.py", ["--gamma", "1.5"], tmp_path)
        == "a2c_batched.py: error: argument --gamma: must be in [0, 1], got 1.5"
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
