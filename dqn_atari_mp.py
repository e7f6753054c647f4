"""Nature DQN on Atari with actor processes: `--workers-count` workers feed one learner.

What it shows: deep Q-learning as in Mnih et al. (2015): an epsilon-greedy agent plays, every
transition goes into a replay memory, and every `--learn-steps-period` environment steps one
gradient step moves Q(s, a) towards the one-step TD target r + gamma * max_a' Q_target(s', a').
A target network, copied every `--target-network-frequency` steps, keeps that target still.

Multi-process: `--workers-count` worker processes each play one environment with a copy of the
Q-network whose weights live in shared memory, and send their transitions to the learner, each
over its own pipe (a first-in first-out queue between two processes). The main process learns
from them, so `--learn-steps-period` counts transitions from all workers; a pipe holds less than
one message, so workers wait for the learner rather than run ahead of it.

The environment is ale-py's AtariVectorEnv with one element: the emulator and the standard
DeepMind preprocessing run in C++ (no-ops on reset, frame skip 4 with a max over the last two
frames, 84x84 grayscale). A lost life ends the episode for learning and rewards are clipped to
their sign for learning, but `charts/episodic_return` is the whole game's real score. As in the
standard setup, each game starts with a FIRE step and an action-2 step played for the agent, the
step after a lost life presses FIRE for it (games wait for FIRE), none of these steps is a
transition, and every episode, a game's or a life's, starts with a stack of four copies of its
first frame.

The DQN variants (diff any two): dqn_atari.py (the reference: one environment),
dqn_atari_vec.py (`--envs-count` environments in one process) and dqn_atari_mp.py
(`--workers-count` actor processes feeding one learner through pipes).

    python dqn_atari_mp.py --workers-count 2
    tensorboard --logdir runs
"""

import argparse
import collections
import multiprocessing.connection
import os
import random
import re
import signal
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.multiprocessing as mp
import torch.nn.functional as F
from ale_py import Action, roms
from ale_py.vector_env import AtariVectorEnv
from gymnasium.spaces import Discrete
from torch.utils.tensorboard import SummaryWriter

FRAME_SHAPE = (84, 84)
SEND_BATCH = 32  # a worker sends its transitions 32 at a time: fewer, larger messages
STACK = 4
# One frame, its action, clipped reward and three flags: what the replay stores per transition.
REPLAY_BYTES_PER_TRANSITION = FRAME_SHAPE[0] * FRAME_SHAPE[1] + 1 + 1 + 3


