"""Nature DQN on Atari: the reference script.

What it shows: deep Q-learning as in Mnih et al. (2015), trained as CleanRL trains it (Adam, the
squared TD error): an epsilon-greedy agent plays, every transition goes into a replay memory, and
every `--learn-steps-period` environment steps one gradient step moves Q(s, a) towards the one-step
TD target r + gamma * max_a' Q_target(s', a'). A target network, copied every
`--target-network-frequency` steps, keeps that target still.

The games are ale-py's AtariVectorEnv with one element, in the standard DeepMind setup that
`AtariGames` keeps: learning sees rewards clipped to their sign and a lost life as an episode's
end, while `charts/episodic_return` is the whole game's real score.

The DQN variants (diff any two): dqn_atari.py (the reference: one environment),
dqn_atari_vec.py (`--envs-count` environments in one process) and dqn_atari_mp.py
(`--workers-count` actor processes feeding one learner through pipes).

    python dqn_atari.py --env-id BreakoutNoFrameskip-v4
    tensorboard --logdir runs
"""

import argparse
import collections
import os
import random
import re
import shlex
import shutil
import signal
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from ale_py import Action, roms
from ale_py.vector_env import AtariVectorEnv
from gymnasium.spaces import Discrete
from torch.utils.tensorboard import SummaryWriter

FRAME_SHAPE = (84, 84)
STACK = 4


# ---------------------------------------------------------------- flags
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        usage="%(prog)s [flags] (all of them: --help)",  # an error is two lines, not the list of every flag
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--exp-name", type=experiment_name, default=os.path.basename(__file__)[: -len(".py")], help="name of this experiment"
    )
    p.add_argument("--seed", type=seed_number, default=1, help="seed of the experiment")
    p.add_argument(
        "--torch-deterministic", action=argparse.BooleanOptionalAction, default=True, help="make cudnn deterministic"
    )
    p.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True, help="use the GPU when there is one")
    p.add_argument(
        "--track",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="mirror the TensorBoard logs, the flags and this script's code to a Weights & Biases run (needs wandb; "
        "WANDB_MODE=offline keeps it on disk, for `wandb sync`)",
    )
    p.add_argument("--wandb-project-name", default="cleanRL", help="with --track, the W&B project")
    p.add_argument("--wandb-entity", default=None, help="with --track, the W&B team or user; None: your own")
    p.add_argument(
        "--save-model",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="save the Q-network into the run directory, then evaluate it",
    )
    p.add_argument(
        "--capture-video",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="with --save-model or --eval-model, record the evaluation games as mp4 under videos/: the game's screen "
        "in colour, and in a second file the agent's 84x84 view, 4x (needs imageio, imageio-ffmpeg)",
    )
    p.add_argument(
        "--save-every",
        type=positive_int,
        default=100_000,
        help="write a checkpoint for --resume (and with --save-model the model) every this many environment steps",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="go on with the stopped or killed run in RUN_DIR from its last checkpoint, with its own flags",
    )
    p.add_argument(
        "--keep-checkpoint",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep the last checkpoint whole at the run's end (the replay's files too: 7 GB for 1M transitions), "
        "so that --resume with a larger --total-timesteps can go on",
    )
    p.add_argument(
        "--eval-model",
        metavar="PATH",
        help="no training: play --eval-episodes games with a model this script saved, log their scores",
    )
    p.add_argument("--eval-episodes", type=positive_int, default=10, help="games played by the evaluation")
    p.add_argument("--eval-epsilon", type=probability, help="chance of a random action in the evaluation (None: --end-e)")
    # Algorithm
    p.add_argument("--env-id", default="BreakoutNoFrameskip-v4", help="any ALE game, e.g. pong (NoFrameskip-v4's setup)")
    p.add_argument("--total-timesteps", type=positive_int, default=10_000_000, help="steps summed over all environments")
    p.add_argument("--learning-rate", type=positive_float, default=1e-4, help="Adam's learning rate")
    p.add_argument("--buffer-size", type=positive_int, default=1_000_000, help="transitions the replay memory holds")
    p.add_argument("--gamma", type=probability, default=0.99, help="discount factor")
    p.add_argument("--tau", type=probability, default=1.0, help="target network update rate (1.0: a hard copy)")
    p.add_argument("--target-network-frequency", type=positive_int, default=1000, help="steps between target network updates")
    p.add_argument("--batch-size", type=positive_int, default=32, help="transitions per gradient update")
    p.add_argument("--start-e", type=probability, default=1.0, help="epsilon at the start")
    p.add_argument("--end-e", type=probability, default=0.01, help="epsilon at the end of the decay")
    p.add_argument("--exploration-fraction", type=probability, default=0.10, help="share of the run over which epsilon falls")
    p.add_argument("--learning-starts", type=non_negative_int, default=80_000, help="environment steps before learning")
    p.add_argument("--learn-steps-period", type=positive_int, default=4, help="steps summed over all environments per update")
    args = p.parse_args(argv)
    if args.resume is not None:  # the run's own flags, from its checkpoint (plumbing, below main)
        args = resumed_args(p, argv, args.resume)
    if args.eval_epsilon is None:  # as CleanRL's DQN evaluates: at the epsilon its exploration ends with
        args.eval_epsilon = args.end_e
    check_args(p, args)  # what a flag's type cannot check alone (plumbing, below main)
    return args


# ---------------------------------------------------------------- the games (environment)
def make_env(env_id, envs_count):
    """AtariVectorEnv with the DeepMind preprocessing in C++: 0-29 no-op frames on reset, frame skip 4
    with a max over the last two frames, one 84x84 gray frame a step; raw rewards and real game ends.
    Its first reset seeds the games (AtariGames')."""
    return AtariVectorEnv(
        rom_name(env_id),
        envs_count,
        noop_max=30,
        frameskip=4,
        maxpool=True,
        use_fire_reset=False,
        stack_num=1,
        img_height=FRAME_SHAPE[0],
        img_width=FRAME_SHAPE[1],
        grayscale=True,
        repeat_action_probability=0.0,
        max_num_frames_per_episode=108_000,
        episodic_life=False,
        life_loss_info=False,
        reward_clipping=False,
    )


def push_frames(obs, frames, starts):
    """The stacks after a step: each drops its oldest frame and takes the step's new one, except where
    an episode (a game or a life) starts: there, four copies of its first frame."""
    stacks = np.concatenate([obs[:, 1:], frames], axis=1)
    stacks[starts] = frames[starts]  # one frame spread over the four (np.where here is 40x slower)
    return stacks


