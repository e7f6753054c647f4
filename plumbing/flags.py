"""The run's flags, their checks, and --resume's flags read back from a checkpoint. Nothing here changes what
is learnt: these decide where a run is written, what it keeps, how it is watched, and refuse bad input (exit
status 2, one line naming the flag and what it allows) before any long work starts. It imports checkpoints.py
(--resume reads the checkpoint; the replay's files need room on disk) and no other of the package's modules."""

import argparse
import os
import re
import shlex
import shutil
import sys

import torch
from ale_py import roms

from plumbing import checkpoints
from plumbing.checkpoints import CHECKPOINT, FORMAT, hold_run_dir, read_checkpoint


def number_type(kind, is_allowed, allowed):
    """An argparse type: `kind(text)`, refused unless it reads and is_allowed(value), with 'must be ALLOWED, got TEXT'."""

    def read(text):
        try:
            if is_allowed(value := kind(text)):
                return value
        except ValueError:  # 'ten', or '1e6' for an integer
            pass
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text}")

    return read


# The counts meet numpy's int64 steps: from 2**63 on they would overflow there, mid-run
positive_int = number_type(int, lambda value: 1 <= value <= 2**62, "an integer in [1, 2**62]")
non_negative_int = number_type(int, lambda value: 0 <= value <= 2**62, "an integer in [0, 2**62]")
# The networks compute in float32: a number past its largest, 3.4e38, would be inf there
positive_float = number_type(float, lambda value: 0 < value <= 3.4e38, "a number in (0, 3.4e38]")
non_negative_float = number_type(float, lambda value: 0 <= value <= 3.4e38, "a number in [0, 3.4e38]")
probability = number_type(float, lambda value: 0.0 <= value <= 1.0, "a number in [0, 1]")
# ALE takes seeds below 2**31; the games take seed + i and the evaluation seed + 100: room is left for them
seed_number = number_type(int, lambda value: 0 <= value <= 2**30, "an integer in [0, 2**30]")


def experiment_name(text):
    """An argparse type: --exp-name names the run's directory and the model file in it, NAME.pt."""
    # CHECKPOINT.pt is checkpoint.pt where the file system ignores case (macOS, Windows)
    taken = text.lower() in (".", "..", CHECKPOINT[: -len(".pt")])
    if not 0 < len(text.encode()) <= 100 or "/" in text or "\\" in text or taken:
        raise argparse.ArgumentTypeError(f"must be a name of 1 to 100 bytes, no / or \\, not checkpoint; got '{text}'")
    return text


# ROMs with no one-player game: ale-py registers none of them, and ALE ends the process that loads one
TWO_PLAYERS_ONLY = {"combat", "joust", "maze_craze", "warlords"}


def rom_name(env_id):
    """'BreakoutNoFrameskip-v4', 'ALE/Breakout-v5' or 'breakout' -> 'breakout' (ale-py's ROM name); '' for no game."""
    namespace, _, name = env_id.rpartition("/")
    name = re.sub(r"(NoFrameskip)?(-v\d{1,3})?$", "", name).lower()  # a longer version is no game's
    # Looked up, not split at capitals: UpNDown is up_n_down, TicTacToe3D tic_tac_toe_3d
    games = {}
    for rom in set(roms.get_all_rom_ids()) - TWO_PLAYERS_ONLY:
        games[rom] = games[rom.replace("_", "")] = rom
    return games.get(name, "") if namespace in ("", "ALE") else ""


