"""A2C with batched updates: advantage actor-critic on Atari, one gradient step per rollout.

What it shows: the actor-critic loop, step by step. Each step the actor samples an action in every
environment, the environments step, and every transition gives two losses: the actor's
-log pi(a|s) * A, where the advantage A is the TD error r + gamma * V(s') - V(s) taken as a constant,
and the critic's squared TD error (no bootstrap past a terminal). The losses go into batches; when
the batches hold `--rollout-length` steps, their means make one gradient step and the batches start
again empty. As in A2C practice, an entropy bonus (`--ent-coef`) keeps the policy from settling too
early and gradient-norm clipping (`--max-grad-norm`) keeps one bad batch from wrecking the network.

Actor and critic share one Nature CNN with two heads (action logits and V(s)): on a CPU the CNN is
where the time goes, and one trunk halves it; the critic's training also gives the actor features.
So their two steps are one step on the sum of their losses, the critic's weighted by `--vf-coef`.

The games are `--envs-count` Atari games stepped together by ale-py's AtariVectorEnv, in the
standard DeepMind setup that `AtariGames` keeps: learning sees rewards clipped to their sign and a
lost life as an episode's end, while `charts/episodic_return` is the whole game's real score. The
steps it plays for the agent (a reset, a launch, FIRE after a lost life) add no loss.

Diff it against: dqn_atari.py (learning values from a replay memory instead of a policy from the
latest steps) and ppo_atari.py (what PPO adds: GAE, the clipped objective, epochs of minibatches).

    python a2c_batched.py --env-id BreakoutNoFrameskip-v4
    tensorboard --logdir runs
"""

import os
import random

import numpy as np
import torch
import torch.nn as nn
from ale_py import Action
from ale_py.vector_env import AtariVectorEnv
from torch.distributions import Categorical

import plumbing  # the run's flags, directory, logs, checkpoints and --resume: nothing in it changes what is learnt
from plumbing import non_negative_float, positive_float, positive_int, probability

SCRIPT = os.path.basename(__file__)  # saved with the model and checkpoints: only this script's network loads them
FRAME_SHAPE = (84, 84)
STACK = 4
A2C_BYTES_PER_TRANSITION = 221 * 2**10  # what one game's step keeps for the backward pass (measured)


# ---------------------------------------------------------------- flags
def parse_args(argv=None):
    p = plumbing.new_parser(__doc__)
    p.add_argument("--env-id", default="BreakoutNoFrameskip-v4", help="any ALE game, e.g. pong (NoFrameskip-v4's setup)")
    p.add_argument("--total-timesteps", type=positive_int, default=10_000_000, help="steps summed over all environments")
    p.add_argument("--learning-rate", type=positive_float, default=2.5e-4, help="the optimizer's learning rate")
    p.add_argument("--envs-count", type=positive_int, default=16, help="environments stepped together")
    p.add_argument("--rollout-length", type=positive_int, default=10, help="steps whose losses make one gradient step")
    p.add_argument("--gamma", type=probability, default=0.99, help="discount factor")
    p.add_argument("--ent-coef", type=non_negative_float, default=0.01, help="weight of the entropy bonus")
    p.add_argument("--vf-coef", type=non_negative_float, default=0.5, help="weight of the critic's loss")
    p.add_argument("--max-grad-norm", type=positive_float, default=0.5, help="gradients are clipped to this norm")
    # --eval-epsilon 0: the policy samples its own actions, as CleanRL's PPO evaluation plays
    plumbing.add_run_flags(p, SCRIPT, eval_epsilon=0.0)  # --seed, --save-model, --resume...: the run's flags
    args = plumbing.parse_run(p, argv, SCRIPT)  # with --resume: the run's own flags, from its checkpoint
    check_args(p, args)
    return args


def check_args(p, args):
    """What a flag's type cannot check alone, before any long work: the rollout must fit and give minibatches."""
    plumbing.check_games_memory(p, args)  # the --envs-count emulators fit in memory
    needed = args.rollout_length * args.envs_count * A2C_BYTES_PER_TRANSITION
    what = f"the losses of {args.rollout_length:,} steps of {args.envs_count:,} games"
    plumbing.check_memory(p, args, "--rollout-length", needed, what)