class AtariGames:
    """The games as the agent sees them: AtariVectorEnv plus the standard setup's bookkeeping.

    - `obs`: four stacked frames a game; every episode, a game's or a life's, starts with four
      copies of its first frame (AtariVectorEnv's own stack, as envpool's, would run on across a lost life).
    - Steps played for the agent, neither transitions nor counted (as in CleanRL's DQN and PPO; its
      envpool PQN counts the step that resets a game and learns from it): FIRE, then action 2 to start
      a game (CleanRL's FireResetEnv), FIRE after a lost life (Breakout waits for it; NOOP in a game
      without FIRE; CleanRL plays NOOP, FIRE, 2 there, envpool random no-ops, then FIRE), and the step
      that resets a finished game, which ignores its action (gymnasium's default).
    - For learning, rewards clipped to their sign and a lost life ends the episode; for the logs,
      the whole game's real score and its length in the agent's steps."""

    def __init__(self, env_id, envs_count, seed):
        self.envs = make_env(env_id, envs_count)
        self.action_space = self.envs.single_action_space
        action_set = self.envs.ale.get_action_set()
        self.fire = action_set.index(Action.FIRE) if Action.FIRE in action_set else 0
        # As CleanRL's FireResetEnv (from OpenAI Baselines): FIRE, then action 2 (RIGHT in Breakout, UP in many
        # games), in games that have FIRE and an action 2
        self.launch = [self.fire, 2] if Action.FIRE in action_set and len(action_set) >= 3 else []
        frames, infos = self.envs.reset(seed=seed)
        self.obs = frames.repeat(STACK, axis=1)
        self.firsts = np.ones(envs_count, dtype=bool)  # obs opens an episode (the DQN scripts' replay reads it)
        self.lives = infos["lives"]
        self.queued = [list(self.launch) for _ in range(envs_count)]  # actions to play for the agent, in order
        self.agent_acts = np.array([not queue for queue in self.queued])  # the next step is the agent's
        self.scores, self.lengths = np.zeros(envs_count), np.zeros(envs_count, dtype=np.int64)

    def send(self, actions):
        """Start a step: the agent's actions, but where a step is played for it; True where it is a transition."""
        played = actions.copy()
        for e in np.flatnonzero(~self.agent_acts):
            played[e] = self.queued[e].pop(0)
        self.envs.send(played)
        return self.agent_acts

    def recv(self):
        """End the step (obs is the next one): clipped rewards, episodes' ends, (score, length) of ended games."""
        frames, rewards, terminations, truncations, infos = self.envs.recv()
        life_lost, game_over = infos["lives"] < self.lives, terminations | truncations
        self.obs = push_frames(self.obs, frames, ~self.agent_acts)  # a step played for the agent starts an episode
        self.firsts, self.lives = ~self.agent_acts, infos["lives"]
        self.scores += rewards
        self.lengths += self.agent_acts
        finished = [(self.scores[e], self.lengths[e]) for e in np.flatnonzero(game_over)]
        self.scores[game_over], self.lengths[game_over] = 0.0, 0
        for e in np.flatnonzero(game_over):
            self.queued[e] = [self.fire, *self.launch]  # the reset, then the launch
        for e in np.flatnonzero(life_lost & ~game_over):
            self.queued[e] = self.queued[e] or [self.fire]
        self.agent_acts = np.array([not queue for queue in self.queued])
        # A time-limit truncation is not a terminal: the TD target still bootstraps from the next state
        # (as in CleanRL's DQN; its PPO and PQN end the episode there).
        return np.sign(rewards), terminations | life_lost, finished


# ---------------------------------------------------------------- network and algorithm
class QNetwork(nn.Module):
    """The Nature CNN: 4 stacked 84x84 frames in, one Q-value per action out."""

    def __init__(self, actions_count):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(STACK, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
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


def updates_due(global_step, learning_starts, learn_steps_period):
    """The gradient updates a run should have made by global_step: one per learn_steps_period steps
    after learning_starts, none before."""
    return max(global_step - learning_starts, 0) // learn_steps_period


def multiples_passed(step, new_steps, period):
    """How many multiples of period the step count reached or passed when new_steps raised it to
    `step` (with several environments a step adds several: the count can jump over one, or more)."""
    return step // period - (step - new_steps) // period


class ReplayMemory:
    """A ring of single frames: 7 KB a transition instead of 56 KB for two stacked observations.

    Row t, column e holds what environment e saw at its t-th step: the observation's newest frame,
    the action, the clipped reward, whether the episode ended there for learning (`dones`), whether
    it is a transition (`agent_acted`: not a step played for the agent) and whether the frame opened an
    episode (`firsts`): there the episode's first frame stands in for the frames before it."""

    def __init__(self, capacity, envs_count):
        self.rows = capacity // envs_count
        self.frames = np.zeros((self.rows, envs_count, *FRAME_SHAPE), dtype=np.uint8)
        self.actions, self.rewards = (np.zeros((self.rows, envs_count), dtype=kind) for kind in (np.uint8, np.int8))
        self.dones, self.agent_acted, self.firsts = (np.zeros((self.rows, envs_count), dtype=bool) for _ in range(3))
        self.pos, self.full = 0, False

    def add(self, frames, actions, rewards, dones, agent_acted, firsts):
        row = self.pos
        self.frames[row], self.actions[row], self.rewards[row] = frames, actions, rewards
        self.dones[row], self.agent_acted[row], self.firsts[row] = dones, agent_acted, firsts
        self.pos = (row + 1) % self.rows
        self.full = self.full or self.pos == 0

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
        age = (rows - self.pos) % self.rows if self.full else rows + STACK - 1
        # After the agent's step the next frame goes on from it; where it opens a game instead, a stop
        # cut that game off and --resume started a new one: the step's own next frame was never stored.
        next_rows = (rows + 1) % self.rows
        cut_off = self.firsts[next_rows, cols]
        return self.agent_acted[rows, cols] & (age >= STACK - 1) & (next_rows != self.pos) & ~cut_off

    def sample(self, batch_size, rng):
        filled = self.rows if self.full else self.pos
        rows = cols = np.empty(0, dtype=np.int64)
        while len(rows) < batch_size:  # rejection sampling: the few unusable rows are redrawn
            r = rng.integers(0, filled, size=batch_size)
            c = rng.integers(0, self.frames.shape[1], size=batch_size)
            ok = self.sampleable(r, c)
            rows, cols = np.concatenate([rows, r[ok]]), np.concatenate([cols, c[ok]])
        rows, cols = rows[:batch_size], cols[:batch_size]
        both = self.stacks((rows + 1) % self.rows, cols, STACK + 1)  # s and s' share STACK - 1 frames
        return both[:, :-1], self.actions[rows, cols], self.rewards[rows, cols], both[:, 1:], self.dones[rows, cols]


# ---------------------------------------------------------------- main
def main(argv=None):
    args = parse_args(argv)
    run_dir, writer, checkpoint = open_run(args)  # PLUMBING: a new run directory, or --resume's with its checkpoint

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(args.seed)  # exploration and replay sampling
    if args.eval_model is not None:  # PLUMBING: watch a saved agent play, no training
        return watch_saved_model(QNetwork, args, run_dir, writer, device)

    games = AtariGames(args.env_id, 1, args.seed)
    actions_count = games.action_space.n
    # channels_last: the memory layout oneDNN's CPU convolutions run fastest on; fused: Adam in one pass
    q_network = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True)
    target_network = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    target_network.load_state_dict(q_network.state_dict())
    replay = ReplayMemory(args.buffer_size, games.envs.num_envs)
    progress = Progress(writer, args.total_timesteps, warm_up=args.learning_starts)
    replay_files = ReplayFiles(replay, run_dir)
    checkpoints = Checkpoints(args, run_dir, actions_count, progress, q_network, optimizer, target_network, rng, replay_files)
    global_step, updates = checkpoints.restore(checkpoint)  # 0, 0; or --resume's, with all above as saved but the games
    print(f"{run_dir}: {args.env_id}, {args.total_timesteps:,} steps on {device}", flush=True)

    while global_step < args.total_timesteps and not stop_signals:  # Ctrl-C or kill: stop here
        # ALGO LOGIC: epsilon-greedy action for the current observation
        obs, firsts = games.obs, games.firsts  # this step's, for the replay: recv() below replaces them
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        actions = epsilon_greedy(q_network, obs, epsilon, actions_count, rng, device)

        # The emulator runs in its own C++ thread: send the actions, learn while it plays, collect.
        agent_acted = games.send(actions)  # False where the step is played for the agent: no transition
        new_steps = np.count_nonzero(agent_acted)  # the agent's steps, as CleanRL's DQN and PPO count them
        global_step += new_steps

        # ALGO LOGIC: one gradient update per `learn_steps_period` steps since learning started (after a stop,
        # those still due are the resumed run's)
        while updates < updates_due(global_step, args.learning_starts, args.learn_steps_period) and not stop_signals:
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
            stop_if_diverged(loss, global_step, run_dir, writer, args)  # PLUMBING: nan never comes back: stop now
            if updates % 100 == 0:
                writer.add_scalar("losses/td_loss", loss.item(), global_step)
                writer.add_scalar("losses/q_values", q_values.mean().item(), global_step)

        # ALGO LOGIC: the target network follows the Q-network every target_network_frequency steps
        syncs_due = multiples_passed(global_step, new_steps, args.target_network_frequency)
        if global_step > args.learning_starts and syncs_due > 0:
            mix = 1.0 - (1.0 - args.tau) ** syncs_due  # syncs_due soft updates of rate tau, in one (tau 1: a copy)
            for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                target_param.data.copy_(mix * param.data + (1.0 - mix) * target_param.data)

        # ALGO LOGIC: the step's transitions go into the replay memory
        rewards, dones, finished = games.recv()
        replay.add(obs[:, -1], actions, rewards, dones, agent_acted, firsts)

        # PLUMBING: the whole game's real score, as CleanRL logs it; progress; checkpoints
        for score, length in finished:
            writer.add_scalar("charts/episodic_return", score, global_step)
            writer.add_scalar("charts/episodic_length", length, global_step)
            progress.returns.append(score)
        progress.show(global_step, updates, {"charts/epsilon": epsilon, "charts/updates": updates})
        checkpoints.save_every(global_step, updates)
    games.envs.close()
    return end_run(q_network, args, run_dir, writer, device, checkpoints, global_step, updates)


