"""What keeps a run safe and visible, shared by the six scripts; nothing here changes what is learnt.
Its modules, each importing only those before it: checkpoints and the replay's files (checkpoints.py); the
run's flags (flags.py); watching and filming a model (evaluation.py); its directory, logs, progress, stop
signals and end (run.py). It imports no script (docs/plumbing.md)."""

# What the scripts use (ruff leaves these imports as they are: F401, I001)
from plumbing.evaluation import VideoRecorder
from plumbing.flags import add_run_flags, available_memory_bytes, check_games_memory, check_memory, check_replay, new_parser
from plumbing.flags import note
from plumbing.flags import non_negative_float, non_negative_int, parse_run, positive_float, positive_int, probability, rom_name
from plumbing.run import Run, catch_stop_signals, start_workers
