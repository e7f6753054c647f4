"""PQN on Atari: Q-learning from many environments' rollouts, with no replay memory and no target network.

Why it exists: the seed notes ask whether parallel environments help DQN; here they barely do, DQN's
learner being the bottleneck. PQN (Gallici et al., "Simplifying Deep Temporal Difference Learning", 2025)
makes Q-learning use them as PPO does: many environments give each update fresh, varied data (the
replay's job), and LayerNorm keeps targets chasing the network's own estimates stable (the target network's).

When the rollout holds `--rollout-length` steps of every environment, one pass backwards over it
turns it into Q(lambda) targets (`--q-lambda`), r + gamma * max_a Q(s', a) mixed with the returns that followed,
then `--update-epochs` passes over it in `--num-minibatches` shuffled minibatches make the gradient
steps, with a learning rate annealed linearly to 0 (`--anneal-lr`), and the rollout is dropped.
Acting is epsilon-greedy (1 to 0.01 over the first 10% of the run); the optimizer is RAdam.
The defaults are CleanRL's pqn_atari_envpool; its published Breakout after 10M steps: 384.9 +- 12.4 (its dqn_atari: 366.9).

The games are `--envs-count` Atari games stepped together by ale-py's AtariVectorEnv, in the
standard DeepMind setup that `AtariGames` keeps: learning sees rewards clipped to their sign and a
lost life as an episode's end, while `charts/episodic_return` is the whole game's real score. The
steps it plays for the agent (a reset, a launch, FIRE after a lost life) stop that backward pass
and add no loss.

Diff it against: ppo_atari.py (Q(lambda) in place of GAE, the TD loss in place of the clipped objective).

    python pqn_atari.py --env-id BreakoutNoFrameskip-v4
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

import numpy as np
import torch
import torch.nn as nn
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
        help="save the network into the run directory, then evaluate it",
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
        help="keep the last checkpoint whole at the run's end, so that --resume with a larger --total-timesteps can go on",
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
    p.add_argument("--learning-rate", type=positive_float, default=2.5e-4, help="the optimizer's learning rate")
    p.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction, default=True, help="anneal the learning rate to 0")
    p.add_argument("--envs-count", type=positive_int, default=8, help="environments stepped together")
    p.add_argument("--rollout-length", type=positive_int, default=128, help="steps of each game per rollout")
    p.add_argument("--gamma", type=probability, default=0.99, help="discount factor")
    p.add_argument("--q-lambda", type=probability, default=0.65, help="Q(lambda)'s lambda (0: DQN's target, 1: Monte Carlo)")
    p.add_argument("--num-minibatches", type=positive_int, default=4, help="minibatches a rollout is split into")
    p.add_argument("--update-epochs", type=positive_int, default=4, help="passes over each rollout")
    p.add_argument("--max-grad-norm", type=positive_float, default=10.0, help="gradients are clipped to this norm")
    p.add_argument("--start-e", type=probability, default=1.0, help="epsilon at the start of the run")
    p.add_argument("--end-e", type=probability, default=0.01, help="epsilon at the end of the exploration")
    p.add_argument("--exploration-fraction", type=probability, default=0.10, help="share of the run over which epsilon falls")
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
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # Orthogonal weights keep the activations' scale through the layers at the start.
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """The Nature CNN with LayerNorm after each hidden layer (what keeps its own targets stable): Q(s, a) of each action."""

    def __init__(self, actions_count):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(STACK, 32, 8, stride=4)),
            nn.LayerNorm([32, 20, 20]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, 9, 9]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, 7, 7]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(3136, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
            layer_init(nn.Linear(512, actions_count)),
        )

    def forward(self, frames):
        return self.network(frames / 255.0)  # uint8 in, float32 out: one conversion, no extra copy


def td_target(rewards, dones, next_values, gamma):
    """One-step TD target; no bootstrap past a terminal (a lost life or the game's end)."""
    return rewards + gamma * next_values * (1.0 - dones)


def q_lambda_returns(rewards, values, dones, agent_acted, next_values, gamma, q_lambda):
    """Q(lambda) targets of a rollout: G_t = r_t + gamma * ((1 - lambda) * V(s_t+1) + lambda * G_t+1).

    V(s) here is max_a Q(s, a), the greedy policy's value. With lambda = 0 the target is DQN's one-step TD target;
    towards 1 it leans less on the network, more on the rewards that followed. This is Peng's Q(lambda), as PQN's:
    the returns run on through exploratory actions too.

    rewards, values, dones and agent_acted are (steps, envs). dones[t] is 1 when step t ended the
    episode for learning: nothing after it flows back into it, nor does a bootstrap. agent_acted[t] is
    False for a step played for the agent: it gets 0 (it is never learnt from), and the step before
    bootstraps from V of the observation it led to alone (after a time-limit truncation, the game's
    last observation). next_values is V of the observation after the last step."""
    returns = torch.zeros_like(rewards)
    following = next_values  # G_t+1; past the rollout's end, the network's estimate
    for t in reversed(range(len(rewards))):
        next_step_values = next_values if t == len(rewards) - 1 else values[t + 1]
        mixed = (1.0 - q_lambda) * next_step_values + q_lambda * following
        returns[t] = td_target(rewards[t], dones[t], mixed, gamma) * agent_acted[t]
        following = torch.where(agent_acted[t], returns[t], values[t])
    return returns


def linear_schedule(start_e, end_e, duration, t):
    """Epsilon falls linearly from start_e to end_e over `duration` steps, then stays there."""
    slope = (end_e - start_e) / max(duration, 1)
    return max(slope * t + start_e, end_e)


def epsilon_greedy(q_values, epsilon, rng):
    """For each row of q_values (one an environment), a random action with probability epsilon, else the greedy one."""
    explore = rng.random(len(q_values)) < epsilon
    random_actions = rng.integers(0, q_values.shape[1], size=len(q_values))
    return torch.from_numpy(np.where(explore, random_actions, q_values.argmax(1).cpu().numpy()))


# ---------------------------------------------------------------- main
def main(argv=None):
    args = parse_args(argv)
    run_dir, writer, checkpoint = open_run(args)  # PLUMBING: a new run directory, or --resume's with its checkpoint

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(args.seed)  # exploration
    if args.eval_model is not None:  # PLUMBING: watch a saved agent play, no training
        return watch_saved_model(QNetwork, args, run_dir, writer, device)

    games = AtariGames(args.env_id, args.envs_count, args.seed)
    actions_count = games.action_space.n
    # channels_last: the memory layout oneDNN's CPU convolutions run fastest on
    agent = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.RAdam(agent.parameters(), lr=args.learning_rate)
    # The rollout: one row per step, kept whole because the update goes over it several times.
    rollout_shape = (args.rollout_length, games.envs.num_envs)
    rollout_obs = torch.zeros(rollout_shape + (STACK, *FRAME_SHAPE), dtype=torch.uint8, device=device)
    rollout_actions = torch.zeros(rollout_shape, dtype=torch.long, device=device)
    rollout_values, rollout_rewards, rollout_dones = torch.zeros((3, *rollout_shape), device=device)
    rollout_agent_acted = torch.zeros(rollout_shape, dtype=torch.bool, device=device)
    progress = Progress(writer, args.total_timesteps)
    checkpoints = Checkpoints(args, run_dir, actions_count, progress, agent, optimizer, rng=rng)
    global_step, updates = checkpoints.restore(checkpoint)  # 0, 0; or --resume's, with all above as saved but the games
    print(f"{run_dir}: {args.env_id}, {args.total_timesteps:,} steps on {device}", flush=True)

    while global_step < args.total_timesteps and not stop_signals:  # Ctrl-C or kill: stop here
        # ALGO LOGIC: phase 1, the rollout: rollout_length steps of every environment, kept for the update
        done_fraction = global_step / args.total_timesteps  # of the run, before this rollout: the learning rate's anneal
        for step in range(args.rollout_length):
            obs = torch.from_numpy(games.obs).to(device)
            epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
            with torch.no_grad():
                q_values = agent(obs)
            actions = epsilon_greedy(q_values, epsilon, rng)
            agent_acted = games.send(actions.cpu().numpy())  # False where the step is played for the agent: no transition
            global_step += np.count_nonzero(agent_acted)  # the agent's steps, as CleanRL's DQN and PPO count them
            rewards, dones, finished = games.recv()
            rollout_obs[step] = obs
            rollout_actions[step] = actions
            rollout_values[step] = q_values.max(1).values
            rollout_rewards[step] = torch.from_numpy(rewards)
            rollout_dones[step] = torch.from_numpy(dones)
            rollout_agent_acted[step] = torch.from_numpy(agent_acted)
            for score, length in finished:  # PLUMBING: the whole game's real score, as CleanRL logs it; progress
                writer.add_scalar("charts/episodic_return", score, global_step)
                writer.add_scalar("charts/episodic_length", length, global_step)
                progress.returns.append(score)
                # CleanRL's PQN also charts the mean of the last 20 games: its curves overlay ours
                writer.add_scalar("charts/avg_episodic_return", np.mean(list(progress.returns)[-20:]), global_step)
            progress.show(global_step, updates, {"charts/epsilon": epsilon})
            if global_step >= args.total_timesteps or stop_signals:
                break
        if step < args.rollout_length - 1:  # cut short by the run's end or a stop: not learnt from
            break

        # ALGO LOGIC: phase 2, the update: update_epochs passes over the rollout in minibatch steps
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - done_fraction)
        with torch.no_grad():
            next_values = agent(torch.from_numpy(games.obs).to(device)).max(1).values
        returns = q_lambda_returns(
            rollout_rewards, rollout_values, rollout_dones, rollout_agent_acted, next_values, args.gamma, args.q_lambda
        )
        # (steps, envs) flattened into one batch, from which only the agent's steps are drawn
        b_obs, b_actions, b_returns = rollout_obs.flatten(0, 1), rollout_actions.flatten(), returns.flatten()
        agent_steps = torch.nonzero(rollout_agent_acted.flatten()).squeeze(1)
        for epoch in range(args.update_epochs):
            for mb in torch.tensor_split(agent_steps[torch.randperm(len(agent_steps))], args.num_minibatches):
                # index_select copies whole observations, several times faster than b_obs[mb]
                q_taken = agent(b_obs.index_select(0, mb)).gather(1, b_actions[mb, None]).squeeze(1)
                loss = nn.functional.mse_loss(q_taken, b_returns[mb])
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                updates += 1
                if stop_signals:  # PLUMBING: Ctrl-C or kill: no more minibatch steps; a checkpoint of those made
                    break
            if stop_signals:
                break
        stop_if_diverged(loss, global_step, run_dir, writer, args)  # PLUMBING: nan never comes back: stop now
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/td_loss", loss.item(), global_step)
        writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)

        checkpoints.save_every(global_step, updates)  # PLUMBING: once a rollout, after its update
    games.envs.close()
    return end_run(agent, args, run_dir, writer, device, checkpoints, global_step, updates)


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