# ================================================================ PLUMBING
# A first reading may stop here: below are the checks of the flags, progress and time left,
# checkpoints, --resume and stop signals, and the evaluation of a saved model.


def number_type(kind, is_allowed, allowed):
    """An argparse type: `kind(text)`, refused unless it reads and is_allowed(value), with 'must be ALLOWED, got TEXT'."""

    def read(text):
        try:
            value = kind(text)
        except ValueError:  # 'ten', or '1e6' for an integer
            value = None
        if value is None or not is_allowed(value):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text}")
        return value

    return read


# The counts meet numpy's int64 steps: from 2**63 on they would overflow there, mid-run
positive_int = number_type(int, lambda value: 1 <= value <= 2**62, "an integer in [1, 2**62]")
non_negative_int = number_type(int, lambda value: 0 <= value <= 2**62, "an integer in [0, 2**62]")
# The networks compute in float32: a number past its largest, 3.4e38, would be inf there
positive_float = number_type(float, lambda value: 0 < value <= 3.4e38, "a number in (0, 3.4e38]")
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


REPLAY_BYTES_PER_TRANSITION = FRAME_SHAPE[0] * FRAME_SHAPE[1] + 1 + 1 + 3  # a frame, action, reward, 3 flags


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


def check_args(p, args):
    """The checks that need more than one flag or a look at the game, done before any long work."""
    if not rom_name(args.env_id):
        p.error(
            f"argument --env-id: unknown Atari game '{args.env_id}' (ale-py knows e.g. BreakoutNoFrameskip-v4, "
            f"PongNoFrameskip-v4; full list: python -c 'import ale_py.roms as r; print(r.get_all_rom_ids())', "
            f"but for {', '.join(sorted(TWO_PLAYERS_ONLY))}: two players only)"
        )
    if args.learning_starts < args.batch_size:
        p.error(f"argument --learning-starts: must be at least --batch-size ({args.batch_size})")
    # When learning starts, the replay holds the steps before the current one, and the newest row of
    # each environment cannot be sampled yet (its next frame is not stored), nor, in a run resumed at its
    # first step, that step (its game was cut): with a warm-up of fewer than 3 steps per environment the
    # first update could find nothing to sample and wait forever.
    if args.learning_starts < 3:
        p.error("argument --learning-starts: must be at least 3")
    if args.buffer_size < args.batch_size + STACK:
        p.error(f"argument --buffer-size: must be at least --batch-size + {STACK} = {args.batch_size + STACK}")
    # In a full ring, all of an environment's rows can be sampled but these: the STACK - 1 oldest (frames of
    # their stacks are overwritten), the newest (its next frame is not stored yet), steps played for the agent
    # (usually up to 3 in a row, a game's reset and launch; more where a life or the game ends during them) and,
    # after --resume, the last row before the stop (its next frame was never stored) and the new game's launch
    # (2 rows). With fewer rows than those and one more, none might be left to sample: an update would wait forever.
    min_rows = (STACK - 1) + 1 + 3 + 1 + 2 + 1
    if args.buffer_size < min_rows:
        p.error(f"argument --buffer-size: must be at least {min_rows}")
    needed, free = args.buffer_size * REPLAY_BYTES_PER_TRANSITION, available_memory_bytes()
    if free is not None and needed > free and args.eval_model is None:  # watching a saved model needs no replay
        p.error(
            f"argument --buffer-size: a replay of {args.buffer_size:,} transitions needs {needed / 2**30:.1f} GiB "
            f"but only {free / 2**30:.1f} GiB of memory is free; lower it below {free // REPLAY_BYTES_PER_TRANSITION:,}"
        )
    # Each checkpoint writes the replay's rows since the last into a file of their own, and every
    # checkpoint goes over all the ring's files: more than 1,000 would slow the run, more as the ring fills
    if args.save_every * 1000 < args.buffer_size:
        p.error(f"argument --save-every: must be at least --buffer-size / 1,000 = {-(-args.buffer_size // 1000):,}")
    # On disk, for --resume (ReplayFiles): the ring's files, those of the rows since the last checkpoint
    # (the files it names stay till the next one is on disk: up to a ring more), and two files' slack.
    needed = (args.buffer_size + min(args.buffer_size, args.save_every) + 2 * CHUNK_TRANSITIONS) * REPLAY_BYTES_PER_TRANSITION
    where = args.resume or ("runs" if os.path.isdir("runs") else ".")
    replay_dir = os.path.join(where, "replay")
    needed -= sum(entry.stat().st_size for entry in os.scandir(replay_dir)) if os.path.isdir(replay_dir) else 0
    if needed > (free := shutil.disk_usage(where).free) and args.eval_model is None:
        p.error(
            f"argument --buffer-size: a replay of {args.buffer_size:,} transitions needs up to {needed / 2**30:.1f} GiB "
            f"on disk for --resume, but only {free / 2**30:.1f} GiB is free in {os.path.abspath(where)}"
        )
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
    envs = make_env(args.env_id, 1)
    envs.close()
    if not isinstance(envs.single_action_space, Discrete):
        p.error(f"argument --env-id: DQN needs a discrete action space, {args.env_id} has {envs.single_action_space}")
    if args.eval_model is not None and (error := model_error(args.eval_model, args.env_id, envs.single_action_space.n)):
        p.error(f"argument --eval-model: {error}")
    if args.eval_model is None and args.learning_starts >= args.total_timesteps:  # allowed (benchmarks time the acting alone)
        print(
            f"note: --learning-starts {args.learning_starts:,} is not below --total-timesteps {args.total_timesteps:,}: "
            f"this run only plays; it will not learn",
            file=sys.stderr,
            flush=True,
        )


