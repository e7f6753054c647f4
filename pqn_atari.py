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
steps it plays for the agent (a reset, a launch, FIRE after a lost life) add no loss.
They also stop that backward pass; a game cut at its time limit does not: it bootstraps (CleanRL's PQN stops there).

Diff it against: ppo_atari.py (Q(lambda) in place of GAE, the TD loss in place of the clipped objective).

    python pqn_atari.py --env-id BreakoutNoFrameskip-v4
    tensorboard --logdir runs
"""

import argparse
import os
import random

import numpy as np
import torch
import torch.nn as nn
from ale_py import Action
from ale_py.vector_env import AtariVectorEnv

import plumbing  # the run's flags, directory, logs, checkpoints and --resume: nothing in it changes what is learnt
from plumbing import positive_float, positive_int, probability

SCRIPT = os.path.basename(__file__)  # saved with the model and checkpoints: only this script's network loads them
FRAME_SHAPE = (84, 84)
STACK = 4


# ---------------------------------------------------------------- flags
def parse_args(argv=None):
    p = plumbing.new_parser(__doc__)
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
    plumbing.add_run_flags(p, SCRIPT)  # --seed, --save-model, --resume...: the run's flags
    args = plumbing.parse_run(p, argv, SCRIPT)  # with --resume: the run's own flags, from its checkpoint
    if args.eval_epsilon is None:  # as CleanRL's DQN evaluates: at the epsilon its exploration ends with
        args.eval_epsilon = args.end_e
    check_args(p, args)
    return args


def check_args(p, args):
    """What a flag's type cannot check alone, before any long work: the rollout must fit and give minibatches."""
    plumbing.check_games_memory(p, args)  # the --envs-count emulators fit in memory
    needed = args.rollout_length * args.envs_count * STACK * FRAME_SHAPE[0] * FRAME_SHAPE[1]
    what = f"{args.rollout_length:,} steps of {args.envs_count:,} games"
    plumbing.check_memory(p, args, "--rollout-length", needed, what)
    if args.rollout_length < 4:
        p.error("argument --rollout-length: must be at least 4 (a game starts with 3 steps played for the agent)")
    # Usually at most 3 steps in a row are played for the agent (a reset, FIRE, 2; more where a life or the game
    # ends during them): so >= envs * (length // 4) transitions, and every minibatch gets some
    if args.num_minibatches > args.envs_count * (args.rollout_length // 4):
        p.error(
            f"argument --num-minibatches: must be at most --envs-count * (--rollout-length // 4) = "
            f"{args.envs_count * (args.rollout_length // 4)}"
        )


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


def epsilon_greedy_from_q_values(q_values, epsilon, rng):
    """For each row of q_values (one an environment), a random action with probability epsilon, else the greedy one."""
    explore = rng.random(len(q_values)) < epsilon
    random_actions = rng.integers(0, q_values.shape[1], size=len(q_values))
    return torch.from_numpy(np.where(explore, random_actions, q_values.argmax(1).cpu().numpy()))


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
    rng = np.random.default_rng(args.seed)  # exploration
    if args.eval_model is not None:  # watch a saved agent play (see evaluate, below), no training
        return run.watch(QNetwork, evaluate)

    games = AtariGames(args.env_id, args.envs_count, args.seed)
    actions_count = games.action_space.n
    # channels_last: the memory layout oneDNN's CPU convolutions run fastest on
    agent = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.RAdam(agent.parameters(), lr=args.learning_rate)
    # The rollout: one row per step, kept whole because the update goes over it several times.
    rollout_shape = (args.rollout_length, games.envs.num_envs)
    rollout_obs = torch.zeros(rollout_shape + (STACK, *FRAME_SHAPE), dtype=torch.uint8, device=device)
    rollout_actions = torch.zeros(rollout_shape, dtype=torch.long, device=device)
    rollout_values = torch.zeros(rollout_shape, device=device)
    rollout_rewards = torch.zeros(rollout_shape, device=device)
    rollout_dones = torch.zeros(rollout_shape, device=device)
    rollout_agent_acted = torch.zeros(rollout_shape, dtype=torch.bool, device=device)
    # 0, 0; or --resume's step and update counts, with all it is handed as saved (but the games, which start anew)
    global_step, updates = run.start(actions_count, agent, optimizer, rng=rng)

    while global_step < args.total_timesteps and not run.stopped:  # Ctrl-C or kill: stop here
        # ALGO LOGIC: phase 1, the rollout: rollout_length steps of every environment, kept for the update
        done_fraction = global_step / args.total_timesteps  # of the run, before this rollout: the learning rate's anneal
        for step in range(args.rollout_length):
            obs = torch.from_numpy(games.obs).to(device)
            epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
            with torch.no_grad():
                q_values = agent(obs)
            rollout_cut_short = global_step >= args.total_timesteps or run.stopped  # by the run's end, a stop or nan
            if rollout_cut_short:  # checked before the step is played: it is not learnt from
                break
            actions = epsilon_greedy_from_q_values(q_values, epsilon, rng)
            agent_acted = games.send(actions.cpu().numpy())  # False where the step is played for the agent: no transition
            global_step += np.count_nonzero(agent_acted)  # the agent's steps, as CleanRL's DQN and PPO count them
            rewards, dones, finished = games.recv()
            rollout_obs[step] = obs
            rollout_actions[step] = actions
            rollout_values[step] = q_values.max(1).values
            rollout_rewards[step] = torch.from_numpy(rewards)
            rollout_dones[step] = torch.from_numpy(dones)
            rollout_agent_acted[step] = torch.from_numpy(agent_acted)
            for score, length in finished:  # the whole game's real score, as CleanRL logs it
                writer.add_scalar("charts/episodic_return", score, global_step)
                writer.add_scalar("charts/episodic_length", length, global_step)
                run.returns.append(score)
                writer.add_scalar("charts/avg_episodic_return", np.mean(list(run.returns)[-20:]), global_step)  # CleanRL's too
        if rollout_cut_short:
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
                run.stop_if_diverged(loss, global_step)  # nan never comes back: stop now
                if run.stopped:  # Ctrl-C or kill: no more minibatch steps; a checkpoint of those made
                    break
            if run.stopped:
                break
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/td_loss", loss.item(), global_step)
        writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)

        run.step_done(global_step, updates, {"charts/epsilon": epsilon})  # the progress line; a checkpoint, after an update
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
                actions = epsilon_greedy_from_q_values(agent(torch.from_numpy(games.obs).to(device)), epsilon, rng).numpy()
        games.send(actions)
        _, _, finished = games.recv()
        returns += [score for score, _ in finished]
    games.envs.close()
    return returns


if __name__ == "__main__":
    plumbing.catch_stop_signals()  # Ctrl-C, kill or a closed terminal: the run saves a checkpoint and ends cleanly
    main()