EMULATOR_BYTES = 3 * 2**19  # one game's emulator and frames: 1.4-1.6 MiB measured (8 to 256 games)


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
    needed, free = args.envs_count * EMULATOR_BYTES, available_memory_bytes()
    if free is not None and needed > free and args.eval_model is None:
        p.error(
            f"argument --envs-count: {args.envs_count:,} games "
            f"need {needed / 2**30:.1f} GiB but only {free / 2**30:.1f} GiB of memory is free"
        )
    needed = args.rollout_length * args.envs_count * STACK * FRAME_SHAPE[0] * FRAME_SHAPE[1]
    if free is not None and needed > free and args.eval_model is None:
        p.error(
            f"argument --rollout-length: {args.rollout_length:,} steps of {args.envs_count:,} games "
            f"need {needed / 2**30:.1f} GiB but only {free / 2**30:.1f} GiB of memory is free"
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
    if args.rollout_length < 4:
        p.error("argument --rollout-length: must be at least 4 (a game starts with 3 steps played for the agent)")
    # Usually at most 3 steps in a row are played for the agent (a reset, FIRE, 2; more where a life or the game
    # ends during them): so >= envs * (length // 4) transitions, and every minibatch gets some
    if args.num_minibatches > args.envs_count * (args.rollout_length // 4):
        p.error(
            f"argument --num-minibatches: must be at most --envs-count * (--rollout-length // 4) = "
            f"{args.envs_count * (args.rollout_length // 4)}"
        )
    envs = make_env(args.env_id, 1)
    envs.close()
    if not isinstance(envs.single_action_space, Discrete):
        p.error(f"argument --env-id: this script needs a discrete action space, {args.env_id} has {envs.single_action_space}")
    if args.eval_model is not None and (error := model_error(args.eval_model, args.env_id, envs.single_action_space.n)):
        p.error(f"argument --eval-model: {error}")


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


def evaluate(agent, env_id, seed, episodes, epsilon, device, video_dir=None):
    """Play whole games with the policy (a random action with probability epsilon); return their real scores."""
    games, rng = evaluation_games(env_id, seed, video_dir), np.random.default_rng(seed)
    returns = []
    while len(returns) < episodes:
        actions = np.zeros(1, dtype=np.int64)  # where the step is played for the agent: no choice to make
        if games.agent_acts[0]:
            with torch.no_grad():
                actions = epsilon_greedy(agent(torch.from_numpy(games.obs).to(device)), epsilon, rng).numpy()
        games.send(actions)
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