def new_run_dir(run_name):
    run_dir, n = os.path.join("runs", run_name), 1
    while os.path.exists(run_dir):  # never write into an earlier run's directory
        n += 1
        run_dir = os.path.join("runs", f"{run_name}_{n}")
    try:
        os.makedirs(run_dir)
    except OSError as error:  # ./runs is a file, or a folder this user may not write in
        sys.exit(f"error: cannot make the run's directory {run_dir}: {error.strerror}")
    hold_run_dir(run_dir)  # so that no --resume writes into it while this run lives
    return run_dir


HELD_RUN_DIRS = {}  # the run directories this process holds -> the descriptor that holds each


def hold_run_dir(run_dir):
    """Take RUN_DIR for this process, for as long as it lives: False where another process holds it
    (two processes writing one run's checkpoints would spoil them). The system lets go of the lock
    when the process ends, however it ends, kill -9 included, so a crashed run can be resumed. The
    lock is flock's, on the directory itself (Linux, macOS); where there is none (Windows), or the
    file system refuses it, the run goes on unguarded."""
    path = os.path.realpath(run_dir)
    if path in HELD_RUN_DIRS:
        return True
    try:
        import fcntl

        descriptor = os.open(path, os.O_RDONLY)
    except (ImportError, OSError):
        return True
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as refusal:
        os.close(descriptor)
        return not isinstance(refusal, BlockingIOError)  # BlockingIOError: another process holds it
    HELD_RUN_DIRS[path] = descriptor
    return True


def start_wandb(args, run_dir):
    """--track: a Weights & Biases run as CleanRL's scripts start it. It mirrors the TensorBoard scalars
    (so it must start before the writer opens), with the flags as its config, the run directory's name
    as its name and this script's code; WANDB_MODE=offline keeps it on disk for `wandb sync`. Its id
    is kept in the run directory, so that --resume goes on in the same W&B run."""
    import wandb

    id_path = os.path.join(run_dir, "wandb_run_id")
    if not os.path.exists(id_path):
        with open(id_path, "w") as f:
            f.write(os.urandom(4).hex())  # 8 random hex digits: the W&B run's id
    with open(id_path) as f:
        run_id = f.read().strip()
    wandb.tensorboard.patch(root_logdir=run_dir)  # told, not guessed: wandb would wait 10 s to guess it
    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS if signal.getsignal(s) is on_stop_signal}
    for signum in handlers:  # W&B may wait 90 s for its server: Ctrl-C or kill ends the wait, nothing having begun
        signal.signal(signum, stop_wandb_init)
    try:
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=os.path.basename(run_dir),
            save_code=True,
            id=run_id,
            resume="allow",
        )
    except (wandb.errors.Error, KeyboardInterrupt) as error:  # no network, W&B refused, or a stop: nothing logged yet
        if args.resume is None:  # a new run's directory holds the id alone
            os.remove(id_path)
            os.rmdir(run_dir)
        if isinstance(error, KeyboardInterrupt):  # os._exit: at sys.exit, W&B would wait for its server all the same
            print(f"stopped by {signal.Signals(stop_signals[-1]).name} as W&B started: no run", file=sys.stderr, flush=True)
            os._exit(128 + stop_signals[-1])
        reason = " ".join(str(error).split())
        sys.exit(f"error: --track: W&B did not start the run ({reason}). Or keep it on disk: WANDB_MODE=offline")
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def stop_wandb_init(signum, frame):
    stop_signals.append(signum)
    raise KeyboardInterrupt


def close_logs(writer, args):
    """TensorBoard's events flushed and closed, then the W&B run of --track, which takes the last ones as it ends."""
    writer.close()
    if args.track:
        import wandb

        wandb.finish()


def stop_if_diverged(result, global_step, run_dir, writer, args):
    """A loss or network output of nan or inf: training has diverged (after a learning rate too high, say) and will
    not come back; going on would waste hours or end in a traceback. The run ends here, exit status 1, its last
    checkpoint as it was."""
    if not result.isfinite().all():
        close_logs(writer, args)
        sys.exit(
            f"error: nan or inf at step {global_step:,}: training diverged (is --learning-rate too high?); "
            f"{run_dir}'s last checkpoint, if any, is from before"
        )


def open_run(args):
    """The run's directory, its TensorBoard writer, and the checkpoint to go on from (None: a new run).
    With --resume, TensorBoard goes on in the run's directory; purge_step hides what the killed run
    logged after the checkpoint's step, so that no step is logged twice and the curves join. With
    --track, the W&B run starts first: it mirrors the writer's events."""
    if args.resume is None:
        exp_name = args.exp_name + ("_eval" if args.eval_model else "")  # watching a saved agent: a run of its own kind
        run_dir = new_run_dir(f"{args.env_id.replace('/', '-')}__{exp_name}__{args.seed}__{int(time.time())}")
        checkpoint, step = None, 0
    else:
        run_dir, checkpoint = args.resume, read_checkpoint(args.resume)
        step = checkpoint["global_step"]
    if args.track:
        start_wandb(args, run_dir)
    # what was logged at the checkpoint's step itself came before the save
    writer = SummaryWriter(run_dir, purge_step=None if checkpoint is None else step + 1)
    table = "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items())
    writer.add_text("hyperparameters", table, step)  # a resumed run's at its first step: the flags it changed show
    return run_dir, writer, checkpoint