# ---------------------------------------------------------------- arguments (plumbing)
def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def probability(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def rom_name(env_id):
    """'BreakoutNoFrameskip-v4', 'ALE/Breakout-v5' or 'breakout' -> 'breakout' (ale-py's ROM name)."""
    name = env_id.split("/")[-1]
    name = re.sub(r"(NoFrameskip)?(-v\d+)?$", "", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def available_memory_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--exp-name", default=os.path.basename(__file__)[: -len(".py")], help="name of this experiment")
    p.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    p.add_argument("--torch-deterministic", action=argparse.BooleanOptionalAction, default=True,
                   help="make cudnn deterministic")
    p.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True, help="use the GPU when there is one")
    p.add_argument("--save-model", action=argparse.BooleanOptionalAction, default=False,
                   help="save the Q-network into the run directory, then evaluate it")
    p.add_argument("--capture-video", action=argparse.BooleanOptionalAction, default=False,
                   help="with --save-model or --eval-model, record the evaluation games as mp4 under videos/ "
                        "(needs imageio, imageio-ffmpeg)")
    p.add_argument("--save-every", type=positive_int, default=100_000,
                   help="with --save-model, also save the model every this many environment steps, over the last save")
    p.add_argument("--eval-model", metavar="PATH",
                   help="no training: play --eval-episodes games with a model this script saved, log their scores")
    p.add_argument("--eval-episodes", type=positive_int, default=10, help="games played by the evaluation")
    p.add_argument("--eval-epsilon", type=probability, default=0.05, help="epsilon of the evaluation games")
    # Algorithm
    p.add_argument("--env-id", default="BreakoutNoFrameskip-v4", help="any ALE game, e.g. PongNoFrameskip-v4")
    p.add_argument("--total-timesteps", type=positive_int, default=10_000_000, help="environment steps of the run")
    p.add_argument("--learning-rate", type=positive_float, default=1e-4, help="Adam's learning rate")
    p.add_argument("--buffer-size", type=positive_int, default=1_000_000, help="transitions the replay memory holds")
    p.add_argument("--gamma", type=probability, default=0.99, help="discount factor")
    p.add_argument("--tau", type=probability, default=1.0, help="target network update rate (1.0: a hard copy)")
    p.add_argument("--target-network-frequency", type=positive_int, default=1000,
                   help="environment steps between target network updates")
    p.add_argument("--batch-size", type=positive_int, default=32, help="transitions per gradient update")
    p.add_argument("--start-e", type=probability, default=1.0, help="epsilon at the start")
    p.add_argument("--end-e", type=probability, default=0.01, help="epsilon at the end of the decay")
    p.add_argument("--exploration-fraction", type=probability, default=0.10,
                   help="fraction of --total-timesteps over which epsilon decays")
    p.add_argument("--learning-starts", type=non_negative_int, default=80_000, help="environment steps before learning")
    p.add_argument("--workers-count", type=positive_int, default=2, help="actor processes, one environment each")
    p.add_argument("--learn-steps-period", type=positive_int, default=4,
                   help="environment steps, summed over all environments, per gradient update")
    args = p.parse_args(argv)

    # Checks that need more than one flag, done before any long work.
    if roms.get_rom_path(rom_name(args.env_id)) is None:
        p.error(f"argument --env-id: unknown Atari game '{args.env_id}' (ale-py knows e.g. BreakoutNoFrameskip-v4, "
                f"PongNoFrameskip-v4; full list: python -c 'import ale_py.roms as r; print(r.get_all_rom_ids())')")
    if args.learning_starts < args.batch_size:
        p.error(f"argument --learning-starts: must be at least --batch-size ({args.batch_size})")
    if args.buffer_size < args.batch_size + STACK:
        p.error(f"argument --buffer-size: must be at least --batch-size + {STACK} = {args.batch_size + STACK}")
    needed, free = args.buffer_size * REPLAY_BYTES_PER_TRANSITION, available_memory_bytes()
    if needed > free and args.eval_model is None:  # watching a saved model needs no replay
        p.error(f"argument --buffer-size: a replay of {args.buffer_size:,} transitions needs {needed / 2**30:.1f} GiB "
                f"but only {free / 2**30:.1f} GiB of memory is free; lower it below {free // REPLAY_BYTES_PER_TRANSITION:,}")
    if args.capture_video:
        try:
            import imageio  # noqa: F401
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            p.error("argument --capture-video: needs imageio and imageio-ffmpeg: pip install imageio imageio-ffmpeg")
    if args.eval_model is not None and (error := model_error(args.eval_model, args.env_id)):
        p.error(f"argument --eval-model: {error}")
    return args


# ---------------------------------------------------------------- environment (plumbing)
def make_env(env_id, envs_count, seed):
    """Atari with the DeepMind preprocessing, done in C++ by ale-py.

    We ask for raw rewards and real game ends (no episodic life) and derive the learning signals
    ourselves: clipped rewards and life-loss terminals for learning, the whole game's score for
    the logs. A finished game is reset on the *next* step (gymnasium's default): that step ignores
    the action and returns the new game's first observation, after 0-29 no-op frames; the main
    loop then plays `launch_steps(envs)` steps for the agent. After a lost life the game goes on,
    and the main loop presses `relaunch_action(envs)` for the agent on the next step. Each step
    gives one frame per game, (envs, 1, 84, 84): `push_frames` stacks them."""
    envs = AtariVectorEnv(rom_name(env_id), envs_count, noop_max=30, frameskip=4, maxpool=True, use_fire_reset=False,
                          stack_num=1, img_height=FRAME_SHAPE[0], img_width=FRAME_SHAPE[1], grayscale=True,
                          repeat_action_probability=0.0, max_num_frames_per_episode=108_000,
                          episodic_life=False, life_loss_info=False, reward_clipping=False)
    return envs


def relaunch_action(envs):
    """FIRE where the game has it: Breakout and others stand still after a lost life until it is pressed."""
    action_set = envs.ale.get_action_set()
    return action_set.index(Action.FIRE) if Action.FIRE in action_set else 0


def launch_steps(envs):
    """The steps the main loop plays for the agent at each game's start, after the reset's 0-29 no-op
    frames: as CleanRL's FireResetEnv, a FIRE step then an action-2 step where the game has FIRE.
    AtariVectorEnv's own FIRE on reset comes before its no-ops; started this way instead, DQN and PPO
    learn Breakout as fast as CleanRL's (README, "The Atari setup")."""
    action_set = envs.ale.get_action_set()
    return 2 if Action.FIRE in action_set and len(action_set) >= 3 else 0


def push_frames(obs, frames, starts):
    """The stacks after a step: each drops its oldest frame and takes the step's new one, except where
    an episode (a game or a life) starts: there, four copies of its first frame, as in the standard
    setup. We stack frames here rather than in the emulator because it knows nothing of lives."""
    stacks = np.concatenate([obs[:, 1:], frames], axis=1)
    stacks[starts] = frames[starts]  # one frame spread over the four (np.where here is 40x slower)
    return stacks


# ---------------------------------------------------------------- network (algorithm)
class QNetwork(nn.Module):
    """The Nature CNN: 4 stacked 84x84 frames in, one Q-value per action out."""

    def __init__(self, actions_count):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(STACK, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512), nn.ReLU(),
            nn.Linear(512, actions_count),
        )

    def forward(self, frames):
        return self.network(frames.float() / 255.0)


