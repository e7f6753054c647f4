"""A2C with batched updates: advantage actor-critic on Atari, one gradient step per rollout.

What it shows: the actor-critic loop, step by step. Each step the actor samples an action in
every environment, the environments step, and every transition gives two losses: the actor's
-log pi(a|s) * A, where the advantage A is the TD error r + gamma * V(s') - V(s) taken as a
constant, and the critic's squared TD error (no bootstrap past a terminal). The losses go into
batches; when the batches hold `--rollout-length` steps, their means make one gradient step and
the batches start again empty. As in A2C practice, an entropy bonus (`--ent-coef`) keeps the
policy from settling too early and gradient-norm clipping (`--max-grad-norm`) keeps one bad
batch from wrecking the network.

Actor and critic share one Nature CNN with two heads (action logits and V(s)) instead of being
two networks. On a CPU the CNN is where the time goes, and one trunk halves it; the critic's
training also gives the actor better features from the pixels. With shared weights, the
actor's step and the critic's step become one step on the sum of their losses, the critic's
weighted by `--vf-coef` (for two separate networks, one Adam over both would move each exactly
as two Adams do).

The environments are `--envs-count` Atari games stepped together by ale-py's AtariVectorEnv,
with the preprocessing of dqn_atari.py (done in C++). A lost life is a terminal for learning
and rewards are clipped to their sign for learning, but `charts/episodic_return` is the whole
game's real score. As in the standard setup, each game starts with a FIRE step and an action-2
step played for the agent, the step after a lost life presses FIRE for it (games wait for FIRE),
and every episode, a game's or a life's, starts with a stack of four copies of its first frame.
Those steps, like the one that resets a finished game, are no transitions: they add no loss.

Diff it against: dqn_atari.py (learning values from a replay memory instead of a policy from
the latest steps) and ppo_atari.py (what PPO adds: GAE, the clipped objective, several epochs
of minibatches over each rollout).

    python a2c_batched.py --env-id BreakoutNoFrameskip-v4
    tensorboard --logdir runs
"""

import argparse
import collections
import os
import random
import re
import signal
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
from ale_py import Action, roms
from ale_py.vector_env import AtariVectorEnv
from gymnasium.spaces import Discrete
from torch.distributions import Categorical
from torch.utils.tensorboard import SummaryWriter

FRAME_SHAPE = (84, 84)
STACK = 4