def time_left(steps_left, steps_per_second):
    """How long steps_left steps take at steps_per_second, in hours and minutes rounded down: '1h38m';
    '?' where no step was made in the time measured."""
    if steps_per_second <= 0:
        return "?"
    minutes = int(max(steps_left, 0) / steps_per_second) // 60
    return f"{minutes // 60}h{minutes % 60:02d}m"


class Progress:
    """Every 5 s a line (steps/s, time left, updates, mean return of the last 100 games), charts/SPS and
    the charts given. Time left is at the rate of about the last minute, not the run's average; after
    `warm_up` steps (a warm-up without updates, several times faster), that rate starts again."""

    def __init__(self, writer, total_timesteps, warm_up=None):
        self.writer, self.total, self.warm_up = writer, total_timesteps, warm_up
        self.start_time = self.last_print = time.time()
        self.first_step = 0  # of this process: a resumed run's rate counts from its checkpoint
        self.recent_prints = collections.deque([(self.start_time, 0)], maxlen=13)  # (time, step) of the last minute
        self.returns = collections.deque(maxlen=100)

    def show(self, step, updates, charts=()):
        if time.time() - self.last_print > 5 or step >= self.total:
            self.last_print = time.time()
            self.writer.add_scalar("charts/SPS", (step - self.first_step) / (self.last_print - self.start_time), step)
            for tag, value in dict(charts).items():
                self.writer.add_scalar(tag, value, step)
            self.recent_prints.append((self.last_print, step))
            rate = (step - self.recent_prints[0][1]) / (self.last_print - self.recent_prints[0][0])
            print(
                f"step {step:,}/{self.total:,} | {rate:,.0f} steps/s | {time_left(self.total - step, rate)} left"
                f" | updates {updates:,} | mean return (last {len(self.returns)} games) "
                f"{f'{np.mean(self.returns):.1f}' if self.returns else '-'}",
                flush=True,
            )
        if self.warm_up is not None and updates and self.recent_prints[0][1] <= self.warm_up:
            self.last_print = time.time()
            self.recent_prints = collections.deque([(self.last_print, step)], maxlen=13)

    def go_on_from(self, step, returns):
        """--resume: steps/s from the checkpoint's step on, from now (after the replay's loading, which may take
        minutes), the mean return over the same last 100 games."""
        self.start_time = self.last_print = time.time()
        self.first_step = step
        self.recent_prints = collections.deque([(self.start_time, step)], maxlen=13)
        self.returns.extend(returns)


SCRIPT = os.path.basename(__file__)  # saved with the model: only this script's network loads it
# Ctrl-C (SIGINT), kill (SIGTERM) and a closed terminal (SIGHUP, not on Windows) once run as a script
STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
stop_signals = []  # the ones received: the main loop ends at its top


def on_stop_signal(signum, frame):
    stop_signals.append(signum)  # no exception: nothing is cut in half, and a second one while saving waits
    if signum not in (signal.SIGINT, signal.SIGTERM):  # SIGHUP, a closed terminal: printing to it would fail (EIO)
        for fd in (1, 2):
            if stat.S_ISCHR(os.fstat(fd).st_mode) and not os.isatty(fd):  # a terminal that has hung up
                os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


CHECKPOINT = "checkpoint.pt"
# The flags a resumed run may change; any other given beside --resume with a new value is refused.
CHANGEABLE = [
    "total_timesteps",
    "save_every",
    "save_model",
    "keep_checkpoint",
    "cuda",
    "capture_video",
    "eval_episodes",
    "eval_epsilon",
]


def save_atomically(data, path):
    """torch.save into PATH.tmp, on disk (fsync), renamed over PATH: a kill at any moment, even of the
    machine, leaves the old file or the new one, whole."""
    with open(path + ".tmp", "wb") as f:  # 'NAME.pt.tmp': no '*.pt' pattern takes it for a model
        torch.save(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)  # atomic: the old file or the new one, nothing in between
    sync_dir(os.path.dirname(path))


def plain(data):
    """data with numpy's numbers made python's (a step count, an annealed learning rate): the
    checkpoint then holds only what torch.load(weights_only=True) reads."""
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(plain(value) for value in data)
    return data.item() if isinstance(data, np.generic) else data


