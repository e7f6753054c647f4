"""Worker stand-ins for dqn_atari_mp.py's tests; importable by spawned processes."""

import os
import signal
import time
import types

import numpy as np

import dqn_atari_mp


def worker_1_raises(index, *args):
    if index == 1:
        raise RuntimeError("worker 1 fails on purpose")
    dqn_atari_mp.worker(index, *args)


def worker_1_dies_holding_the_queues_lock(index, *args):
    """Worker 1 plays a while, then takes the queue's write lock as a worker sending a message holds it,
    and is killed there: the lock stays taken for good, and the other workers' messages cannot go out."""
    if index == 1:
        messages = args[-1]
        time.sleep(3)
        messages._wlock.acquire()
        os.kill(os.getpid(), signal.SIGKILL)
    dqn_atari_mp.worker(index, *args)


def worker_on_catch(index, *args):
    """The real worker, playing tests/catch.py instead of Atari."""
    import catch

    dqn_atari_mp.make_env = lambda env_id, envs_count: catch.CatchVectorEnv(envs_count)
    dqn_atari_mp.worker(index, *args)


class CountingGames:
    """A game whose every step is the agent's and whose frame n shows n % 256: a step's place in its
    worker's order can be read off the replay."""

    def __init__(self, env_id, envs_count, seed):
        self.action_space, self.steps = types.SimpleNamespace(n=4), 0
        self.obs, self.firsts = np.zeros((1, dqn_atari_mp.STACK, 84, 84), dtype=np.uint8), np.ones(1, dtype=bool)

    def send(self, actions):
        return np.ones(1, dtype=bool)

    def recv(self):
        self.steps += 1
        self.obs = np.full((1, dqn_atari_mp.STACK, 84, 84), self.steps % 256, dtype=np.uint8)
        self.firsts = np.zeros(1, dtype=bool)
        return np.zeros(1), np.zeros(1, dtype=bool), []


def worker_counting(index, *args):
    """The real worker, playing CountingGames."""
    dqn_atari_mp.AtariGames = CountingGames
    dqn_atari_mp.worker(index, *args)