# ---------------------------------------------------------------- the games (environment)
def make_env(env_id, envs_count):
    """AtariVectorEnv with the DeepMind preprocessing in C++: 0-29 no-op frames on reset, frame skip 4
    with a max over the last two frames, one 84x84 gray frame a step; raw rewards and real game ends.
    Its first reset seeds the games (AtariGames')."""
    return AtariVectorEnv(
        plumbing.rom_name(env_id),
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
      copies of its first frame.
    - Steps played for the agent, neither transitions nor counted: FIRE, then action 2 to start a
      game, FIRE after a lost life (Breakout waits for it; NOOP in a game without FIRE), and the step
      that resets a finished game, which ignores its action.
    - For learning, rewards clipped to their sign and a lost life ends the episode; for the logs,
      the whole game's real score and its length in the agent's steps.
    How this compares with CleanRL's and envpool's setups: docs/atari_setup.md."""

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
        return np.sign(rewards), terminations | life_lost, finished


# ---------------------------------------------------------------- network and algorithm
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
            layer_init(nn.Conv2d(STACK, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(3136, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, actions_count), std=0.01)  # small: the policy starts near uniform
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)

    def forward(self, frames):
        hidden = self.network(frames / 255.0)  # uint8 in, float32 out: one conversion, no extra copy
        return self.actor(hidden), self.critic(hidden).squeeze(1)


def td_target(rewards, dones, next_values, gamma):
    """One-step TD target; no bootstrap past a terminal (a lost life or the game's end)."""
    return rewards + gamma * next_values * (1.0 - dones)


# ---------------------------------------------------------------- main
def main(argv=None):
    args = parse_args(argv)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    run = plumbing.Run(args, SCRIPT, device)  # a new run directory (or --resume's), TensorBoard, progress, checkpoints
    writer = run.writer

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.eval_model is not None:  # watch a saved agent play (see evaluate, below), no training
        return run.watch(Agent, evaluate)

    games = AtariGames(args.env_id, args.envs_count, args.seed)
    actions_count = games.action_space.n
    # channels_last: the memory layout oneDNN's CPU convolutions run fastest on
    agent = Agent(actions_count).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)  # fused: in one pass
    actor_losses, critic_losses, entropies = [], [], []  # the batches: one tensor per step
    # 0, 0; or --resume's step and update counts, with all it is handed as saved (but the games, which start anew)
    global_step, updates = run.start(actions_count, agent, optimizer)

    while global_step < args.total_timesteps and not run.stopped:  # Ctrl-C or kill: stop here
        # ALGO LOGIC: phase 1, the rollout, until the batches hold rollout_length steps' losses. Its first pi(.|s), V(s)
        # come from the parameters as they are now; then one forward of s' gives V(s') for the step's target and the next s.
        logits, values = agent(torch.from_numpy(games.obs).to(device))
        run.stop_if_diverged(logits, global_step)  # nan never comes back: stop now
        while len(actor_losses) < args.rollout_length and global_step < args.total_timesteps and not run.stopped:
            dist = Categorical(logits=logits)
            actions = dist.sample()
            agent_acted = games.send(actions.cpu().numpy())  # False where the step is played for the agent: no transition
            global_step += np.count_nonzero(agent_acted)  # the agent's steps, as CleanRL's DQN and PPO count them
            rewards, dones, finished = games.recv()
            next_logits, next_values = agent(torch.from_numpy(games.obs).to(device))
            # this step's actor and critic losses, appended to the batches
            rewards, dones = torch.from_numpy(rewards).to(device).float(), torch.from_numpy(dones).to(device).float()
            target = td_target(rewards, dones, next_values.detach(), args.gamma)  # a fixed target: semi-gradient TD
            td_errors = target - values
            actor_loss = -dist.log_prob(actions) * td_errors.detach()  # the advantage only scales the actor's gradient
            critic_loss = td_errors**2
            if agent_acted.any():
                agent_acted = torch.from_numpy(agent_acted).to(device)
                actor_losses.append(actor_loss[agent_acted])
                critic_losses.append(critic_loss[agent_acted])
                entropies.append(dist.entropy()[agent_acted])
            logits, values = next_logits, next_values  # the graph comes along: the next step's loss flows through it
            for score, length in finished:  # the whole game's real score, as CleanRL logs it
                writer.add_scalar("charts/episodic_return", score, global_step)
                writer.add_scalar("charts/episodic_length", length, global_step)
                run.returns.append(score)
        rollout_cut_short = len(actor_losses) < args.rollout_length  # by the run's end or a stop: it is not learnt from
        if rollout_cut_short:
            break

        # ALGO LOGIC: phase 2, the update: the batches' means make one gradient step, then they start again empty
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

        run.step_done(global_step, updates)  # the progress line; a checkpoint every --save-every steps, after an update
    games.envs.close()
    return run.end(agent, evaluate, global_step, updates)  # a checkpoint; with --save-model, evaluate's games


def evaluate(agent, env_id, seed, episodes, epsilon, device, video_dir=None):
    """Play whole games with the policy (a random action with probability epsilon); return their real scores."""
    games, rng = AtariGames(env_id, 1, seed), np.random.default_rng(seed)
    if video_dir is not None:  # --capture-video: filmed as they are played
        games.envs = plumbing.VideoRecorder(games.envs, env_id, seed, video_dir, games.obs[0, -1])
    returns = []
    while len(returns) < episodes:
        actions = np.zeros(1, dtype=np.int64)  # where the step is played for the agent: no choice to make
        if games.agent_acts[0]:
            with torch.no_grad():
                actions = Categorical(logits=agent(torch.from_numpy(games.obs).to(device))[0]).sample().cpu().numpy()
            if rng.random() < epsilon:
                actions = rng.integers(0, games.action_space.n, size=1)
        games.send(actions)
        _, _, finished = games.recv()
        returns += [score for score, _ in finished]
    games.envs.close()
    return returns


if __name__ == "__main__":
    plumbing.catch_stop_signals()  # Ctrl-C, kill or a closed terminal: the run saves a checkpoint and ends cleanly
    main()