# ---------------------------------------------------------------- arguments (plumbing)
def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def non_negative_float(text):
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--exp-name", default=os.path.basename(__file__)[: -len(".py")], help="name of this experiment")
    p.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    p.add_argument("--torch-deterministic", action=argparse.BooleanOptionalAction, default=True,
                   help="make cudnn deterministic")
    p.add_argument("--cuda", action=argparse.BooleanOptionalAction, default=True, help="use the GPU when there is one")
    p.add_argument("--save-model", action=argparse.BooleanOptionalAction, default=False,
                   help="save the network into the run directory, then evaluate it")
    p.add_argument("--capture-video", action=argparse.BooleanOptionalAction, default=False,
                   help="record the evaluation games as mp4 under videos/ (needs imageio and imageio-ffmpeg)")
    p.add_argument("--save-every", type=positive_int, default=100_000,
                   help="with --save-model, also save the model every this many environment steps, over the last save")
    p.add_argument("--eval-model", metavar="PATH",
                   help="no training: play --eval-episodes games with a model this script saved, log their scores")
    p.add_argument("--eval-episodes", type=positive_int, default=10, help="games played by the evaluation")
    p.add_argument("--eval-epsilon", type=probability, default=0.05,
                   help="chance of a random action instead of the policy's sample in the evaluation games")
    # Algorithm
    p.add_argument("--env-id", default="BreakoutNoFrameskip-v4", help="any ALE game, e.g. PongNoFrameskip-v4")
    p.add_argument("--total-timesteps", type=positive_int, default=10_000_000,
                   help="environment steps of the run, summed over the environments")
    p.add_argument("--learning-rate", type=positive_float, default=2.5e-4, help="Adam's learning rate")
    p.add_argument("--envs-count", type=positive_int, default=16, help="environments stepped together")
    p.add_argument("--rollout-length", type=positive_int, default=10,
                   help="steps whose losses make one gradient step")
    p.add_argument("--gamma", type=probability, default=0.99, help="discount factor")
    p.add_argument("--ent-coef", type=non_negative_float, default=0.01, help="weight of the entropy bonus")
    p.add_argument("--vf-coef", type=non_negative_float, default=0.5, help="weight of the critic's loss")
    p.add_argument("--max-grad-norm", type=positive_float, default=0.5, help="gradients are clipped to this norm")
    args = p.parse_args(argv)

    # Checks that need more than one flag, done before any long work.
    with warnings.catch_warnings():  # ale-py warns about an unknown name; the error below says more
        warnings.simplefilter("ignore")
        known_game = roms.get_rom_path(rom_name(args.env_id)) is not None
    if not known_game:
        p.error(f"argument --env-id: unknown Atari game '{args.env_id}' (ale-py knows e.g. BreakoutNoFrameskip-v4, "
                f"PongNoFrameskip-v4; full list: python -c 'import ale_py.roms as r; print(r.get_all_rom_ids())')")
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
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # Orthogonal weights keep the activations' scale through the layers at the start.
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN trunk with two heads: the actor's action logits and the critic's V(s)."""

    def __init__(self, actions_count):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(STACK, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(3136, 512)), nn.ReLU(),
        )
        # A small actor head starts the policy near uniform, so every action gets tried.
        self.actor = layer_init(nn.Linear(512, actions_count), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)

    def forward(self, frames):
        hidden = self.network(frames / 255.0)  # uint8 in, float32 out: one conversion, no extra copy
        return self.actor(hidden), self.critic(hidden).squeeze(1)


def td_target(rewards, dones, next_values, gamma):
    """One-step TD target; no bootstrap past a terminal (a lost life or the game's end)."""
    return rewards + gamma * next_values * (1.0 - dones)


# ---------------------------------------------------------------- evaluation (plumbing)
def evaluate(agent, env_id, seed, episodes, epsilon, device, video_dir=None):
    """Play whole games with the policy (a random action with probability epsilon); return their real scores."""
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
                logits, _ = agent(torch.from_numpy(obs).to(device))
            actions = Categorical(logits=logits).sample().cpu().numpy()
        frames, rewards, terminations, truncations, infos = envs.step(actions)
        obs = push_frames(obs, frames, restarts)
        score += float(rewards[0])
        if video_dir is not None:
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
    if args.eval_model is not None:  # watch a saved agent play: no training
        model = torch.load(args.eval_model, map_location=device, weights_only=True)
        agent = Agent(model["actions_count"]).to(device)
        agent.load_state_dict(model["state_dict"])
        print(f"{run_dir}: {args.eval_episodes} games of {args.env_id} by {args.eval_model} on {device}", flush=True)
        evaluate_and_log(agent, args, run_dir, writer, device)
        writer.close()
        return run_dir

    envs = make_env(args.env_id, args.envs_count, args.seed)
    if not isinstance(envs.single_action_space, Discrete):
        print(f"error: argument --env-id: this script needs a discrete action space, {args.env_id} has "
              f"{envs.single_action_space}", file=sys.stderr)
        sys.exit(2)
    actions_count = envs.single_action_space.n
    # Channels-last weights make oneDNN's CPU convolutions about 20% faster (the frames can stay
    # as they come), and the fused Adam does its step in one pass instead of a loop of small ops.
    agent = Agent(actions_count).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

    frames, infos = envs.reset(seed=args.seed)
    obs = frames.repeat(STACK, axis=1)  # an episode's first stack: four copies of its first frame
    lives, relaunch, launch = infos["lives"], relaunch_action(envs), launch_steps(envs)
    # Steps that are not the agent's, and no transitions: each game's first `launch` steps (FIRE, then
    # action 2), the step after a lost life (it relaunches the game) and after a game's end (the reset)
    launch_left = np.full(envs.num_envs, launch)  # the launch steps each game has still to play
    restarts, resets = launch_left > 0, np.zeros(envs.num_envs, dtype=bool)
    scores = np.zeros(envs.num_envs)  # the real, unclipped score of the game being played
    lengths = np.zeros(envs.num_envs, dtype=np.int64)
    recent_returns = collections.deque(maxlen=100)
    actor_losses, critic_losses, entropies = [], [], []  # the batches: one tensor per step
    global_step, updates = 0, 0
    start_time = last_print = time.time()
    recent_prints = collections.deque([(start_time, 0)], maxlen=13)  # (time, step) of about the last minute's prints
    model_path, saved_step = os.path.join(run_dir, f"{args.exp_name}.pt"), 0
    print(f"{run_dir}: {args.env_id}, {args.total_timesteps:,} steps on {device}", flush=True)

    logits, values = agent(torch.from_numpy(obs).to(device))
    while global_step < args.total_timesteps and not stop_signals:  # Ctrl-C or kill: stop here
        # ALGO LOGIC: the actor samples one action per environment
        dist = Categorical(logits=logits)
        actions = dist.sample()
        # not the agent's step: FIRE after a lost life (a reset ignores it), FIRE then 2 at a game's start
        played = np.where(restarts, np.where(launch_left == 1, 2, relaunch), actions.cpu().numpy())
        frames, rewards, terminations, truncations, infos = envs.step(played)
        global_step += np.count_nonzero(~restarts)  # the agent's steps: as in CleanRL, a relaunch or reset is not one
        next_obs = push_frames(obs, frames, restarts)

        # A lost life is a terminal for learning; a time-limit truncation is not (we bootstrap).
        life_lost = infos["lives"] < lives
        dones = terminations | life_lost
        valid = ~restarts  # False for the step that resets or relaunches the game: not a transition

        # One forward of s' gives V(s') for this step's target and pi(.|s'), V(s') for the next
        # step: the parameters only move at the end of a rollout, so a second forward would
        # compute the same numbers.
        next_logits, next_values = agent(torch.from_numpy(next_obs).to(device))

        # ALGO LOGIC: this step's actor and critic losses, appended to the batches
        rewards_t = torch.from_numpy(np.sign(rewards)).to(device).float()
        dones_t = torch.from_numpy(dones).to(device).float()
        target = td_target(rewards_t, dones_t, next_values.detach(), args.gamma)  # a fixed target: semi-gradient TD
        td_errors = target - values
        actor_loss = -dist.log_prob(actions) * td_errors.detach()  # the advantage only scales the actor's gradient
        critic_loss = td_errors ** 2
        if valid.any():
            valid_t = torch.from_numpy(valid).to(device)
            actor_losses.append(actor_loss[valid_t])
            critic_losses.append(critic_loss[valid_t])
            entropies.append(dist.entropy()[valid_t])

        # ALGO LOGIC: a full batch makes one gradient step, then the batches start again empty
        if len(actor_losses) >= args.rollout_length:
            actor_loss_batch = torch.cat(actor_losses).mean()
            critic_loss_batch = torch.cat(critic_losses).mean()
            entropy_batch = torch.cat(entropies).mean()
            loss = actor_loss_batch + args.vf_coef * critic_loss_batch - args.ent_coef * entropy_batch
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            actor_losses, critic_losses, entropies = [], [], []
            updates += 1
            writer.add_scalar("losses/actor_loss", actor_loss_batch.item(), global_step)
            writer.add_scalar("losses/critic_loss", critic_loss_batch.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_batch.item(), global_step)
            # The parameters have moved: the next step's pi and V must come from the new ones.
            next_logits, next_values = agent(torch.from_numpy(next_obs).to(device))

        # Logging: the whole game's real score, as CleanRL logs it
        scores += rewards
        lengths += valid
        launch_left = np.where(resets, launch, np.maximum(launch_left - 1, 0))  # the step that reset a game: launch it
        resets = terminations | truncations  # the next step resets these games
        restarts, lives = life_lost | resets | (launch_left > 0), infos["lives"]
        for e in np.flatnonzero(terminations | truncations):
            writer.add_scalar("charts/episodic_return", scores[e], global_step)
            writer.add_scalar("charts/episodic_length", lengths[e], global_step)
            recent_returns.append(scores[e])
            scores[e], lengths[e] = 0.0, 0
        obs, logits, values = next_obs, next_logits, next_values

        if time.time() - last_print > 5 or global_step >= args.total_timesteps:
            last_print = time.time()
            sps = global_step / (last_print - start_time)
            writer.add_scalar("charts/SPS", sps, global_step)
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
            save_model(agent, model_path, args.env_id, actions_count)
            saved_step = global_step
    envs.close()

    if stop_signals:  # Ctrl-C or kill: save, flush and end here; the evaluation games are skipped
        print(f"stopped by {signal.Signals(stop_signals[0]).name} at step {global_step:,}", flush=True)
    if args.save_model:
        save_model(agent, model_path, args.env_id, actions_count)
        print(f"model saved to {model_path} (watch it: python {SCRIPT} --eval-model {model_path})", flush=True)
    if args.save_model and not stop_signals:
        evaluate_and_log(agent, args, run_dir, writer, device)
    writer.close()
    if stop_signals:
        sys.exit(128 + stop_signals[0])  # 130 after Ctrl-C, 143 after kill: what a shell reports for them
    return run_dir


if __name__ == "__main__":
    for signum in (signal.SIGINT, signal.SIGTERM):  # run as a script: Ctrl-C or kill ends the run cleanly
        signal.signal(signum, on_stop_signal)
    main()
