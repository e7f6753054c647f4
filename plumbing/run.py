"""A run: its directory, TensorBoard (and W&B) logs, the progress line, stop signals, checkpoints, the end.
Nothing here changes what is learnt: `Run.start` only saves and restores what the main loop hands it;
the loop asks `run.stopped` whether Ctrl-C, kill or a closed terminal came, or the run failed (nan or inf,
a full disk), and `run.end` ends the process. The last of the package's modules: it imports the other three."""

import collections
import multiprocessing.resource_tracker
import os
import shlex
import signal
import stat
import sys
import time

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

from plumbing.checkpoints import DISK_FULL, Checkpoints, ReplayFiles, hold_run_dir, read_checkpoint, replay_problem
from plumbing.evaluation import evaluate_and_log
from plumbing.flags import CHANGEABLE

# Ctrl-C (SIGINT), kill (SIGTERM) and a closed terminal (SIGHUP, not on Windows) once run as a script
STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
stop_signals = []  # the ones received: the main loop ends at its top


def on_stop_signal(signum, frame):
    stop_signals.append(signum)  # no exception: nothing is cut in half, and a second one while saving waits
    if signum not in (signal.SIGINT, signal.SIGTERM):  # SIGHUP, a closed terminal: printing to it would fail (EIO)
        for fd in (1, 2):
            if stat.S_ISCHR(os.fstat(fd).st_mode) and not os.isatty(fd):  # a terminal that has hung up
                os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


def catch_stop_signals():
    """Run as a script: Ctrl-C, kill or a closed terminal end the run cleanly (nohup's ignored SIGHUP stays ignored)."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN or signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, on_stop_signal)


def play_evaluation(network, evaluate, args, run_dir, writer, device, model_path=""):
    """evaluate_and_log's games, the logs flushed first: only games are left, nothing to save, so Ctrl-C, kill or
    a closed terminal ends them at once, as by default (nohup's ignored SIGHUP stays ignored)."""
    writer.flush()
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is on_stop_signal:
            signal.signal(signum, signal.SIG_DFL)
            if signum in stop_signals:  # one that came before, as the model loaded: it ends them now
                signal.raise_signal(signum)
    evaluate_and_log(network, evaluate, args, run_dir, writer, device, model_path)


def start_workers(context, worker, count, *shared):
    """dqn_atari_mp.py's `count` workers, processes of `context` each running worker(index, *shared); returns the
    processes. Ctrl-C and a closed terminal (sent to all its processes) are blocked as they start: a worker keeps
    them blocked (a mask survives exec; on Windows, without masks, it ignores SIGINT) and the learner stops it;
    the learner's wait till unblocked."""
    terminal_signals = [signum for signum in STOP_SIGNALS if signum != signal.SIGTERM]
    can_block = hasattr(signal, "pthread_sigmask")
    if can_block:
        # multiprocessing's resource tracker starts with the first worker otherwise, and unblocks SIGINT after
        multiprocessing.resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, terminal_signals)
    workers = [context.Process(target=worker, args=(index, *shared), daemon=True) for index in range(count)]
    for process in workers:
        process.start()
    if can_block:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, terminal_signals)
    return workers


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


def start_wandb(args, run_dir):
    """--track: a W&B run as CleanRL's start it, mirroring TensorBoard (so before the writer opens), with the
    flags, the run directory's name and the code; its id is kept in the run directory for --resume to go on."""
    import wandb

    id_path = os.path.join(run_dir, "wandb_run_id")
    if not os.path.exists(id_path):
        with open(id_path, "w") as f:
            f.write(os.urandom(4).hex())  # 8 random hex digits: the W&B run's id
    with open(id_path) as f:
        run_id = f.read().strip()
    wandb.tensorboard.patch(root_logdir=run_dir)  # told, not guessed: wandb would wait 10 s to guess it
    run = dict(project=args.wandb_project_name, entity=args.wandb_entity, name=os.path.basename(run_dir), id=run_id)
    try:
        wandb.init(**run, config=vars(args), sync_tensorboard=True, save_code=True, resume="allow")
    except wandb.errors.Error as error:  # no network, or W&B refused: nothing logged yet
        if args.resume is None:  # a new run's directory holds the id alone
            os.remove(id_path)
            os.rmdir(run_dir)
        reason = " ".join(str(error).split())
        sys.exit(f"error: --track: W&B did not start the run ({reason}). Or keep it on disk: WANDB_MODE=offline")


