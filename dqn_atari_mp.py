"""Nature DQN on Atari with actor processes: `--workers-count` workers feed one learner.

What it shows: deep Q-learning as in Mnih et al. (2015), trained as CleanRL trains it (Adam, the
squared TD error): an epsilon-greedy agent plays, every transition goes into a replay memory, and
every `--learn-steps-period` environment steps one gradient step moves Q(s, a) towards the one-step
TD target r + gamma * max_a' Q_target(s', a'). A target network, copied every
`--target-network-frequency` steps, keeps that target still.

Multi-process: `--workers-count` worker processes each play one game, acting with one CPU copy of
the Q-network in shared memory that the learner refreshes; the main process learns from all their
transitions (`--learn-steps-period` counts them all). A worker writes 32 steps into one of its two
slots of shared memory, then puts a few bytes on the queue all workers share: only so small a
message is written whole or not at all if its sender dies (a large one cut in half would leave the
learner waiting forever: docs/plumbing.md). The learner copies the slot out; a worker waits for it.

The games are ale-py's AtariVectorEnv with one element, in the standard DeepMind setup that
`AtariGames` keeps: learning sees rewards clipped to their sign and a lost life as an episode's
end, while `charts/episodic_return` is the whole game's real score. A game cut at its time limit
(108,000 frames) ends no episode for learning: the TD target bootstraps through it, as CleanRL's DQN's does.

The DQN variants (diff any two): dqn_atari.py (the reference: one environment),
dqn_atari_vec.py (`--envs-count` environments in one process) and dqn_atari_mp.py
(`--workers-count` actor processes feeding one learner through a queue and shared memory).

    python dqn_atari_mp.py --workers-count 2
    tensorboard --logdir runs
"""

import os
import queue
import random
import signal
import time

import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from ale_py import Action
from ale_py.vector_env import AtariVectorEnv

import plumbing  # the run's flags, directory, logs, checkpoints and --resume: nothing in it changes what is learnt
from plumbing import non_negative_int, positive_float, positive_int, probability

SCRIPT = os.path.basename(__file__)  # saved with the model and checkpoints: only this script's network loads them
FRAME_SHAPE = (84, 84)
STACK = 4
SEND_BATCH = 32  # a worker hands its transitions over 32 at a time: fewer messages
SLOTS = 2  # a worker's slots of shared memory: it fills one while the learner copies the other out
STEP = np.dtype(  # one step as a worker writes it into its slot: what the replay stores, and the game that ended there
    [("frame", np.uint8, FRAME_SHAPE), ("action", np.uint8), ("reward", np.int8), ("done", bool)]
    + [("agent_acted", bool), ("first", bool), ("game_over", bool), ("score", float), ("length", np.int64)]
)
WORKER_BYTES = 200 * 2**20  # one worker process (Python, torch, its game): 200 MiB measured (PSS)


# ---------------------------------------------------------------- flags
def parse_args(argv=None):
    p = plumbing.new_parser(__doc__)
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
    p.add_argument("--workers-count", type=positive_int, default=2, help="actor processes, one environment each")
    p.add_argument("--learn-steps-period", type=positive_int, default=4, help="steps summed over all environments per update")
    plumbing.add_run_flags(p, SCRIPT)  # --seed, --save-model, --resume...: the run's flags, the same in every script
    args = plumbing.parse_run(p, argv, SCRIPT)  # with --resume: the run's own flags, from its checkpoint
    if args.eval_epsilon is None:  # as CleanRL's DQN evaluates: at the epsilon its exploration ends with
        args.eval_epsilon = args.end_e
    check_args(p, args)
    return args


