"""PPO on Atari: several epochs of clipped policy updates over each rollout.

What it shows: proximal policy optimization as CleanRL's ppo_atari runs it. Where a2c_batched.py keeps
each step's losses, PPO keeps its transition (observation, action, log pi(a|s), V(s)) to evaluate it
again with a changing policy, safely: once the ratio pi_new(a|s) / pi_old(a|s) leaves [1 - clip, 1 + clip]
(`--clip-coef`), the clipped objective gains nothing more, so the policy stays near the one that acted.

When the rollout holds `--rollout-length` steps of every environment, one pass backwards over it
turns it into advantages and returns by generalized advantage estimation (GAE, `--gae-lambda`),
then `--update-epochs` passes over it in `--num-minibatches` shuffled minibatches make the gradient
steps, with a learning rate annealed linearly to 0 (`--anneal-lr`), and the rollout is dropped.
Actor and critic share one Nature CNN with two heads, as in a2c_batched.py, trained by Adam.
The defaults are CleanRL's; its published results after 10M steps: Breakout 415 +- 28, Pong 20.4, BeamRider 1916.

The games are `--envs-count` Atari games stepped together by ale-py's AtariVectorEnv, in the
standard DeepMind setup that `AtariGames` keeps: learning sees rewards clipped to their sign and a
lost life as an episode's end, while `charts/episodic_return` is the whole game's real score. The
steps it plays for the agent (a reset, a launch, FIRE after a lost life) add no loss.
They also stop that backward pass; a game cut at its time limit does not: it bootstraps (CleanRL's PPO stops there).

Diff it against: a2c_batched.py (one gradient step per rollout on the one-step TD advantage).

    python ppo_atari.py --env-id BreakoutNoFrameskip-v4
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
from torch.distributions import Categorical

import plumbing  # the run's flags, directory, logs, checkpoints and --resume: nothing in it changes what is learnt
from plumbing import non_negative_float, positive_float, positive_int, probability

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
    p.add_argument("--gae-lambda", type=probability, default=0.95, help="GAE's lambda (0: the TD error, 1: Monte Carlo)")
    p.add_argument("--num-minibatches", type=positive_int, default=4, help="minibatches a rollout is split into")
    p.add_argument("--update-epochs", type=positive_int, default=4, help="passes over each rollout")
    p.add_argument("--norm-adv", action=argparse.BooleanOptionalAction, default=True, help="normalize advantages")
    p.add_argument("--clip-coef", type=positive_float, default=0.1, help="the surrogate clipping coefficient")
    p.add_argument("--clip-vloss", action=argparse.BooleanOptionalAction, default=True, help="clip the value loss too")
    p.add_argument("--ent-coef", type=non_negative_float, default=0.01, help="weight of the entropy bonus")
    p.add_argument("--vf-coef", type=non_negative_float, default=0.5, help="weight of the critic's loss")
    p.add_argument("--max-grad-norm", type=positive_float, default=0.5, help="gradients are clipped to this norm")
    p.add_argument("--target-kl", type=positive_float, default=None, help="end the update's epochs once its KL passes this")
    # --eval-epsilon 0: the policy samples its own actions, as CleanRL's PPO evaluation plays
    plumbing.add_run_flags(p, SCRIPT, eval_epsilon=0.0)  # --seed, --save-model, --resume...: the run's flags
    args = plumbing.parse_run(p, argv, SCRIPT)  # with --resume: the run's own flags, from its checkpoint
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


def gae(rewards, values, dones, agent_acted, next_values, gamma, gae_lambda):
    """Generalized advantage estimates of a rollout: A_t = delta_t + gamma * lambda * A_{t+1}.

    delta_t, step t's TD error, is a2c_batched.py's advantage: low in variance, but only as right as the critic;
    summing the later ones with weights (gamma * lambda)^k trades some of that bias for variance.

    rewards, values, dones and agent_acted are (steps, envs). dones[t] is 1 when step t ended the
    episode for learning: nothing after it flows back into it, nor does a bootstrap. agent_acted[t] is
    False for a step played for the agent: it gets 0 (it is never learnt from), and the step before
    bootstraps from V of the observation it led to alone (after a time-limit truncation, the game's
    last observation). next_values is V of the observation after the last step."""
    advantages = torch.zeros_like(rewards)
    following = torch.zeros_like(next_values)  # A_{t+1}
    for t in reversed(range(len(rewards))):
        next_step_values = next_values if t == len(rewards) - 1 else values[t + 1]
        delta = td_target(rewards[t], dones[t], next_step_values, gamma) - values[t]
        following = (delta + gamma * gae_lambda * (1.0 - dones[t]) * following) * agent_acted[t]
        advantages[t] = following
    return advantages


def clipped_surrogate_loss(advantages, ratio, clip_coef):
    """PPO's actor loss, the mean of the larger of the plain and the clipped loss: moving the ratio pi_new / pi_old
    past [1 - clip, 1 + clip] earns nothing more, but a move that made things worse is paid in full."""
    clipped_ratio = ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    return torch.max(-advantages * ratio, -advantages * clipped_ratio).mean()


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
    # The rollout: one row per step, kept whole because the update goes over it several times.
    rollout_shape = (args.rollout_length, games.envs.num_envs)
    rollout_obs = torch.zeros(rollout_shape + (STACK, *FRAME_SHAPE), dtype=torch.uint8, device=device)
    rollout_actions = torch.zeros(rollout_shape, dtype=torch.long, device=device)
    rollout_values = torch.zeros(rollout_shape, device=device)
    rollout_rewards = torch.zeros(rollout_shape, device=device)
    rollout_dones = torch.zeros(rollout_shape, device=device)
    rollout_logprobs = torch.zeros(rollout_shape, device=device)
    rollout_agent_acted = torch.zeros(rollout_shape, dtype=torch.bool, device=device)
    # 0, 0; or --resume's step and update counts, with all it is handed as saved (but the games, which start anew)
    global_step, updates = run.start(actions_count, agent, optimizer)

    while global_step < args.total_timesteps and not run.stopped:  # Ctrl-C or kill: stop here
        # ALGO LOGIC: phase 1, the rollout: rollout_length steps of every environment, kept for the update
        done_fraction = global_step / args.total_timesteps  # of the run, before this rollout: the learning rate's anneal
        for step in range(args.rollout_length):
            obs = torch.from_numpy(games.obs).to(device)
            with torch.no_grad():
                logits, values = agent(obs)
            run.stop_if_diverged(logits, global_step)  # nan never comes back: stop now
            rollout_cut_short = global_step >= args.total_timesteps or run.stopped  # by the run's end, a stop or nan
            if rollout_cut_short:  # checked before the step is played: it is not learnt from
                break
            dist = Categorical(logits=logits)
            actions = dist.sample()
            agent_acted = games.send(actions.cpu().numpy())  # False where the step is played for the agent: no transition
            global_step += np.count_nonzero(agent_acted)  # the agent's steps, as CleanRL's DQN and PPO count them
            rewards, dones, finished = games.recv()
            rollout_obs[step] = obs
            rollout_actions[step] = actions
            rollout_logprobs[step] = dist.log_prob(actions)
            rollout_values[step] = values
            rollout_rewards[step] = torch.from_numpy(rewards)
            rollout_dones[step] = torch.from_numpy(dones)
            rollout_agent_acted[step] = torch.from_numpy(agent_acted)
            for score, length in finished:  # the whole game's real score, as CleanRL logs it
                writer.add_scalar("charts/episodic_return", score, global_step)
                writer.add_scalar("charts/episodic_length", length, global_step)
                run.returns.append(score)
        if rollout_cut_short:
            break

        # ALGO LOGIC: phase 2, the update: update_epochs passes over the rollout in minibatch steps
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - done_fraction)
        with torch.no_grad():
            next_values = agent(torch.from_numpy(games.obs).to(device))[1]
        advantages = gae(
            rollout_rewards, rollout_values, rollout_dones, rollout_agent_acted, next_values, args.gamma, args.gae_lambda
        )
        returns = advantages + rollout_values
        # (steps, envs) flattened into one batch, from which only the agent's steps are drawn
        b_obs, b_actions, b_returns = rollout_obs.flatten(0, 1), rollout_actions.flatten(), returns.flatten()
        b_logprobs, b_values, b_advantages = rollout_logprobs.flatten(), rollout_values.flatten(), advantages.flatten()
        agent_steps = torch.nonzero(rollout_agent_acted.flatten()).squeeze(1)
        clipfracs = []
        for epoch in range(args.update_epochs):
            for mb in torch.tensor_split(agent_steps[torch.randperm(len(agent_steps))], args.num_minibatches):
                # index_select copies whole observations, several times faster than b_obs[mb]
                new_logits, new_values = agent(b_obs.index_select(0, mb))
                new_dist = Categorical(logits=new_logits, validate_args=False)  # nan or inf passes: the loss's check below
                log_ratio = new_dist.log_prob(b_actions[mb]) - b_logprobs[mb]
                ratio = log_ratio.exp()
                with torch.no_grad():  # two estimates of KL(pi_old || pi_new); the second is never negative, less noisy
                    old_approx_kl, approx_kl = (-log_ratio).mean(), ((ratio - 1.0) - log_ratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())
                mb_advantages = b_advantages[mb]
                if args.norm_adv:  # by the minibatch's population std (CleanRL: the sample std, n - 1; 0.2% apart)
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std(correction=0) + 1e-8)
                policy_loss = clipped_surrogate_loss(mb_advantages, ratio, args.clip_coef)
                critic_loss = (new_values - b_returns[mb]) ** 2
                if args.clip_vloss:
                    clipped_values = b_values[mb] + (new_values - b_values[mb]).clamp(-args.clip_coef, args.clip_coef)
                    critic_loss = torch.max(critic_loss, (clipped_values - b_returns[mb]) ** 2)
                critic_loss_batch = 0.5 * critic_loss.mean()
                entropy_batch = new_dist.entropy().mean()
                loss = policy_loss + args.vf_coef * critic_loss_batch - args.ent_coef * entropy_batch
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                updates += 1
                run.stop_if_diverged(loss, global_step)  # nan never comes back: stop now
                if run.stopped:  # Ctrl-C or kill: no more minibatch steps; a checkpoint of those made
                    break
            if run.stopped or (args.target_kl is not None and approx_kl > args.target_kl):
                break
        # How much of the returns' variance the critic explained before the update (1 is all of it)
        returns_var = b_returns[agent_steps].var(correction=0)  # np.var's, as CleanRL's: of one step, 0 (no warning)
        unexplained_var = (b_returns - b_values)[agent_steps].var(correction=0)
        explained_var = 1.0 - unexplained_var / returns_var if returns_var > 0 else np.nan
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", critic_loss_batch.item(), global_step)
        writer.add_scalar("losses/policy_loss", policy_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_batch.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", np.mean(clipfracs), global_step)
        writer.add_scalar("losses/explained_variance", float(explained_var), global_step)

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