class Logs:
    """`run.writer`: TensorBoard's SummaryWriter, whose events a thread of its own writes; where that finds the
    disk full, the next call here stops the run (run.disk_full) instead of raising in the script's loop."""

    def __init__(self, writer, run):
        self.writer, self.run = writer, run

    def __getattr__(self, name):
        method = getattr(self.writer, name)

        def unless_the_disk_is_full(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except OSError as error:
                if error.errno not in DISK_FULL:
                    raise
                events = getattr(getattr(getattr(self.writer, "file_writer", None), "event_writer", None), "_file_name", None)
                self.run.disk_full(error.filename or events or f"{self.run.dir}'s TensorBoard events")

        return unless_the_disk_is_full if callable(method) else method


def time_left(steps_left, steps_per_second):
    """steps_left's time at steps_per_second, rounded down to the minute: '1h38m'; '?' where no step was made."""
    if steps_per_second <= 0:
        return "?"
    minutes = int(max(steps_left, 0) / steps_per_second) // 60
    return f"{minutes // 60}h{minutes % 60:02d}m"


class Run:
    """One run of a script, from its directory to its end: all a main loop needs that changes nothing learnt.
    Run(args, script, device) makes the run's directory (runs/ENV__EXP__SEED__TIME, never an earlier one's)
    or takes --resume's, and opens TensorBoard there (`run.writer`; after the W&B run of --track). Resumed,
    purge_step hides what the killed run logged after its checkpoint: no step is logged twice, curves join."""

    def __init__(self, args, script, device):
        self.args, self.script, self.device = args, script, device
        self.failure = None  # why the run must end, exit status 1 (nan or inf, a full disk): then `stopped`
        if args.resume is None:
            exp_name = args.exp_name + ("_eval" if args.eval_model else "")  # watching a saved agent: a run of its own kind
            self.dir = new_run_dir(f"{args.env_id.replace('/', '-')}__{exp_name}__{args.seed}__{int(time.time())}")
            self.checkpoint, step = None, 0
        else:
            self.dir, self.checkpoint = args.resume, read_checkpoint(args.resume)
            step = self.checkpoint["global_step"]
        if args.track:
            start_wandb(args, self.dir)
        self.checkpoints = None  # made by start()
        self.last_charts = ()  # the charts of the last step_done
        # what was logged at the checkpoint's step itself came before the save
        self.writer = Logs(SummaryWriter(self.dir, purge_step=None if self.checkpoint is None else step + 1), self)
        table = "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items())
        self.writer.add_text("hyperparameters", table, step)  # a resumed run's at its first step: the flags it changed show
        self.returns = collections.deque(maxlen=100)  # the last 100 games' scores: the main loop adds each game's

    @property
    def stopped(self):
        """Ctrl-C, kill or a closed terminal came, or the run failed: the main loop ends, and `run.end` ends the run."""
        return bool(stop_signals) or self.failure is not None

    def start(self, actions_count, network, optimizer, target_network=None, rng=None, replay=None, replay_batch=1):
        """What checkpoints save (with the global random streams), handed over: the networks, the optimizer, numpy's
        Generator, the replay (its files kept as it fills; replay_batch: the rows it takes at once, in each column;
        what it must hold: plumbing/checkpoints.py, REPLAY_FIELDS). Returns the step and update counts: 0, 0, or
        --resume's, with all these restored bit for bit (not the games)."""
        if replay is not None and (problem := replay_problem(replay)):
            self.close_logs()
            sys.exit(f"error: {problem}")
        replay_files = None if replay is None else ReplayFiles(replay, self.dir, replay_batch)
        self.checkpoints = Checkpoints(self, actions_count, network, optimizer, target_network, rng, replay_files)
        step, updates = self.checkpoints.restore(self.checkpoint)
        if self.checkpoint is not None:
            saved = self.checkpoint["args"]
            changed = [
                f", --{k.replace('_', '-')} {v} (was {saved[k]})"
                for k, v in vars(self.args).items()
                if k in CHANGEABLE and saved.get(k, v) != v
            ]
            print(f"{self.dir}: resumed at step {step:,}" + "".join(changed), flush=True)
        # steps/s from this process's first step on, from now (after --resume's loading of the replay: minutes maybe)
        self.first_step, self.start_time = step, time.time()
        self.last_print, self.recent_prints = self.start_time, collections.deque([(self.start_time, step)], maxlen=13)
        self.warm_up = getattr(self.args, "learning_starts", None)  # the DQN scripts': no updates, several times faster
        print(f"{self.dir}: {self.args.env_id}, {self.args.total_timesteps:,} steps on {self.device}", flush=True)
        return step, updates

    def step_done(self, step, updates, charts=()):
        """The end of a step (a rollout's and its update's in A2C, PPO, PQN), the same call in every script:
        every 5 s the progress line, charts/SPS and the charts given (and charts/updates where updates wait for
        a warm-up: the DQN scripts'); every --save-every steps a checkpoint. Nothing here changes what is learnt."""
        self.show(step, updates, charts)
        self.last_charts = charts  # logged again at the run's last step, if a rollout cut short there comes after
        self.checkpoints.save_every(step, updates)

    def show(self, step, updates, charts=()):
        """The progress line every 5 s (steps/s, time left, updates, the mean of `run.returns`) and its charts.
        Time left is at about the last minute's rate; once updates start after --learning-starts steps
        (a warm-up several times faster), that rate starts again."""
        total = self.args.total_timesteps
        if time.time() - self.last_print > 5 or step >= total:
            self.last_print = time.time()
            self.writer.add_scalar("charts/SPS", (step - self.first_step) / (self.last_print - self.start_time), step)
            for tag, value in dict(charts).items():
                self.writer.add_scalar(tag, value, step)
            if self.warm_up is not None:
                self.writer.add_scalar("charts/updates", updates, step)
            self.recent_prints.append((self.last_print, step))
            rate = (step - self.recent_prints[0][1]) / (self.last_print - self.recent_prints[0][0])
            print(
                f"step {step:,}/{total:,} | {rate:,.0f} steps/s | {time_left(total - step, rate)} left"
                f" | updates {updates:,} | mean return (last {len(self.returns)} games) "
                f"{f'{np.mean(self.returns):.1f}' if self.returns else '-'}",
                flush=True,
            )
        rate_counts_warm_up = self.warm_up is not None and updates and self.recent_prints[0][1] <= self.warm_up
        if rate_counts_warm_up:  # updates have begun: the rate starts again, without the warm-up's fast steps
            self.last_print = time.time()
            self.recent_prints = collections.deque([(self.last_print, step)], maxlen=13)

    def stop_if_diverged(self, result, step):
        """A loss or output of nan or inf: training has diverged (a learning rate too high?) and will not come back.
        True, and the run stops (`stopped`): the loop ends before another update, no checkpoint is written, and
        `run.end` exits with status 1 and one line, its last checkpoint as it was, not hours later or in a traceback."""
        if result.isfinite().all():
            return False
        if self.failure is None:
            self.failure = (
                f"nan or inf at step {step:,}: training diverged (is --learning-rate too high?); "
                f"{self.dir}'s last checkpoint, if any, is from before"
            )
        return True

    def disk_full(self, path):
        """A write of PATH found the disk full: the run stops (`stopped`), writes nothing more, and `run.end` exits
        with status 1 and one line saying what to do; the last checkpoint, and the replay's files it names, are whole."""
        step = None if self.checkpoints is None else self.checkpoints.last_checkpoint
        if step is None:
            go_on = "there is no checkpoint to go on from: free some space, then start the run again"
        else:
            go_on = f"the last checkpoint, step {step:,}, is intact: free some space, then python {self.script} --resume "
            go_on += shlex.quote(self.dir)
        if self.failure is None:
            self.failure = f"the disk is full: could not write {path}; {go_on}"

    def watch(self, network_class, evaluate):
        """--eval-model: play a saved model's games (model_error has checked it) and log them; no training."""
        args, device = self.args, self.device
        model = torch.load(args.eval_model, map_location=device, weights_only=True)
        network = network_class(model["actions_count"]).to(device)
        network.load_state_dict(model["state_dict"])
        print(f"{self.dir}: {args.eval_episodes} games of {args.env_id} by {args.eval_model} on {device}", flush=True)
        play_evaluation(network, evaluate, args, self.dir, self.writer, device)
        self.close_logs()
        return self.dir

    def end(self, network, evaluate, step, updates, failure=None):
        """After the main loop: a checkpoint; unless stopped or failed, --save-model's evaluation (the script's
        `evaluate`); exit 128 + the signal if stopped (130 Ctrl-C, 143 kill, 129 a closed terminal), 1 on a failure
        (dqn_atari_mp.py's dead worker, after a checkpoint; nan or inf, or a full disk, with nothing more written)."""
        checkpoints = self.checkpoints
        if self.failure is None and (failure or stop_signals):  # a checkpoint, flushed logs, how to go on; no evaluation
            if stop_signals:
                print(f"stopped by {signal.Signals(stop_signals[0]).name} at step {step:,}", flush=True)
            if checkpoints.save(step, updates):
                print(f"checkpoint saved; to go on: python {self.script} --resume {shlex.quote(self.dir)}", flush=True)
        elif self.failure is None:
            if self.recent_prints[-1][1] < step:  # the last progress line, at the run's end
                self.show(step, updates, self.last_charts)
            checkpoints.finish(step, updates)
        if self.args.save_model and self.failure is None:
            path = checkpoints.model_path
            print(f"model saved to {path} (watch it: python {self.script} --eval-model {path})", flush=True)
        if self.args.save_model and not (self.failure or failure or stop_signals):
            play_evaluation(network, evaluate, self.args, self.dir, self.writer, self.device, checkpoints.model_path)
        self.close_logs()
        if self.failure:
            sys.exit(f"error: {self.failure}")
        if failure or stop_signals:
            sys.exit(f"error: {failure}; the other workers were stopped" if failure else 128 + stop_signals[0])
        return self.dir

    def close_logs(self):
        """TensorBoard's events flushed and closed, then the W&B run of --track, which takes the last ones as it ends."""
        self.writer.close()
        if self.args.track:
            import wandb

            wandb.finish()