def model_error(path, env_id, script):
    """Why SCRIPT cannot play env_id with the model at path (weights_only: no code from the file runs); None
    when it can (a model of the same game has its actions: every script plays ALE's minimal action set)."""
    try:
        model = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        return f"cannot read {path}: {error.strerror}"
    except Exception:  # not a file torch.save wrote, or one holding more than tensors, strings and numbers
        model = None
    if not isinstance(model, dict) or "script" not in model:
        return f"{path} is not a model saved by {script} --save-model"
    if model["script"] != script:
        return f"{path} was saved by {model['script']}: watch it with python {model['script']} --eval-model {path}"
    if "state_dict" not in model:  # the checkpoint.pt a finished run leaves: only what tells --resume that it ended
        return f"{path} is a finished run's checkpoint and holds no network: watch the model --save-model wrote beside it"
    if rom_name(model["env_id"]) != rom_name(env_id):
        return f"{path} plays {model['env_id']}, not {env_id}: add --env-id {model['env_id']}"
    return None


def available_memory_bytes():
    """Free memory in bytes, or None where the system does not tell (macOS, Windows): then nothing is checked."""
    try:  # Linux's MemAvailable counts the page cache that can be freed
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        pass
    try:  # other Unixes; macOS has no SC_AVPHYS_PAGES (ValueError), Windows no os.sysconf at all
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def new_parser(doc):
    """The script's flag parser: its docstring's first paragraph as the description, defaults in --help."""
    return argparse.ArgumentParser(
        usage="%(prog)s [flags] (all of them: --help)",  # an error is two lines, not the list of every flag
        description=doc.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )


def add_run_flags(p, script, eval_epsilon=None):
    """The flags every script shares, after its algorithm's: naming, seeding, logging, saving, --resume, evaluation.
    eval_epsilon: --eval-epsilon's default (None: the script sets it, as the DQN scripts do from --end-e)."""
    g, flag = p.add_argument_group("the run (shared by every script)"), argparse.BooleanOptionalAction
    g.add_argument("--exp-name", type=experiment_name, default=script[: -len(".py")], help="name of this experiment")
    g.add_argument("--seed", type=seed_number, default=1, help="seed of the experiment")
    g.add_argument("--torch-deterministic", action=flag, default=True, help="make cudnn deterministic")
    g.add_argument("--cuda", action=flag, default=True, help="use the GPU when there is one")
    why = "needs wandb; WANDB_MODE=offline keeps it on disk, for `wandb sync`"
    g.add_argument("--track", action=flag, default=False, help=f"mirror the logs, flags and code to a W&B run ({why})")
    g.add_argument("--wandb-project-name", default="cleanRL", help="with --track, the W&B project")
    g.add_argument("--wandb-entity", default=None, help="with --track, the W&B team or user; None: your own")
    what = "save the network into the run directory, then evaluate it"
    g.add_argument("--save-model", action=flag, default=False, help=what)
    what = "the game's screen in colour, and the agent's 84x84 view, 4x (needs imageio, imageio-ffmpeg)"
    g.add_argument("--capture-video", action=flag, default=False, help=f"with --save-model or --eval-model, film: {what}")
    what = "write a checkpoint for --resume (and with --save-model the model) every this many environment steps"
    g.add_argument("--save-every", type=positive_int, default=100_000, help=what)
    what = "go on with the stopped or killed run in RUN_DIR from its last checkpoint, with its own flags"
    g.add_argument("--resume", metavar="RUN_DIR", help=what)
    what = "keep the last checkpoint at the end (a DQN replay's files too: 7 GB for 1M steps) for --resume to go on"
    g.add_argument("--keep-checkpoint", action=flag, default=False, help=what)
    what = "no training: play --eval-episodes games with a model this script saved, log their scores"
    g.add_argument("--eval-model", metavar="PATH", help=what)
    g.add_argument("--eval-episodes", type=positive_int, default=10, help="games played by the evaluation")
    what = f"chance of a random action in the evaluation {'(None: --end-e)' if eval_epsilon is None else 'games'}"
    g.add_argument("--eval-epsilon", type=probability, default=eval_epsilon, help=what)


