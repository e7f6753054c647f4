"""Worker stand-ins for dqn_atari_mp.py's tests; importable by spawned processes."""

import dqn_atari_mp


def worker_1_raises(index, *args):
    if index == 1:
        raise RuntimeError("worker 1 fails on purpose")
    dqn_atari_mp.worker(index, *args)


def worker_on_catch(index, *args):
    """The real worker, playing tests/catch.py instead of Atari."""
    import catch

    dqn_atari_mp.make_env = lambda env_id, envs_count: catch.CatchVectorEnv(envs_count)
    dqn_atari_mp.worker(index, *args)