def sync_dir(path):
    """The directory's entries (a rename, a new file) on disk too."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows opens no directory: there, the rename is as durable as the system makes it
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpoints:
    """RUN_DIR/checkpoint.pt, all that --resume needs, written every --save-every steps, when the run
    stops and at its end; with --save-model the network alone too, as NAME.pt (for --eval-model; a
    finished run that goes on keeps it and writes NAME_2.pt).

    It holds the network, the optimizer and, where the script has them, the target network and numpy's
    Generator; numpy's, torch's and python's global random streams; the step and update counts; the
    last 100 games' scores; the flags (args, whole); and the names of the replay's files (ReplayFiles, in
    the DQN scripts). Only tensors, numbers, strings, lists, tuples, dicts and None: what
    torch.load(weights_only=True) reads."""

    def __init__(self, args, run_dir, actions_count, progress, network, optimizer, target_network=None, rng=None, replay=None):
        self.args, self.run_dir, self.actions_count, self.progress = args, run_dir, actions_count, progress
        self.network, self.optimizer, self.target_network = network, optimizer, target_network
        self.rng, self.replay = rng, replay  # None where the script has none
        self.path, self.model_path = os.path.join(run_dir, CHECKPOINT), os.path.join(run_dir, f"{args.exp_name}.pt")
        self.saved_step = 0

    def save_every(self, step, updates):
        if self.replay is not None:
            self.replay.keep_up()
        if step // self.args.save_every > self.saved_step // self.args.save_every:
            self.save(step, updates)

    def save(self, step, updates, finished=False):
        weights = torch.stack([w.detach().abs().max() for w in self.network.parameters()])  # nan or inf if any is
        stop_if_diverged(weights, step, self.run_dir, self.progress.writer, self.args)  # --resume would diverge again
        model = {
            "script": SCRIPT,
            "env_id": self.args.env_id,
            "actions_count": int(self.actions_count),
            "state_dict": self.network.state_dict(),
        }
        numpy_state = np.random.get_state()
        if finished and not self.args.keep_checkpoint:  # the run's end: only what tells --resume that it has finished
            checkpoint = {"script": SCRIPT, "args": vars(self.args), "global_step": step, "updates": updates}
            checkpoint |= {"finished": True, "resumable": False, "replay": None, "files": []}
        else:
            checkpoint = {
                **model,  # a model too: --eval-model plays it
                "args": vars(self.args),  # the run's own flags, for --resume
                "model_file": os.path.basename(self.model_path),  # where --save-model writes: NAME.pt, or NAME_2.pt...
                "global_step": step,
                "updates": updates,
                "finished": finished,
                "resumable": True,
                "optimizer": self.optimizer.state_dict(),
                "target_network": None if self.target_network is None else self.target_network.state_dict(),
                "generator": None if self.rng is None else self.rng.bit_generator.state,
                "numpy_random": [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]],
                "torch_random": torch.get_rng_state(),
                "cuda_random": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],  # a CUDA run's only
                "python_random": random.getstate(),
                "returns": [float(score) for score in self.progress.returns],
                "replay": None if self.replay is None else self.replay.save(),  # the names of its files, written as it fills
                "files": [] if self.replay is None else self.replay.files(),  # (path, size): checked before a resume starts
            }
        if self.args.save_model:  # first: a kill between the two leaves the last checkpoint to go on from;
            save_atomically(model, self.model_path)  # the other way round, at the end, a finished run without its model
        save_atomically(plain(checkpoint), self.path)
        if self.replay is not None:
            self.replay.saved(checkpoint["replay"])
        self.saved_step = step

    def restore(self, checkpoint):
        """--resume: everything as the checkpoint saved it, bit for bit; the step and update counts."""
        if checkpoint is None:
            return 0, 0
        self.network.load_state_dict(checkpoint["state_dict"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        if self.target_network is not None:
            self.target_network.load_state_dict(checkpoint["target_network"])
        if self.rng is not None:
            self.rng.bit_generator.state = checkpoint["generator"]
        name, keys, *rest = checkpoint["numpy_random"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
        torch.set_rng_state(checkpoint["torch_random"])
        if torch.cuda.is_available() and len(checkpoint["cuda_random"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(checkpoint["cuda_random"])
        random.setstate(checkpoint["python_random"])
        step, saved_args = checkpoint["global_step"], checkpoint["args"]
        # (a checkpoint of an earlier version of this script names no file: NAME.pt)
        self.model_path = os.path.join(self.run_dir, checkpoint.get("model_file", os.path.basename(self.model_path)))
        ends = 1
        while checkpoint["finished"] and os.path.exists(self.model_path):  # a finished run goes on: its model stays
            ends += 1
            self.model_path = os.path.join(self.run_dir, f"{self.args.exp_name}_{ends}.pt")
        if self.replay is not None:
            self.replay.load(checkpoint["replay"])
        self.progress.go_on_from(step, checkpoint["returns"])
        self.saved_step = step
        changed = [
            f"--{k.replace('_', '-')} {v} (was {saved_args[k]})"
            for k, v in vars(self.args).items()
            if k in CHANGEABLE and saved_args.get(k, v) != v
        ]
        print(f"{self.run_dir}: resumed at step {step:,}" + "".join(f", {c}" for c in changed), flush=True)
        return step, checkpoint["updates"]

    def finish(self, step, updates):
        """The run's end: the last checkpoint, and with --keep-checkpoint all of it (the replay's files
        too): --resume with a larger --total-timesteps can then go on. Without, the replay's files go."""
        self.save(step, updates, finished=True)
        if self.replay is not None and not self.args.keep_checkpoint:
            self.replay.delete()


CHUNK_TRANSITIONS = 8192  # the replay goes to disk 8,192 transitions (58 MB) at a time


def write_rows(path, arrays):
    """Arrays one after the other in .npy format (np.load reads them back in turn), in blocks of rows:
    a slice of the ring needs no copy of its own. Then fsync: whole on disk before a checkpoint names it."""
    with open(path, "wb") as f:
        for array in arrays:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
            for start in range(0, len(array), 1024):
                f.write(np.ascontiguousarray(array[start : start + 1024]).data)
        f.flush()
        os.fsync(f.fileno())