def parse_run(p, argv, script):
    """The flags, or with --resume the run's own flags from its checkpoint; then the checks every script shares."""
    args = p.parse_args(argv)
    if args.resume is not None:
        args = resumed_args(p, argv, args.resume, script)
    if not rom_name(args.env_id):
        known = "e.g. BreakoutNoFrameskip-v4, PongNoFrameskip-v4; full list: python -c 'import ale_py.roms as r; print(r."
        known += f"get_all_rom_ids())', but for {', '.join(sorted(TWO_PLAYERS_ONLY))}: two players only"
        p.error(f"argument --env-id: unknown Atari game '{args.env_id}' (ale-py knows {known})")
    if args.capture_video and not (args.save_model or args.eval_model):
        p.error("argument --capture-video: films the evaluation games, played only with --save-model or --eval-model: add one")
    if args.capture_video:
        try:
            import imageio  # noqa: F401
            import imageio_ffmpeg
        except ImportError:
            p.error("argument --capture-video: needs imageio and imageio-ffmpeg: pip install imageio imageio-ffmpeg")
        try:  # the films' encoder, a program: imageio-ffmpeg's own, or IMAGEIO_FFMPEG_EXE's
            ffmpeg = shutil.which(imageio_ffmpeg.get_ffmpeg_exe())
        except RuntimeError:
            ffmpeg = None
        if ffmpeg is None:
            p.error("argument --capture-video: imageio-ffmpeg finds no ffmpeg program to encode the films with")
    if args.track:
        try:
            import wandb
        except ImportError:
            p.error("argument --track: needs wandb: pip install wandb")
        if os.environ.get("WANDB_MODE") not in ("offline", "dryrun", "disabled"):
            try:  # the API key, asked for here in a terminal; elsewhere wandb.init would fail once the run has begun
                wandb.login(verify=False)
            except wandb.errors.UsageError as error:
                p.error(f"argument --track: {error} Or keep the run on disk: WANDB_MODE=offline")
    if args.eval_model is not None:
        if error := model_error(args.eval_model, args.env_id, script):
            p.error(f"argument --eval-model: {error}")
    return args


EMULATOR_BYTES = 3 * 2**19  # one game's emulator and frames: 1.4-1.6 MiB measured (8 to 256 games)


def check_games_memory(p, args):
    """Refuse --envs-count games that would not fit in the free memory; return the memory they take."""
    needed = args.envs_count * EMULATOR_BYTES
    check_memory(p, args, "--envs-count", needed, f"{args.envs_count:,} games")
    return needed


def check_memory(p, args, flag, needed, what):
    """Refuse a run whose FLAG asks for more memory than is free (not --eval-model's, which needs none of it)."""
    free = available_memory_bytes()
    if free is not None and needed > free and args.eval_model is None:
        p.error(f"argument {flag}: {what} need {needed / 2**30:.1f} GiB but only {free / 2**30:.1f} GiB of memory is free")


def check_replay(p, args, others_bytes=0):
    """The DQN scripts' replay memory: it must fit in the free memory, less OTHERS_BYTES (the games' or the
    workers'), and its files for --resume on the disk; --save-every must not make too many of them."""
    per_transition, chunk = checkpoints.REPLAY_BYTES_PER_TRANSITION, checkpoints.CHUNK_TRANSITIONS
    needed, free = args.buffer_size * per_transition, available_memory_bytes()
    free = None if free is None else free - others_bytes
    if free is not None and needed > free and args.eval_model is None:  # watching a saved model needs no replay
        p.error(
            f"argument --buffer-size: a replay of {args.buffer_size:,} transitions needs {needed / 2**30:.1f} GiB "
            f"but only {free / 2**30:.1f} GiB of memory is free; lower it below {free // per_transition:,}"
        )
    # Each checkpoint writes the rows since the last into a file (one a column where they come at each column's pace)
    # and goes over all the ring's files: more than 1,000 would slow the run, more as the ring fills
    if args.save_every * 1000 < args.buffer_size:
        p.error(f"argument --save-every: must be at least --buffer-size / 1,000 = {-(-args.buffer_size // 1000):,}")
    # On disk, for --resume (ReplayFiles): the ring's files, those of the rows since the last checkpoint
    # (the files it names stay till the next one is on disk: up to a ring more), and two files' slack.
    needed = (args.buffer_size + min(args.buffer_size, args.save_every) + 2 * chunk) * per_transition
    where = args.resume or ("runs" if os.path.isdir("runs") else ".")
    replay_dir = os.path.join(where, "replay")
    needed -= sum(entry.stat().st_size for entry in os.scandir(replay_dir)) if os.path.isdir(replay_dir) else 0
    if needed > (free := shutil.disk_usage(where).free) and args.eval_model is None:
        p.error(
            f"argument --buffer-size: a replay of {args.buffer_size:,} transitions needs up to {needed / 2**30:.1f} GiB "
            f"on disk for --resume, but only {free / 2**30:.1f} GiB is free in {os.path.abspath(where)}"
        )