def check_args(p, args):
    """What a flag's type cannot check alone, before any long work: the replay must be able to give batches."""
    workers_bytes = args.workers_count * WORKER_BYTES
    plumbing.check_memory(p, args, "--workers-count", workers_bytes, f"{args.workers_count:,} worker processes")
    if args.learning_starts < args.batch_size:
        p.error(f"argument --learning-starts: must be at least --batch-size ({args.batch_size})")
    # (No such check of the warm-up as in dqn_atari.py: a worker's transitions arrive 32 at a time, so
    # the first update always finds stored transitions whose next frame is stored too.)
    if args.buffer_size < args.batch_size + STACK:
        p.error(f"argument --buffer-size: must be at least --batch-size + {STACK} = {args.batch_size + STACK}")
    # In a full ring, all of an environment's rows can be sampled but: the STACK - 1 oldest (frames of their stacks
    # are overwritten), the newest (its next frame is not stored yet), steps played for the agent (usually up to 3 in
    # a row, a game's reset and launch) and, after --resume, the last row before the stop (its next frame was never
    # stored) and the new game's launch (2 rows). With no more rows than those, an update might find none to sample.
    overwritten, newest, played_for_the_agent, resumed = STACK - 1, 1, 3, 1 + 2
    # And a worker's SEND_BATCH steps must fit in its column, or they would write over their own first steps.
    min_rows = max(overwritten + newest + played_for_the_agent + resumed + 1, SEND_BATCH)
    if args.buffer_size // args.workers_count < min_rows:
        p.error(f"argument --buffer-size: must be at least {min_rows} * --workers-count = {min_rows * args.workers_count}")
    plumbing.check_replay(p, args, workers_bytes)  # beside the workers in memory, and on disk for --resume
    if args.eval_model is None and args.learning_starts >= args.total_timesteps:
        plumbing.note(
            f"--learning-starts {args.learning_starts:,} is not below --total-timesteps {args.total_timesteps:,}: "
            f"this run only plays; it will not learn"
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
    episode (`firsts`): there the episode's first frame stands in for the frames before it.
    What --resume reads of it (rename none of these): plumbing/checkpoints.py, REPLAY_FIELDS."""

    def __init__(self, capacity, envs_count):
        self.rows = capacity // envs_count
        self.frames = np.zeros((self.rows, envs_count, *FRAME_SHAPE), dtype=np.uint8)
        self.actions, self.rewards = (np.zeros((self.rows, envs_count), dtype=kind) for kind in (np.uint8, np.int8))
        self.dones, self.agent_acted, self.firsts = (np.zeros((self.rows, envs_count), dtype=bool) for _ in range(3))
        # Workers run at their own pace: each column (worker) has its own write position.
        self.pos, self.full = np.zeros(envs_count, dtype=np.int64), np.zeros(envs_count, dtype=bool)

    def add(self, col, frames, actions, rewards, dones, agent_acted, firsts):
        rows = (self.pos[col] + np.arange(len(frames))) % self.rows
        self.frames[rows, col], self.actions[rows, col], self.rewards[rows, col] = frames, actions, rewards
        self.dones[rows, col], self.agent_acted[rows, col], self.firsts[rows, col] = dones, agent_acted, firsts
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
        # After the agent's step the next frame goes on from it; where it opens a game instead, a stop
        # cut that game off and --resume started a new one: the step's own next frame was never stored.
        next_rows = (rows + 1) % self.rows
        cut_off = self.firsts[next_rows, cols]
        return self.agent_acted[rows, cols] & (age >= STACK - 1) & (next_rows != pos) & ~cut_off

    def sample(self, batch_size, rng):
        filled = np.where(self.full, self.rows, self.pos)
        rows = cols = np.empty(0, dtype=np.int64)
        while len(rows) < batch_size:  # rejection sampling: the few unusable rows are redrawn
            # a column in proportion to its rows, so that every stored row is as likely (workers fill at their own pace)
            c = rng.choice(len(filled), size=batch_size, p=filled / filled.sum())
            r = (rng.random(batch_size) * filled[c]).astype(np.int64)
            ok = self.sampleable(r, c)
            rows, cols = np.concatenate([rows, r[ok]]), np.concatenate([cols, c[ok]])
        rows, cols = rows[:batch_size], cols[:batch_size]
        both = self.stacks((rows + 1) % self.rows, cols, STACK + 1)  # s and s' share STACK - 1 frames
        return both[:, :-1], self.actions[rows, cols], self.rewards[rows, cols], both[:, 1:], self.dones[rows, cols]


# ---------------------------------------------------------------- worker process
def worker(index, args, acting_network, shared_step, stop, shared_slots, copied, messages):
    """One actor: plays its own game, writes what it saw into its slots, SEND_BATCH steps at a time, and puts
    (its index, the batch's number) on the queue: that slot is full."""
    torch.set_num_threads(1)  # the learner needs the cores; acting is one small forward pass
    if not hasattr(signal, "pthread_sigmask"):  # Windows: Ctrl-C reaches every process; the learner stops its workers
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    messages.cancel_join_thread()  # exit without waiting to send: a dead worker may hold the queue's lock for good
    slots, learner = np.frombuffer(shared_slots, dtype=STEP).reshape(-1, SLOTS, SEND_BATCH)[index], mp.parent_process()
    # Its own exploration draws; a resumed run's workers draw anew from where it stood
    games, rng = AtariGames(args.env_id, 1, args.seed + index), np.random.default_rng((args.seed, index, shared_step.value))
    batch, decay_steps = 0, args.exploration_fraction * args.total_timesteps
    while slot_free(batch, copied, index, stop, learner):
        slot = slots[batch % SLOTS]
        for row in range(SEND_BATCH):
            # ALGO LOGIC: epsilon follows the learner's global step; acting on half-copied new weights is harmless
            obs, firsts = games.obs, games.firsts  # this step's, for the replay: recv() below replaces them
            epsilon = linear_schedule(args.start_e, args.end_e, decay_steps, shared_step.value)
            actions = epsilon_greedy(acting_network, obs, epsilon, games.action_space.n, rng, "cpu")
            agent_acted = games.send(actions)  # False where the step is played for the agent: no transition
            rewards, dones, ended = games.recv()
            score, length = ended[0] if ended else (0.0, 0)
            slot[row] = (obs[0, -1], actions[0], rewards[0], dones[0], agent_acted[0], firsts[0], bool(ended), score, length)
        messages.put((index, batch))  # a few bytes: written whole or not at all, whenever this process dies
        batch += 1


def slot_free(batch, copied, index, stop, learner):
    """Wait till the learner has copied out the batch SLOTS before `batch` (only it writes `copied`); False once
    the run stops or the learner is gone (killed: nobody else would stop this worker)."""
    while batch - copied[index] >= SLOTS and not stop.value and learner.is_alive():
        time.sleep(0.01)  # 100 looks a second: a worker that waits takes next to no CPU from the learner
    return not stop.value and learner.is_alive()


# ---------------------------------------------------------------- the learner's watch over its workers
def next_message(messages):
    """A worker's (index, batch number), or None after 1 s without one."""
    try:
        return messages.get(timeout=1.0)
    except (queue.Empty, InterruptedError):  # Windows: Ctrl-C breaks the wait (after the stop signal's handler ran)
        return None


def dead_worker(workers):
    """Which worker has died and how, else None: a worker exits when told to, on an exception, or killed."""
    for index, process in enumerate(workers):
        if process.exitcode is not None:
            code = process.exitcode
            names = {number.value: number.name for number in signal.Signals}  # a real-time signal has none
            how = f"killed by {names.get(-code, f'signal {-code}')}" if code < 0 else f"exit code {code}"
            return f"worker {index} (pid {process.pid}) died: {how}"


def out_of_turn(message, copied):
    """A batch that is not the next from its worker (one lost or sent twice), else None: none may be."""
    if message is not None and message[1] != copied[message[0]]:
        return f"worker {message[0]} sent batch {message[1]:,} where batch {copied[message[0]]:,} was due"


def stop_workers(workers, stop):
    """Every worker ended and reaped (no zombie left while the evaluation runs), within 2 s."""
    stop.value = 1
    # A worker that plays sees the flag within a batch; one still starting (importing torch) cannot
    # look before it plays, and nothing is lost by killing it.
    deadline = time.time() + 2
    for process in workers:
        process.join(timeout=max(deadline - time.time(), 0))
        process.kill()  # no-op for a worker that has exited
        process.join()


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
    rng = np.random.default_rng(args.seed)  # replay sampling (each worker draws its own exploration)
    if args.eval_model is not None:  # watch a saved agent play (see evaluate, below), no training
        return run.watch(QNetwork, evaluate)

    games = AtariGames(args.env_id, 1, args.seed)  # only to know the game: the workers play
    actions_count = games.action_space.n
    games.envs.close()
    # channels_last: the memory layout oneDNN's CPU convolutions run fastest on; fused: Adam in one pass
    q_network = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True)
    target_network = QNetwork(actions_count).to(device, memory_format=torch.channels_last)
    target_network.load_state_dict(q_network.state_dict())
    replay = ReplayMemory(args.buffer_size, args.workers_count)
    # 0, 0; or --resume's step and update counts, with all it is handed as saved (but the games, which start anew)
    global_step, updates = run.start(actions_count, q_network, optimizer, target_network, rng, replay, SEND_BATCH)
    # The workers act with a CPU copy of the Q-network whose weights live in shared memory.
    acting_network = QNetwork(actions_count).to(memory_format=torch.channels_last).share_memory()
    acting_network.load_state_dict(q_network.state_dict())
    # Raw shared memory, no lock: a process killed while it held a lock (kill -9, the OOM killer) would leave it
    # taken for good. Each value has one writer, the learner; a worker reads the old value or the new one.
    context = mp.get_context("spawn")  # fork is unsafe with torch's threads and with CUDA
    shared_step, stop = context.RawValue("q", global_step), context.RawValue("b", 0)  # a resumed run's step: its epsilon
    # SLOTS slots a worker in shared memory, the queue, and `copied`: each worker's batches copied out of its slots
    shared_slots = context.RawArray("B", args.workers_count * SLOTS * SEND_BATCH * STEP.itemsize)
    slots = np.frombuffer(shared_slots, dtype=STEP).reshape(args.workers_count, SLOTS, SEND_BATCH)
    copied, messages = context.RawArray("q", args.workers_count), context.Queue()
    shared = (args, acting_network, shared_step, stop, shared_slots, copied, messages)
    workers = plumbing.start_workers(context, worker, args.workers_count, *shared)
    failure = None  # how a worker died, once one has: the run ends with it (exit status 1)

    # The learner: one worker's batch of transitions at a time, until done, Ctrl-C, or a worker died
    while global_step < args.total_timesteps and not run.stopped and failure is None:
        message = next_message(messages)  # up to 1 s; then, message or not, a look at the workers (cheap)
        failure = dead_worker(workers) or out_of_turn(message, copied)  # either ends the run
        if message is None or failure is not None:
            continue
        e, batch = message  # e: the worker
        slot = slots[e, batch % SLOTS]
        # ALGO LOGIC: a worker's transitions go into the replay memory; then its slot is free again
        replay.add(e, slot["frame"], slot["action"], slot["reward"], slot["done"], slot["agent_acted"], slot["first"])
        finished = list(zip(slot["score"][slot["game_over"]], slot["length"][slot["game_over"]]))
        new_steps = np.count_nonzero(slot["agent_acted"])  # the agent's steps, as CleanRL's DQN and PPO count them
        copied[e] += 1  # (only now: the worker may write over the slot from here on)
        global_step += new_steps
        shared_step.value = global_step
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)

        # ALGO LOGIC: one gradient update per `learn_steps_period` steps since learning started (after a stop,
        # those still due are the resumed run's)
        while updates < updates_due(global_step, args.learning_starts, args.learn_steps_period) and not run.stopped:
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
            run.stop_if_diverged(loss, global_step)  # nan never comes back: stop now
            if updates % 100 == 0:
                writer.add_scalar("losses/td_loss", loss.item(), global_step)
                writer.add_scalar("losses/q_values", q_values.mean().item(), global_step)
        if global_step > args.learning_starts:
            acting_network.load_state_dict(q_network.state_dict())  # the workers act with the new weights

        # ALGO LOGIC: the target network follows the Q-network every target_network_frequency steps
        syncs_due = multiples_passed(global_step, new_steps, args.target_network_frequency)
        if global_step > args.learning_starts and syncs_due > 0:
            mix = 1.0 - (1.0 - args.tau) ** syncs_due  # syncs_due soft updates of rate tau, in one (tau 1: a copy)
            for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                target_param.data.copy_(mix * param.data + (1.0 - mix) * target_param.data)

        # The whole game's real score, as CleanRL logs it; every 5 s a progress line; checkpoints
        for score, length in finished:
            writer.add_scalar("charts/episodic_return", score, global_step)
            writer.add_scalar("charts/episodic_length", length, global_step)
            run.returns.append(score)
        run.step_done(global_step, updates, {"charts/epsilon": epsilon})
    stop_workers(workers, stop)
    return run.end(q_network, evaluate, global_step, updates, failure)  # a checkpoint; with --save-model, evaluate's games


def evaluate(q_network, env_id, seed, episodes, epsilon, device, video_dir=None):
    """Play whole games with a small epsilon, set up as in training; return their real scores. With
    --capture-video (a video_dir) they are filmed as they are played."""
    games, rng = AtariGames(env_id, 1, seed), np.random.default_rng(seed)
    if video_dir is not None:
        games.envs = plumbing.VideoRecorder(games.envs, env_id, seed, video_dir, games.obs[0, -1])
    returns = []
    while len(returns) < episodes:
        games.send(epsilon_greedy(q_network, games.obs, epsilon, games.action_space.n, rng, device))
        _, _, finished = games.recv()
        returns += [score for score, _ in finished]
    games.envs.close()
    return returns


if __name__ == "__main__":
    plumbing.catch_stop_signals()  # Ctrl-C, kill or a closed terminal: the run saves a checkpoint and ends cleanly
    main()
