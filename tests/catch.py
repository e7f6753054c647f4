"""Catch: a small problem the learning tests provide, with the AtariVectorEnv interface.

A ball falls one row per step from a random column of the top row; the agent moves a paddle
along the bottom row (0: stay, 1: left, 2: right). When the ball reaches the bottom the game
ends with +1 if the paddle is under it, else -1. A random policy scores about -0.5 a game; a
good one scores +1, which takes looking at the ball, moving towards it, and credit assignment
over the whole fall (the reward comes only at the end).

Observations are what ale-py's AtariVectorEnv gives with stack_num=1, as the scripts make it:
one uint8 frame per game, (envs, 1, 84, 84); a finished game is reset on the next step, which
ignores its action.
Catch has one life and no FIRE: `ale.get_action_set()` says so, as AtariVectorEnv's does.
"""

from types import SimpleNamespace

import numpy as np
from ale_py import Action
from gymnasium.spaces import Box, Discrete
from gymnasium.vector import VectorEnv

GRID = 6  # 6 x 6 cells of 14 x 14 pixels
CELL = 84 // GRID


class CatchVectorEnv(VectorEnv):
    def __init__(self, envs_count):
        self.num_envs = envs_count
        self.single_action_space = Discrete(3)
        self.single_observation_space = Box(0, 255, (1, 84, 84), np.uint8)
        self.rng = np.random.default_rng()
        self.ball_col = np.zeros(envs_count, dtype=np.int64)
        self.ball_row = np.zeros(envs_count, dtype=np.int64)
        self.paddle = np.zeros(envs_count, dtype=np.int64)
        self.stack = np.zeros((envs_count, 4, 84, 84), dtype=np.uint8)
        self.finished = np.zeros(envs_count, dtype=bool)
        self.pending = None
        self.ale = SimpleNamespace(get_action_set=lambda: [Action.NOOP, Action.LEFT, Action.RIGHT])

    def _new_game(self, e):
        self.ball_col[e] = self.rng.integers(GRID)
        self.ball_row[e] = 0
        self.paddle[e] = GRID // 2
        self.stack[e] = 0
        self._push_frame(e)

    def _push_frame(self, e):
        frame = np.zeros((84, 84), dtype=np.uint8)
        r, c = self.ball_row[e], self.ball_col[e]
        frame[r * CELL : (r + 1) * CELL, c * CELL : (c + 1) * CELL] = 255
        p = self.paddle[e]
        frame[84 - CELL // 2 :, p * CELL : (p + 1) * CELL] = 128
        self.stack[e, :-1] = self.stack[e, 1:]
        self.stack[e, -1] = frame

    def _info(self):
        return {"lives": np.zeros(self.num_envs, dtype=np.int32)}

    def reset(self, *, seed=None, options=None):
        self.rng = np.random.default_rng(seed)
        for e in range(self.num_envs):
            self._new_game(e)
        self.finished[:] = False
        return self.stack[:, -1:].copy(), self._info()

    def send(self, actions):
        self.pending = np.asarray(actions)

    def recv(self):
        actions, self.pending = self.pending, None
        rewards = np.zeros(self.num_envs, dtype=np.int32)
        terminations = np.zeros(self.num_envs, dtype=bool)
        for e in range(self.num_envs):
            if self.finished[e]:  # the step after a game's end only resets it
                self._new_game(e)
                self.finished[e] = False
                continue
            self.paddle[e] = np.clip(self.paddle[e] + (0, -1, 1)[int(actions[e])], 0, GRID - 1)
            self.ball_row[e] += 1
            self._push_frame(e)
            if self.ball_row[e] == GRID - 1:
                rewards[e] = 1 if self.paddle[e] == self.ball_col[e] else -1
                terminations[e] = self.finished[e] = True
        return self.stack[:, -1:].copy(), rewards, terminations, np.zeros(self.num_envs, dtype=bool), self._info()

    def step(self, actions):
        self.send(actions)
        return self.recv()

    def close(self, **kwargs):
        pass


def random_policy_return(games=2000, seed=0):
    """Mean score of a uniformly random policy, measured on the same environment."""
    env = CatchVectorEnv(16)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    scores = []
    while len(scores) < games:
        _, rewards, terminations, _, _ = env.step(rng.integers(0, 3, size=16))
        scores.extend(rewards[terminations].tolist())
    return float(np.mean(scores))
