"""Worker stand-ins for dqn_atari_mp.py's failure tests; importable by spawned processes."""

import dqn_atari_mp


def worker_1_raises(index, *args):
    if index == 1:
        raise RuntimeError("worker 1 fails on purpose")
    dqn_atari_mp.worker(index, *args)