def linear_schedule(start_e, end_e, duration, t):
    """Epsilon falls linearly from start_e to end_e over `duration` steps, then stays there."""
    slope = (end_e - start_e) / max(duration, 1)
    return max(slope * t + start_e, end_e)


def epsilon_greedy(q_network, obs, epsilon, actions_count, rng, device):
    """A random action with probability epsilon (drawn for each environment), else the greedy one."""
    greedy = rng.random(len(obs)) >= epsilon
    actions = rng.integers(0, actions_count, size=len(obs))
    if greedy.any():  # the forward pass is the costly part: run it only where its answer is used
        with torch.no_grad():
            actions[greedy] = q_network(torch.from_numpy(obs[greedy]).to(device)).argmax(1).cpu().numpy()
    return actions


def td_target(rewards, dones, next_q_max, gamma):
    """One-step TD target; no bootstrap past a terminal (a lost life or the game's end)."""
    return rewards + gamma * next_q_max * (1.0 - dones)


# ---------------------------------------------------------------- replay memory (algorithm + memory)
class ReplayMemory:
    """A ring of single frames: 7 KB a transition instead of 56 KB for two stacked observations.

    Row t, column e holds what environment e saw at its t-th step: the newest frame of the
    observation, the action taken, the clipped reward, whether that transition ended the episode
    for learning (`dones`), whether it is a real transition (`valid` is False for the step that
    resets a finished game or relaunches it after a lost life) and whether the frame opened an
    episode (`firsts`). Stacks are rebuilt when sampling, as the main loop builds them: the
    episode's first frame stands in for the frames before it."""

    def __init__(self, capacity, envs_count):
        self.rows = capacity // envs_count
        self.frames = np.zeros((self.rows, envs_count, *FRAME_SHAPE), dtype=np.uint8)
        self.actions = np.zeros((self.rows, envs_count), dtype=np.uint8)
        self.rewards = np.zeros((self.rows, envs_count), dtype=np.int8)
        self.dones = np.zeros((self.rows, envs_count), dtype=bool)
        self.valid = np.zeros((self.rows, envs_count), dtype=bool)
        self.firsts = np.zeros((self.rows, envs_count), dtype=bool)
        # Workers run at their own pace: each column (worker) has its own write position.
        self.pos, self.full = np.zeros(envs_count, dtype=np.int64), np.zeros(envs_count, dtype=bool)

    def add(self, col, frames, actions, rewards, dones, valid, firsts):
        rows = (self.pos[col] + np.arange(len(frames))) % self.rows
        self.frames[rows, col], self.actions[rows, col], self.rewards[rows, col] = frames, actions, rewards
        self.dones[rows, col], self.valid[rows, col], self.firsts[rows, col] = dones, valid, firsts
        self.full[col] |= self.pos[col] + len(frames) >= self.rows
        self.pos[col] = (self.pos[col] + len(frames)) % self.rows

    def stacks(self, rows, cols, length=STACK):
        """The `length` frames ending at (rows, cols), the episode's first frame repeated where they
        would reach into an earlier episode."""
        offsets = np.arange(1 - length, 1)
        firsts = self.firsts[(rows[:, None] + offsets) % self.rows, cols[:, None]]
        # offset of the newest first frame in the window (argmax finds the first True from the end)
        first_offset = np.where(firsts.any(1), -np.argmax(firsts[:, ::-1], axis=1), 1 - length)
        window = (rows[:, None] + np.maximum(offsets, first_offset[:, None])) % self.rows
        return self.frames[window, cols[:, None]]

    def sampleable(self, rows, cols):
        # The next frame must be stored already, and when the ring is full the STACK - 1 frames
        # before the oldest rows have been overwritten by the newest ones.
        pos = self.pos[cols]
        age = np.where(self.full[cols], (rows - pos) % self.rows, rows + STACK - 1)
        return self.valid[rows, cols] & (age >= STACK - 1) & ((rows + 1) % self.rows != pos)

    def sample(self, batch_size, rng):
        filled = np.where(self.full, self.rows, self.pos)
        rows = np.empty(0, dtype=np.int64)
        cols = np.empty(0, dtype=np.int64)
        while len(rows) < batch_size:  # rejection sampling: the few unusable rows are redrawn
            c = rng.integers(0, self.frames.shape[1], size=batch_size)
            r = (rng.random(batch_size) * filled[c]).astype(np.int64)
            ok = self.sampleable(r, c)
            rows, cols = np.concatenate([rows, r[ok]]), np.concatenate([cols, c[ok]])
        rows, cols = rows[:batch_size], cols[:batch_size]
        both = self.stacks((rows + 1) % self.rows, cols, STACK + 1)  # s and s' share STACK - 1 frames
        return both[:, :-1], self.actions[rows, cols], self.rewards[rows, cols], both[:, 1:], self.dones[rows, cols]