class ReplayFiles:
    """The replay memory on disk, for --resume, never written whole (1M transitions are 7 GB).

    Its new rows go into files under RUN_DIR/replay as they come: consecutive ring rows, up to
    CHUNK_TRANSITIONS transitions and a quarter of the ring a file, written in a background thread and
    never modified after. A checkpoint writes only the rows since the last file and names the files that
    hold the ring at that moment: a resumed run rebuilds the ring from them alone, never with a row
    written after. A file whose rows have all been overwritten since is deleted once a checkpoint that
    does not name it is on disk."""

    def __init__(self, replay, run_dir):
        self.replay, self.run_dir = replay, run_dir
        self.chunk_rows = max(1, min(CHUNK_TRANSITIONS // replay.frames.shape[1], replay.rows // 4))
        self.written_to = 0  # the ring row where the rows not in a file yet start
        self.chunks = collections.deque()  # (path, first row, rows), oldest first: the files that hold the ring
        self.named, self.retired = set(), []  # named by the last checkpoint; of those, the ones the next will not name
        self.count = 0  # files written: the next one's number
        self.thread, self.writing = ThreadPoolExecutor(max_workers=1), None  # writing the newest file

    def fields(self):
        r = self.replay
        return r.frames, r.actions, r.rewards, r.dones, r.agent_acted, r.firsts

    def keep_up(self):
        """Once a step: a file as soon as chunk_rows new rows are in."""
        if (self.replay.pos - self.written_to) % self.replay.rows >= self.chunk_rows:
            self.write(in_background=True)

    def write(self, in_background):
        """The rows from written_to to the ring's position: one file, or two where the ring wraps."""
        if self.writing is not None:  # one file at a time: its rows, read in place, cannot be overwritten meanwhile
            self.writing.result()  # (raises what the thread raised: a full disk)
        os.makedirs(os.path.join(self.run_dir, "replay"), exist_ok=True)
        first, rows = self.written_to, (self.replay.pos - self.written_to) % self.replay.rows
        while rows > 0:
            count = min(rows, self.replay.rows - first)
            path = f"replay/{self.count:06d}.npy"  # "/" on every system: a run made on one resumes on another
            arrays = [field[first : first + count] for field in self.fields()]
            if in_background:
                self.writing = self.thread.submit(write_rows, os.path.join(self.run_dir, path), arrays)
            else:
                write_rows(os.path.join(self.run_dir, path), arrays)
            self.chunks.append((path, first, count))
            self.count, first, rows = self.count + 1, (first + count) % self.replay.rows, rows - count
        self.written_to = first
        # the oldest file goes once the newer ones hold a whole ring: all its rows are overwritten
        while sum(chunk[2] for chunk in list(self.chunks)[1:]) >= self.replay.rows:
            path = self.chunks.popleft()[0]
            if path in self.named:
                self.retired.append(path)  # the last checkpoint still needs it
            else:
                self.thread.submit(os.remove, os.path.join(self.run_dir, path))  # (deleting tens of MB takes a while)

    def save(self):
        """At a checkpoint: the rows since the last file, then the state it saves (the files' names)."""
        self.write(in_background=False)  # (after the file in the background: write waits for it first)
        sync_dir(os.path.join(self.run_dir, "replay"))
        return {"pos": int(self.replay.pos), "full": bool(self.replay.full), "chunks": list(self.chunks)}

    def files(self):
        return [(path, os.path.getsize(os.path.join(self.run_dir, path))) for path, _, _ in self.chunks]

    def saved(self, state):
        """The checkpoint that names `state`'s files is on disk: the files only the previous one named go."""
        for path in self.retired:
            self.thread.submit(os.remove, os.path.join(self.run_dir, path))
        self.retired, self.named = [], {chunk[0] for chunk in state["chunks"]} if state else set()

    def load(self, state):
        """--resume: the ring as the checkpoint saw it, from the files it names (and nothing else)."""
        os.makedirs(os.path.join(self.run_dir, "replay"), exist_ok=True)
        for path, first, count in state["chunks"]:
            with open(os.path.join(self.run_dir, path), "rb") as f:
                for field in self.fields():
                    field[first : first + count] = np.load(f, allow_pickle=False)
        self.replay.pos, self.replay.full = state["pos"], state["full"]
        self.written_to, self.chunks = state["pos"], collections.deque(tuple(chunk) for chunk in state["chunks"])
        self.named = {chunk[0] for chunk in self.chunks}
        self.count = 1 + max((int(os.path.basename(path)[:-4]) for path in self.named), default=-1)
        for name in os.listdir(os.path.join(self.run_dir, "replay")):  # written after the checkpoint, or cut by the kill
            if f"replay/{name}" not in self.named:
                os.remove(os.path.join(self.run_dir, "replay", name))

    def delete(self):
        self.thread.shutdown()  # its writing and deleting done
        shutil.rmtree(os.path.join(self.run_dir, "replay"), ignore_errors=True)


def read_checkpoint(run_dir):
    """RUN_DIR's checkpoint, read with weights_only (tensors, numbers, strings and containers: nothing in
    a run directory can run code), or None where it is truncated or not a checkpoint at all."""
    try:
        checkpoint = torch.load(os.path.join(run_dir, CHECKPOINT), map_location="cpu", weights_only=True)
    except Exception:
        return None
    keys = {"script", "args", "global_step", "finished", "resumable", "files"}
    return checkpoint if isinstance(checkpoint, dict) and keys <= checkpoint.keys() else None


def resumed_args(p, argv, run_dir):
    """--resume: the flags the run's checkpoint saved, but the CHANGEABLE ones given beside --resume.
    Any other flag given with a new value is refused, as is a run directory this script cannot go on
    with; either way nothing is written."""
    path = os.path.join(run_dir, CHECKPOINT)
    if not os.path.isdir(run_dir):
        p.error(f"argument --resume: {run_dir} is not a directory")
    for folder in (run_dir, os.path.join(run_dir, "replay")):  # its logs, checkpoints and replay's files go there
        if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
            p.error(f"argument --resume: cannot write in {folder}")
    if not hold_run_dir(run_dir):
        p.error(f"argument --resume: {run_dir} is in use: another process is running it")
    if not os.path.isfile(path):
        p.error(
            f"argument --resume: {run_dir} has no {CHECKPOINT} (a run writes one every --save-every steps and when stopped)"
        )
    if (checkpoint := read_checkpoint(run_dir)) is None:
        p.error(f"argument --resume: {path} is truncated or is not a checkpoint")
    if checkpoint["script"] != SCRIPT:
        other = checkpoint["script"]
        p.error(f"argument --resume: {run_dir} is a run of {other}: resume it with python {other} --resume {run_dir}")
    saved = checkpoint["args"]
    args = p.parse_args(argv, argparse.Namespace(**saved))  # flags not given keep the saved values
    for name, value in vars(args).items():
        if name not in CHANGEABLE and name != "resume" and value != saved.get(name, value):
            flags = ", ".join(f"--{n.replace('_', '-')}" for n in CHANGEABLE)
            p.error(
                f"argument --{name.replace('_', '-')}: a resumed run keeps its own ({saved[name]}); only {flags} can change"
            )
    for name, size in checkpoint["files"]:
        if not os.path.isfile(os.path.join(run_dir, name)) or os.path.getsize(os.path.join(run_dir, name)) != size:
            p.error(f"argument --resume: {os.path.join(run_dir, name)}, which the checkpoint needs, is missing or truncated")
    step = checkpoint["global_step"]
    if not checkpoint["resumable"]:
        why = f"{run_dir} has finished ({step:,} steps) and kept no checkpoint (--keep-checkpoint keeps one)"
        if os.path.isdir(replay_dir := os.path.join(run_dir, "replay")):  # a kill as the run ended stopped its deletion
            why += f"; its replay files are of no more use: rm -r {shlex.quote(replay_dir)}"
        p.error(f"argument --resume: {why}")
    if step >= args.total_timesteps:
        p.error(f"argument --resume: {run_dir} has run its {step:,} steps: to go on, add a larger --total-timesteps")
    return args


def end_run(network, args, run_dir, writer, device, checkpoints, global_step, updates):
    """After the main loop: a checkpoint; unless stopped, --save-model's evaluation; exit 128 + the signal if stopped."""
    if stop_signals:  # Ctrl-C, kill or a closed terminal: a checkpoint, flushed logs, how to go on; no evaluation games
        print(f"stopped by {signal.Signals(stop_signals[0]).name} at step {global_step:,}", flush=True)
        checkpoints.save(global_step, updates)
        print(f"checkpoint saved; to go on: python {SCRIPT} --resume {shlex.quote(run_dir)}", flush=True)
    else:
        checkpoints.finish(global_step, updates)
    if args.save_model:
        print(
            f"model saved to {checkpoints.model_path} (watch it: python {SCRIPT} --eval-model {checkpoints.model_path})",
            flush=True,
        )
    if args.save_model and not stop_signals:
        evaluate_and_log(network, args, run_dir, writer, device, checkpoints.model_path)
    close_logs(writer, args)
    if stop_signals:
        sys.exit(128 + stop_signals[0])  # 130 after Ctrl-C, 143 after kill, 129 after a closed terminal
    return run_dir


def model_error(path, env_id, actions_count):
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
    if "state_dict" not in model:  # the checkpoint.pt a finished run leaves: only what tells --resume that it ended
        return f"{path} is a finished run's checkpoint and holds no network: watch the model --save-model wrote beside it"
    if rom_name(model["env_id"]) != rom_name(env_id):
        return f"{path} plays {model['env_id']}, not {env_id}: add --env-id {model['env_id']}"
    if model["actions_count"] != actions_count:
        return (
            f"{path} plays {model['env_id']} with {model['actions_count']} actions, {env_id} has {actions_count}: "
            f"add --env-id {model['env_id']}"
        )
    return None


def watch_saved_model(network_class, args, run_dir, writer, device):
    """--eval-model: load a model this script saved (model_error has checked it) and evaluate it."""
    model = torch.load(args.eval_model, map_location=device, weights_only=True)
    network = network_class(model["actions_count"]).to(device)
    network.load_state_dict(model["state_dict"])
    print(f"{run_dir}: {args.eval_episodes} games of {args.env_id} by {args.eval_model} on {device}", flush=True)
    evaluate_and_log(network, args, run_dir, writer, device)
    close_logs(writer, args)
    return run_dir


def evaluate_and_log(network, args, run_dir, writer, device, model_path=""):
    """Play --eval-episodes whole games (recorded with --capture-video); print and log their scores, as
    eval/episodic_return, or eval_2/... for the model NAME_2.pt of a finished run that went on."""
    writer.flush()
    for signum in STOP_SIGNALS:  # only games are left, nothing to save: Ctrl-C, kill or a closed terminal
        if signal.getsignal(signum) is on_stop_signal:  # ends them at once, as by default (nohup's SIGHUP stays ignored)
            signal.signal(signum, signal.SIG_DFL)
            if signum in stop_signals:  # one that came before, as the model loaded: it ends them now
                signal.raise_signal(signum)
    video_dir = os.path.join(run_dir, "videos") if args.capture_video else None
    evaluations = 1
    while video_dir and os.path.exists(video_dir):  # a finished run resumed: the earlier evaluation's videos stay
        evaluations += 1
        video_dir = os.path.join(run_dir, f"videos_{evaluations}")
    if video_dir:
        os.makedirs(video_dir)
    returns = evaluate(network, args.env_id, args.seed + 100, args.eval_episodes, args.eval_epsilon, device, video_dir)
    suffix = os.path.basename(model_path)[len(args.exp_name) : -len(".pt")]  # "", or "_2" after NAME_2.pt
    tag = f"eval{suffix}/episodic_return" if suffix else "eval/episodic_return"
    for i, episodic_return in enumerate(returns):  # (at the game's number, as CleanRL logs them)
        writer.add_scalar(tag, episodic_return, i)
    if video_dir and args.track:  # the videos of the screen into the W&B run too, each with its game's score
        import wandb

        videos = [
            wandb.Video(os.path.join(video_dir, f"eval_game_{i}.mp4"), caption=f"return {r:g}") for i, r in enumerate(returns)
        ]
        wandb.log({f"videos/eval_game_{i}": video for i, video in enumerate(videos)})
    print(
        f"evaluation over {len(returns)} games: mean return {np.mean(returns):.1f} "
        f"(scores {', '.join(f'{r:g}' for r in returns)})",
        flush=True,
    )


def evaluate(q_network, env_id, seed, episodes, epsilon, device, video_dir=None):
    """Play whole games with a small epsilon, set up as in training; return their real scores."""
    games, rng = evaluation_games(env_id, seed, video_dir), np.random.default_rng(seed)
    returns = []
    while len(returns) < episodes:
        games.send(epsilon_greedy(q_network, games.obs, epsilon, games.action_space.n, rng, device))
        _, _, finished = games.recv()
        returns += [score for score, _ in finished]
    games.envs.close()
    return returns


def evaluation_games(env_id, seed, video_dir):
    """One game at a time, set up as in training; with --capture-video (a video_dir), filmed as it is played."""
    games = AtariGames(env_id, 1, seed)
    if video_dir is not None:
        games.envs = VideoRecorder(games.envs, env_id, seed, video_dir, games.obs[0, -1])
    return games


class VideoRecorder:
    """--capture-video: stands in for the evaluation's emulator and films its games. Beside it runs a
    second emulator, with make_env's game, seed and settings but the real screen (210x160, in colour,
    the frame itself rather than a max over two), given the same actions. AtariVectorEnv is
    deterministic given its seed without sticky actions, so both play the same game, which every step
    checks. Each game, as it ends, is videos/eval_game_N.mp4 (the screen) and eval_game_N_agent.mp4
    (the agent's 84x84 view, 4x), at 15 frames a second: the emulator's 60, one in four (frame skip)."""

    def __init__(self, envs, env_id, seed, video_dir, first_view):
        self.envs, self.video_dir, self.games, self.writers = envs, video_dir, 0, None
        self.screen = AtariVectorEnv(
            rom_name(env_id),
            1,
            noop_max=30,
            frameskip=4,
            maxpool=False,
            use_fire_reset=False,
            stack_num=1,
            img_height=210,
            img_width=160,
            grayscale=False,
            repeat_action_probability=0.0,
            max_num_frames_per_episode=108_000,
            episodic_life=False,
            life_loss_info=False,
            reward_clipping=False,
        )
        self.record(self.screen.reset(seed=seed)[0][0, -1], first_view)

    def record(self, screen, view):
        if self.writers is None:  # a game's first frame; frames go to ffmpeg as they come, none kept
            import imageio

            names = [f"eval_game_{self.games}.mp4", f"eval_game_{self.games}_agent.mp4"]
            # macro_block_size=1: the screen's own 210x160, not resized to multiples of 16
            self.writers = [imageio.get_writer(os.path.join(self.video_dir, n), fps=15, macro_block_size=1) for n in names]
        self.writers[0].append_data(screen)
        self.writers[1].append_data(np.kron(view, np.ones((4, 4), dtype=np.uint8)))  # 84x84 -> 336x336

    def send(self, actions):
        self.envs.send(actions)
        self.screen.send(actions)

    def recv(self):
        step = frames, rewards, terminations, truncations, infos = self.envs.recv()
        screens, screen_rewards, screen_terminations, screen_truncations, screen_infos = self.screen.recv()
        same = [
            np.array_equal(rewards, screen_rewards),
            np.array_equal(terminations, screen_terminations),
            np.array_equal(truncations, screen_truncations),
            *(np.array_equal(infos[key], screen_infos[key]) for key in ("lives", "episode_frame_number")),
        ]
        if not all(same):
            raise RuntimeError(f"--capture-video: the filmed game is not the scored one (game {self.games})")
        self.record(screens[0, -1], frames[0, -1])
        if terminations[0] or truncations[0]:
            for writer in self.writers:
                writer.close()
            self.games, self.writers = self.games + 1, None
        return step

    def close(self):
        self.envs.close()
        self.screen.close()


if __name__ == "__main__":
    for signum in STOP_SIGNALS:  # run as a script: Ctrl-C, kill or a closed terminal ends the run cleanly
        if signal.getsignal(signum) is not signal.SIG_IGN or signum in (signal.SIGINT, signal.SIGTERM):  # nohup's stays
            signal.signal(signum, on_stop_signal)
    main()
