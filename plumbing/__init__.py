"""What keeps a run safe and visible, shared by the six scripts; nothing here changes what is learnt.

A script holds its algorithm: its flags, the games, the networks, `main` and how its agent plays an
evaluation game. This package holds the rest, once: the run's flags and their checks (flags.py), the
run's directory, TensorBoard and W&B, the progress line and stop signals (run.py), checkpoints,
--resume and the replay's files (checkpoints.py), and watching or filming a saved model
(evaluation.py). It imports no script: each hands it what it needs."""

# What the scripts use (ruff leaves these imports as they are: F401, I001)
from plumbing.checkpoints import check_replay
from plumbing.evaluation import VideoRecorder
from plumbing.flags import add_run_flags, available_memory_bytes, check_games_memory, check_memory, new_parser, note
from plumbing.flags import non_negative_float, non_negative_int, parse_run, positive_float, positive_int, probability, rom_name
from plumbing.run import Run, catch_stop_signals