# ---------------------------------------------------------------- worker process
def worker(index, args, acting_network, pipe, shared_step, stop):
    """One actor: plays its own environment and sends what it saw to the learner, SEND_BATCH steps at a time."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle: it stops us
    torch.set_num_threads(1)  # the learner needs the cores; acting is one small forward pass
    envs = make_env(args.env_id, 1, args.seed + index)
    rng = np.random.default_rng(args.seed + index)
    frames, infos = envs.reset(seed=args.seed + index)
    obs = frames.repeat(STACK, axis=1)  # an episode's first stack: four copies of its first frame
    lives, relaunch, launch, batch = infos["lives"], relaunch_action(envs), launch_steps(envs), []
    launch_left = np.full(1, launch)  # as in dqn_atari.py's main loop
    starts, restarts, resets = np.ones(1, dtype=bool), launch_left > 0, np.zeros(1, dtype=bool)
    while not stop.is_set():
        # ALGO LOGIC: epsilon follows the global transition count kept by the learner. The learner may
        # be copying new weights in as we act: a forward pass on half-new weights is harmless here.
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, shared_step.value)
        actions = epsilon_greedy(acting_network, obs, epsilon, envs.single_action_space.n, rng, "cpu")
        # not the agent's step: FIRE after a lost life (a reset ignores it), FIRE then 2 at a game's start
        actions = np.where(restarts, np.where(launch_left == 1, 2, relaunch), actions)
        frames, rewards, terminations, truncations, infos = envs.step(actions)
        life_lost = infos["lives"] < lives
        batch.append((obs[0, -1], actions[0], rewards[0], (terminations | life_lost)[0], ~restarts[0], starts[0],
                      (terminations | truncations)[0]))
        next_obs = push_frames(obs, frames, restarts)
        launch_left = np.where(resets, launch, np.maximum(launch_left - 1, 0))
        resets = terminations | truncations
        starts, restarts = restarts, life_lost | resets | (launch_left > 0)
        lives, obs = infos["lives"], next_obs
        if len(batch) == SEND_BATCH:
            message, batch = (index, *map(np.array, zip(*batch))), []
            try:
                pipe.send(message)  # returns once the learner has read most of it: we cannot run ahead
            except BrokenPipeError:  # the learner has closed its end (the run is over) or is gone
                return


def dead_worker(workers):
    """Which worker has died and how, else None. A worker only exits when told to stop, or on an
    exception (its traceback printed, exit code 1), or when killed."""
    for index, process in enumerate(workers):
        if process.exitcode is not None:
            how = f"killed by {signal.Signals(-process.exitcode).name}" if process.exitcode < 0 else f"exit code {process.exitcode}"
            return f"worker {index} (pid {process.pid}) died: {how}"
    return None


# ---------------------------------------------------------------- evaluation (plumbing)
def evaluate(q_network, env_id, seed, episodes, epsilon, device, video_dir=None):
    """Play whole games with a small epsilon; return their real scores."""
    envs = make_env(env_id, 1, seed)
    rng = np.random.default_rng(seed)
    frames, infos = envs.reset(seed=seed)
    obs, lives = frames.repeat(STACK, axis=1), infos["lives"]
    relaunch, launch = relaunch_action(envs), launch_steps(envs)
    launch_left = np.full(1, launch)  # as in training: launch each game, relaunch after a lost life
    restarts, resets = launch_left > 0, np.zeros(1, dtype=bool)
    returns, score, video = [], 0.0, []
    while len(returns) < episodes:
        if restarts[0]:
            actions = np.array([2 if launch_left[0] == 1 else relaunch])
        elif rng.random() < epsilon:
            actions = rng.integers(0, envs.single_action_space.n, size=1)
        else:
            with torch.no_grad():
                actions = q_network(torch.from_numpy(obs).to(device)).argmax(1).cpu().numpy()
        frames, rewards, terminations, truncations, infos = envs.step(actions)
        obs = push_frames(obs, frames, restarts)
        score += float(rewards[0])
        video.append(frames[0, -1])
        if terminations[0] or truncations[0]:
            if video_dir is not None:
                import imageio
                big = [np.kron(frame, np.ones((4, 4), dtype=np.uint8)) for frame in video]  # 84x84 -> 336x336
                imageio.mimwrite(os.path.join(video_dir, f"eval_game_{len(returns)}.mp4"), big, fps=15)
            returns.append(score)
            score, video = 0.0, []
        launch_left = np.where(resets, launch, np.maximum(launch_left - 1, 0))
        resets = terminations | truncations
        restarts, lives = resets | (infos["lives"] < lives) | (launch_left > 0), infos["lives"]
    envs.close()
    return returns


def new_run_dir(run_name):
    run_dir, n = os.path.join("runs", run_name), 1
    while os.path.exists(run_dir):  # never write into an earlier run's directory
        n += 1
        run_dir = os.path.join("runs", f"{run_name}_{n}")
    os.makedirs(run_dir)
    return run_dir


# ---------------------------------------------------------------- long runs: stop, save, watch (plumbing)
SCRIPT = os.path.basename(__file__)  # saved with the model: only this script's network loads it
stop_signals = []  # Ctrl-C (SIGINT) or kill (SIGTERM) once run as a script: the main loop ends at its top


def on_stop_signal(signum, frame):
    stop_signals.append(signum)  # no exception: nothing is cut in half, and a second one while saving waits


def time_left(steps_left, steps_per_second):
    """How long steps_left steps take at steps_per_second, in hours and minutes rounded down: '1h38m'."""
    minutes = int(max(steps_left, 0) / steps_per_second) // 60
    return f"{minutes // 60}h{minutes % 60:02d}m"


def save_model(network, path, env_id, actions_count):
    """Save into a temporary file, then rename it over path: a run killed at any moment, even by
    SIGKILL, leaves the last complete model at path, never a half-written one."""
    # tensors, strings and plain ints only (not numpy's): what torch.load(weights_only=True) reads
    model = {"script": SCRIPT, "env_id": env_id, "actions_count": int(actions_count), "state_dict": network.state_dict()}
    torch.save(model, path + ".tmp")  # 'NAME.pt.tmp': no '*.pt' pattern takes it for a model
    os.replace(path + ".tmp", path)  # atomic: path holds the old model or the new one, nothing in between


def model_error(path, env_id):
    """Why this script cannot play env_id with the model saved at path; None when it can. The model
    is a dict of tensors, strings and ints: weights_only loads it without running code from the file."""
    try:
        model = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        return f"cannot read {path}: {error.strerror}"
    except Exception:  # not a file torch.save wrote, or one holding more than tensors, strings and numbers
        model = None
    if not isinstance(model, dict) or "script" not in model:
        return f"{path} is not a model saved by {SCRIPT} --save-model"
    if model["script"] != SCRIPT:
        return f"{path} was saved by {model['script']}: watch it with python {model['script']} --eval-model {path}"
    envs = make_env(env_id, 1, 0)
    actions_count = envs.single_action_space.n
    envs.close()
    if model["actions_count"] != actions_count:
        return (f"{path} plays {model['env_id']} with {model['actions_count']} actions, {env_id} has {actions_count}: "
                f"add --env-id {model['env_id']}")
    return None


def evaluate_and_log(network, args, run_dir, writer, device):
    """Play --eval-episodes whole games (recorded with --capture-video); print and log their scores."""
    writer.flush()
    if signal.getsignal(signal.SIGINT) is on_stop_signal:  # only games are left, nothing to save:
        for signum in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C or kill ends them at once, as by default
            signal.signal(signum, signal.SIG_DFL)
    video_dir = os.path.join(run_dir, "videos") if args.capture_video else None
    if video_dir:
        os.makedirs(video_dir)
    returns = evaluate(network, args.env_id, args.seed + 100, args.eval_episodes, args.eval_epsilon, device, video_dir)
    for i, episodic_return in enumerate(returns):
        writer.add_scalar("eval/episodic_return", episodic_return, i)
    print(f"evaluation over {len(returns)} games: mean return {np.mean(returns):.1f} "
          f"(scores {', '.join(f'{r:g}' for r in returns)})", flush=True)


# ---------------------------------------------------------------- main loop
def main(argv=None):
    args = parse_args(argv)
    exp_name = args.exp_name + ("_eval" if args.eval_model else "")  # watching a saved agent: a run of its own kind
    run_name = f"{args.env_id.replace('/', '-')}__{exp_name}__{args.seed}__{int(time.time())}"
    run_dir = new_run_dir(run_name)
    writer = SummaryWriter(run_dir)
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(args.seed)  # exploration and replay sampling
    if args.eval_model is not None:  # watch a saved agent play: no training
        model = torch.load(args.eval_model, map_location=device, weights_only=True)
        q_network = QNetwork(model["actions_count"]).to(device)
        q_network.load_state_dict(model["state_dict"])
        print(f"{run_dir}: {args.eval_episodes} games of {args.env_id} by {args.eval_model} on {device}", flush=True)
        evaluate_and_log(q_network, args, run_dir, writer, device)
        writer.close()
        return run_dir

    envs = make_env(args.env_id, 1, args.seed)
    if not isinstance(envs.single_action_space, Discrete):
        print(f"error: argument --env-id: DQN needs a discrete action space, {args.env_id} has "
              f"{envs.single_action_space}", file=sys.stderr)
        sys.exit(2)
    actions_count = envs.single_action_space.n
    envs.close()
    # channels_last: CPU convolutions run about 40% faster on this memory layout; fused: Adam in one pass
    q_network = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True)
    target_network = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    target_network.load_state_dict(q_network.state_dict())
    replay = ReplayMemory(args.buffer_size, args.workers_count)

    # Plumbing: the workers act with a CPU copy of the Q-network whose weights live in shared memory.
    acting_network = QNetwork(actions_count).to(memory_format=torch.channels_last).share_memory()
    acting_network.load_state_dict(q_network.state_dict())
    context = mp.get_context("spawn")  # fork is unsafe with torch's threads and with CUDA
    shared_step, stop = context.Value("q", 0), context.Event()
    # One pipe per worker, whose write end only that worker holds: a worker that dies, even halfway
    # through a message, closes its pipe, and the learner reads an end (EOFError). With one queue
    # shared by all workers, the learner would wait forever for the rest of that message.
    pipes, workers = [], []
    # A terminal's Ctrl-C goes to every process of the run. Ignored here while the workers start, it
    # stays ignored in them from their first instruction (an ignored signal survives exec), so one
    # still importing torch cannot die of it or print a traceback: stopping them is the learner's job.
    learner_handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    for index in range(args.workers_count):
        pipe, worker_end = context.Pipe(duplex=False)
        workers.append(context.Process(target=worker, args=(index, args, acting_network, worker_end, shared_step, stop),
                                       daemon=True))
        workers[-1].start()
        worker_end.close()
        pipes.append(pipe)
    signal.signal(signal.SIGINT, learner_handler)
    ready = collections.deque()  # pipes with a message waiting, served in turn so that every worker gets its say

    scores = np.zeros(args.workers_count)  # the real, unclipped score of each worker's current game
    lengths = np.zeros(args.workers_count, dtype=np.int64)
    recent_returns = collections.deque(maxlen=100)
    global_step, updates, failure = 0, 0, None
    start_time = last_print = time.time()
    recent_prints = collections.deque([(start_time, 0)], maxlen=13)  # (time, step) of about the last minute's prints
    model_path, saved_step = os.path.join(run_dir, f"{args.exp_name}.pt"), 0
    print(f"{run_dir}: {args.env_id}, {args.total_timesteps:,} steps on {device}", flush=True)

    # Plumbing: run until done, Ctrl-C or a dead worker (checking on them is cheap), one batch at a time
    while global_step < args.total_timesteps and not stop_signals and not (failure := dead_worker(workers)):
        if not ready:
            ready.extend(multiprocessing.connection.wait(pipes, timeout=1.0))
            continue
        pipe = ready.popleft()
        try:
            e, frames, actions, rewards, dones, valid, firsts, ends = pipe.recv()  # e: the worker
        except (EOFError, OSError):  # its worker is gone, maybe halfway through a message: dead_worker says how
            pipes.remove(pipe)
            continue
        replay.add(e, frames, actions, np.sign(rewards), dones, valid, firsts)
        new_steps = np.count_nonzero(valid)  # the agent's steps: as in CleanRL, a relaunch or reset is not one
        global_step += new_steps
        shared_step.value = global_step
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)

        # ALGO LOGIC: one gradient update per `learn_steps_period` steps since learning started
        while global_step > args.learning_starts and updates < (global_step - args.learning_starts) // args.learn_steps_period:
            states, batch_actions, batch_rewards, next_states, batch_dones = replay.sample(args.batch_size, rng)
            states, next_states = torch.from_numpy(states).to(device), torch.from_numpy(next_states).to(device)
            batch_rewards = torch.from_numpy(batch_rewards).to(device).float()
            batch_dones = torch.from_numpy(batch_dones).to(device).float()
            with torch.no_grad():
                target = td_target(batch_rewards, batch_dones, target_network(next_states).max(1).values, args.gamma)
            q_values = q_network(states).gather(1, torch.from_numpy(batch_actions).to(device).long()[:, None]).squeeze(1)
            loss = F.mse_loss(q_values, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
            if updates % 100 == 0:
                writer.add_scalar("losses/td_loss", loss.item(), global_step)
                writer.add_scalar("losses/q_values", q_values.mean().item(), global_step)
        if global_step > args.learning_starts:
            acting_network.load_state_dict(q_network.state_dict())  # the workers act with the new weights

        # ALGO LOGIC: the target network follows the Q-network every target_network_frequency steps
        if global_step > args.learning_starts and global_step % args.target_network_frequency < new_steps:
            for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                target_param.data.copy_(args.tau * param.data + (1.0 - args.tau) * target_param.data)

        # Logging: the whole game's real score, as CleanRL logs it
        for reward, is_real, game_end in zip(rewards, valid, ends):
            scores[e] += reward
            lengths[e] += is_real
            if not game_end:
                continue
            writer.add_scalar("charts/episodic_return", scores[e], global_step)
            writer.add_scalar("charts/episodic_length", lengths[e], global_step)
            recent_returns.append(scores[e])
            scores[e], lengths[e] = 0.0, 0

        if time.time() - last_print > 5 or global_step >= args.total_timesteps:
            last_print = time.time()
            sps = global_step / (last_print - start_time)
            writer.add_scalar("charts/SPS", sps, global_step)
            writer.add_scalar("charts/epsilon", epsilon, global_step)
            writer.add_scalar("charts/updates", updates, global_step)
            mean_return = f"{np.mean(recent_returns):.1f}" if recent_returns else "-"
            # Time left at the rate of about the last minute: the run's average would count a fast start
            # (DQN's warm-up, without gradient updates, is 10-20 times faster than its learning)
            recent_prints.append((last_print, global_step))
            rate = (global_step - recent_prints[0][1]) / (last_print - recent_prints[0][0])
            print(f"step {global_step:,}/{args.total_timesteps:,} | {rate:,.0f} steps/s | "
                  f"{time_left(args.total_timesteps - global_step, rate)} left"
                  f" | updates {updates:,} | mean return (last {len(recent_returns)} games) {mean_return}", flush=True)
        # A checkpoint each time the run passes a multiple of --save-every steps
        if args.save_model and global_step // args.save_every > saved_step // args.save_every:
            save_model(q_network, model_path, args.env_id, actions_count)
            saved_step = global_step
        if updates and recent_prints[0][1] <= args.learning_starts:
            # Learning has started, 10-20 times slower than the warm-up: the recent rate starts again here
            last_print = time.time()
            recent_prints = collections.deque([(last_print, global_step)], maxlen=13)
    stop.set()
    for pipe in pipes:
        pipe.close()  # a worker waiting to send gets BrokenPipeError and exits
    for process in workers:
        process.join(timeout=5)
        process.kill()  # no-op for a worker that has exited
    if stop_signals:  # Ctrl-C or kill: save, flush and end here; the evaluation games are skipped
        print(f"stopped by {signal.Signals(stop_signals[0]).name} at step {global_step:,}", flush=True)
    if args.save_model:
        save_model(q_network, model_path, args.env_id, actions_count)
        print(f"model saved to {model_path} (watch it: python {SCRIPT} --eval-model {model_path})", flush=True)
    if args.save_model and not (failure or stop_signals):
        evaluate_and_log(q_network, args, run_dir, writer, device)
    writer.close()
    if failure or stop_signals:
        sys.exit(f"error: {failure}; the other workers were stopped" if failure else 128 + stop_signals[0])
    return run_dir


if __name__ == "__main__":
    for signum in (signal.SIGINT, signal.SIGTERM):  # run as a script: Ctrl-C or kill ends the run cleanly
        signal.signal(signum, on_stop_signal)
    main()