# The flags a resumed run may change; any other given beside --resume with a new value is refused.
CHANGEABLE = ["total_timesteps", "save_every", "save_model", "keep_checkpoint", "cuda", "capture_video", "eval_episodes"]
CHANGEABLE += ["eval_epsilon"]


def resumed_args(p, argv, run_dir, script):
    """--resume: the flags the run's checkpoint saved, but the CHANGEABLE ones given beside it. Another flag
    with a new value is refused, as is a run directory this script cannot go on with; nothing is written."""

    def refuse(why):
        p.error(f"argument --resume: {why}")

    path = os.path.join(run_dir, CHECKPOINT)
    if not os.path.isdir(run_dir):
        refuse(f"{run_dir} is not a directory")
    for folder in (run_dir, os.path.join(run_dir, "replay")):  # its logs, checkpoints and replay's files go there
        if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
            refuse(f"cannot write in {folder}")
    if not hold_run_dir(run_dir):
        refuse(f"{run_dir} is in use: another process is running it")
    if not os.path.isfile(path):
        refuse(f"{run_dir} has no {CHECKPOINT} (a run writes one every --save-every steps and when stopped)")
    if (checkpoint := read_checkpoint(run_dir)) is None:
        refuse(f"{path} is truncated or is not a checkpoint")
    if checkpoint.get("format") != FORMAT:
        refuse(f"{path} was written by an earlier version of the scripts, which this one cannot resume")
    if (other := checkpoint["script"]) != script:
        refuse(f"{run_dir} is a run of {other}: resume it with python {other} --resume {run_dir}")
    saved = checkpoint["args"]
    args = p.parse_args(argv, argparse.Namespace(**saved))  # flags not given keep the saved values
    for name, value in vars(args).items():
        if name not in CHANGEABLE and name != "resume" and value != saved.get(name, value):
            flags = ", ".join(f"--{n.replace('_', '-')}" for n in CHANGEABLE)
            p.error(
                f"argument --{name.replace('_', '-')}: a resumed run keeps its own ({saved[name]}); only {flags} can change"
            )
    for name, size in checkpoint["files"]:
        if not os.path.isfile(file := os.path.join(run_dir, name)) or os.path.getsize(file) != size:
            refuse(f"{file}, which the checkpoint needs, is missing or truncated")
    step = checkpoint["global_step"]
    if not checkpoint["resumable"]:
        why = f"{run_dir} has finished ({step:,} steps) and kept no checkpoint (--keep-checkpoint keeps one)"
        if os.path.isdir(replay_dir := os.path.join(run_dir, "replay")):  # a kill as the run ended stopped its deletion
            why += f"; its replay files are of no more use: rm -r {shlex.quote(replay_dir)}"
        refuse(why)
    if step >= args.total_timesteps:
        refuse(f"{run_dir} has run its {step:,} steps: to go on, add a larger --total-timesteps")
    return args


def note(text):
    print(f"note: {text}", file=sys.stderr, flush=True)
