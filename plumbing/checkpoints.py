"""Checkpoints for --resume, the replay memory's files, the saved model, the lock on a run's directory.
Nothing here changes what is learnt: a checkpoint holds what the script handed over (networks, optimizer,
random streams, replay) and gives it back bit for bit. The first of the package's modules: it imports none
of the others (flags.py imports it, evaluation.py flags.py, run.py all three)."""

import collections
import contextlib
import errno
import os
import random
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

CHECKPOINT = "checkpoint.pt"
FORMAT = 2  # a checkpoint of an earlier version of the scripts (none, or another number) is refused, not misread
DISK_FULL = {errno.ENOSPC, errno.EDQUOT}  # a write that fails with these stops the run (Checkpoints.writing)


def save_atomically(data, path):
    """torch.save into PATH.tmp, on disk (fsync), renamed over PATH: a kill at any moment, even of the
    machine, leaves the old file or the new one, whole; so does a failed write (a full disk): PATH.tmp goes."""
    try:
        with open(path + ".tmp", "wb") as f:  # 'NAME.pt.tmp': no '*.pt' pattern takes it for a model
            torch.save(data, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.remove(path + ".tmp")
        if isinstance(error, OSError):
            error.filename = path  # what could not be written
        raise
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
    os.fsync(fd)
    os.close(fd)


HELD_RUN_DIRS = {}  # the run directories this process holds -> the descriptor that holds each


def hold_run_dir(run_dir):
    """Take RUN_DIR for as long as this process lives; False where another holds it (two writing one run's
    checkpoints would spoil them). flock's lock on the directory (Linux, macOS) goes when the process ends,
    kill -9 too, so a crashed run can be resumed; without one (Windows, or refused) the run goes unguarded."""
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


def read_checkpoint(run_dir):
    """RUN_DIR's checkpoint, read with weights_only (tensors, numbers, strings and containers: nothing in
    a run directory can run code), or None where it is truncated or not a checkpoint at all."""
    try:
        checkpoint = torch.load(os.path.join(run_dir, CHECKPOINT), map_location="cpu", weights_only=True)
    except Exception:
        return None
    keys = {"script", "args", "global_step", "finished", "resumable", "files"}
    return checkpoint if isinstance(checkpoint, dict) and keys <= checkpoint.keys() else None


class Checkpoints:
    """RUN_DIR/checkpoint.pt, all --resume needs, written every --save-every steps, on a stop and at the end;
    with --save-model the network alone too, NAME.pt (a finished run that goes on keeps it, writes NAME_2.pt).
    It holds the networks, the optimizer, numpy's Generator, the global random streams (numpy's, torch's,
    python's), the step and update counts, the last 100 scores, the flags and the replay's files' names:
    only what torch.load(weights_only=True) reads. Weights of nan or inf are never saved, and a write that
    finds the disk full leaves the last checkpoint whole: either stops the run (run.stop_if_diverged,
    run.disk_full) and the script's loop ends; nothing here ends the process."""

    def __init__(self, run, actions_count, network, optimizer, target_network, rng, replay):
        self.run, self.args, self.script, self.run_dir, self.actions_count = run, run.args, run.script, run.dir, actions_count
        self.network, self.optimizer, self.target_network, self.rng = network, optimizer, target_network, rng
        self.replay = replay  # (the target network, the Generator and the replay: None where the script has none)
        self.path, self.model_path = os.path.join(run.dir, CHECKPOINT), os.path.join(run.dir, f"{run.args.exp_name}.pt")
        self.saved_step = 0
        self.last_checkpoint = None  # the step of the last checkpoint on disk, --resume's to go on from; None: none yet

    @contextlib.contextmanager
    def writing(self):
        """A write that finds the disk full (or the quota used up) stops the run with what it was writing
        (run.disk_full); any other error goes on up."""
        try:
            yield
        except OSError as error:
            if error.errno not in DISK_FULL:
                raise
            self.run.disk_full(error.filename or self.run_dir)

    def save_every(self, step, updates):
        """The replay's new files as it fills, and a checkpoint every --save-every steps; nothing once the run failed."""
        if self.run.failure is not None:
            return
        with self.writing():
            if self.replay is not None:
                self.replay.keep_up()
        if step // self.args.save_every > self.saved_step // self.args.save_every and self.run.failure is None:
            self.save(step, updates)

    def save(self, step, updates, finished=False):
        """Write the checkpoint (and with --save-model the model); False where it was not: weights of nan or
        inf (--resume would diverge again) or a full disk, which stop the run, the last checkpoint as it was."""
        weights = torch.stack([w.detach().abs().max() for w in self.network.parameters()])  # nan or inf if any is
        if self.run.stop_if_diverged(weights, step):
            return False
        model = {"script": self.script, "env_id": self.args.env_id, "actions_count": int(self.actions_count)}
        model["state_dict"] = self.network.state_dict()
        checkpoint = dict(script=self.script, format=FORMAT, args=vars(self.args), global_step=step, updates=updates)
        resumable = not finished or self.args.keep_checkpoint
        if not resumable:  # the run's end: only what tells --resume that it has finished
            checkpoint |= dict(finished=True, resumable=False, replay=None, files=[])
        else:  # a model too (--eval-model plays it), and where --save-model writes: NAME.pt, or NAME_2.pt...
            checkpoint |= model | dict(model_file=os.path.basename(self.model_path), finished=finished, resumable=True)
            numpy_state, target_network, rng = np.random.get_state(), self.target_network, self.rng
            checkpoint["optimizer"] = self.optimizer.state_dict()
            checkpoint["target_network"] = None if target_network is None else target_network.state_dict()
            checkpoint["generator"] = None if rng is None else rng.bit_generator.state
            checkpoint["numpy_random"] = [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]]
            checkpoint["torch_random"] = torch.get_rng_state()
            checkpoint["cuda_random"] = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []  # CUDA's only
            checkpoint["python_random"] = random.getstate()
            checkpoint["returns"] = [float(score) for score in self.run.returns]
        with self.writing():
            if resumable:
                checkpoint["replay"] = None if self.replay is None else self.replay.save()  # its files' names
                checkpoint["files"] = [] if self.replay is None else self.replay.files()  # (path, size): checked by --resume
            if self.args.save_model:  # first: a kill between the two leaves the last checkpoint to go on from;
                save_atomically(model, self.model_path)  # the other way round, at the end, a finished run without its model
            save_atomically(plain(checkpoint), self.path)
            if self.replay is not None:
                self.replay.saved(checkpoint["replay"])
            self.saved_step, self.last_checkpoint = step, step if resumable else None
            return True
        return False

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
        step, ends = checkpoint["global_step"], 1
        self.model_path = os.path.join(self.run_dir, checkpoint["model_file"])
        while checkpoint["finished"] and os.path.exists(self.model_path):  # a finished run goes on: its model stays
            ends += 1
            self.model_path = os.path.join(self.run_dir, f"{self.args.exp_name}_{ends}.pt")
        if self.replay is not None:
            self.replay.load(checkpoint["replay"])
        self.run.returns.extend(checkpoint["returns"])  # the mean return goes on over the same last 100 games
        self.saved_step = self.last_checkpoint = step
        return step, checkpoint["updates"]

    def finish(self, step, updates):
        """The run's end: the last checkpoint, and with --keep-checkpoint all of it (the replay's files
        too): --resume with a larger --total-timesteps can then go on. Without, the replay's files go
        (not where the checkpoint could not be written: the last one still needs them)."""
        if self.save(step, updates, finished=True) and self.replay is not None and not self.args.keep_checkpoint:
            self.replay.delete()


CHUNK_TRANSITIONS = 8192  # the replay goes to disk 8,192 transitions (58 MB) at a time
REPLAY_BYTES_PER_TRANSITION = 84 * 84 + 1 + 1 + 3  # a frame, action, reward, 3 flags


# The contract a script's replay memory keeps for --resume: ReplayFiles reads these of it, and nothing else.
# A ring of `rows` rows and one column an environment (or worker); `pos` and `full` say where its next row
# goes and whether it has gone round: one number and one bool for all its columns, filled at once, or one of
# each per column (numpy arrays of shape (columns,), dqn_atari_mp.py's: its workers fill theirs at their own
# pace). Renaming one, or changing its shape, breaks --resume: Run.start refuses such a replay, naming it.
REPLAY_FIELDS = {
    "frames": "an array of (rows, columns, ...): each row's newest frame",
    "actions": "an array of (rows, columns): the action taken",
    "rewards": "an array of (rows, columns): the clipped reward",
    "dones": "an array of (rows, columns): the episode ended there, for learning",
    "agent_acted": "an array of (rows, columns): a transition, not a step played for the agent",
    "firsts": "an array of (rows, columns): the frame opened an episode",
    "rows": "an integer: the ring's length, frames.shape[0]",
    "pos": "the next row: an integer, or an integer array of (columns,), one a column",
    "full": "the ring has gone round: a bool, or a bool array of (columns,) (as pos)",
}
ARRAY_FIELDS = ["frames", "actions", "rewards", "dones", "agent_acted", "firsts"]  # written to the files, in this order


def replay_problem(replay):
    """What of REPLAY_FIELDS the replay lacks or holds otherwise, in one line; None where it keeps the contract."""

    def broken(name):
        return f"--resume needs the replay's `{name}`, {REPLAY_FIELDS[name]} (see plumbing/checkpoints.py, REPLAY_FIELDS)"

    for name in REPLAY_FIELDS:
        if not hasattr(replay, name):
            return broken(name)
    if not isinstance(replay.rows, (int, np.integer)) or np.ndim(replay.frames) < 2 or replay.frames.shape[0] != replay.rows:
        return broken("rows" if np.ndim(replay.frames) >= 2 else "frames")
    columns = replay.frames.shape[1]
    for name in ARRAY_FIELDS:
        if not isinstance(getattr(replay, name), np.ndarray) or getattr(replay, name).shape[:2] != (replay.rows, columns):
            return broken(name)
    if isinstance(replay.pos, np.ndarray):  # one a column
        if replay.pos.shape != (columns,) or replay.pos.dtype.kind not in "iu":
            return broken("pos")
        if not isinstance(replay.full, np.ndarray) or replay.full.shape != (columns,) or replay.full.dtype != bool:
            return broken("full")
    elif not isinstance(replay.pos, (int, np.integer)):
        return broken("pos")
    elif not isinstance(replay.full, (bool, np.bool_)):
        return broken("full")
    return None


def write_rows(path, arrays):
    """Arrays one after the other in .npy format (np.load reads them back in turn), in blocks of rows:
    a slice of the ring needs no copy of its own. Then fsync: whole on disk before a checkpoint names it.
    A write that fails (a full disk) leaves no part of the file, and says which it was."""
    try:
        with open(path, "wb") as f:
            for array in arrays:
                np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
                for start in range(0, len(array), 1024):
                    f.write(np.ascontiguousarray(array[start : start + 1024]).data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        with contextlib.suppress(OSError):
            os.remove(path)
        error.filename = path
        raise


class ReplayFiles:
    """The replay memory on disk for --resume, never written whole (1M transitions are 7 GB). New rows go
    into files under RUN_DIR/replay as they come (up to CHUNK_TRANSITIONS and a quarter of the ring a file,
    written in a background thread, never modified); a checkpoint writes the rows since the last file and
    names the files that hold the ring then, from which alone --resume rebuilds it. A file all overwritten
    goes once a checkpoint that does not name it is on disk. What it reads of the replay: REPLAY_FIELDS. A ring
    with one position (replay.pos a number) fills its columns at once; one with a position per column
    (dqn_atari_mp.py's: a worker each) has files per column."""

    def __init__(self, replay, run_dir, batch_rows=1):
        self.replay, self.run_dir = replay, run_dir
        columns = replay.frames.shape[1]
        self.chunk_rows = max(1, min(CHUNK_TRANSITIONS // columns, replay.rows // 4))
        self.each_column = isinstance(replay.pos, np.ndarray)  # a position per column (REPLAY_FIELDS)
        self.parts = [slice(None)] if not self.each_column else list(range(columns))  # a file's columns
        # A ring so small (a test's) that its rows not yet in a file and a batch of rows can go round it:
        # its position cannot tell how many rows came in, so each checkpoint writes it whole instead.
        self.whole = replay.rows < self.chunk_rows + batch_rows
        self.written_to = [0] * len(self.parts)  # the ring row where each part's rows not in a file yet start
        self.chunks = [collections.deque() for _ in self.parts]  # each part's (path, first row, rows), oldest first
        self.named, self.retired = set(), []  # named by the last checkpoint; of those, the ones the next will not name
        self.count = 0  # files written: the next one's number
        self.thread, self.writing = ThreadPoolExecutor(max_workers=1), None  # writing the newest file
        self.fields = [getattr(replay, name) for name in ARRAY_FIELDS]

    def position(self, part):
        """The part's ring position and whether it is full."""
        if self.each_column:
            return int(self.replay.pos[part]), bool(self.replay.full[part])
        return int(self.replay.pos), bool(self.replay.full)

    def keep_up(self):
        """Once a step (or a worker's batch): a file for each part with chunk_rows new rows in."""
        for part in range(len(self.parts)):
            if not self.whole and (self.position(part)[0] - self.written_to[part]) % self.replay.rows >= self.chunk_rows:
                self.write(part, in_background=True)

    def write(self, part, in_background):
        """A part's rows from written_to to its position: one file, or two where the ring wraps."""
        if self.writing is not None:  # one file at a time: its rows, read in place, cannot be overwritten meanwhile
            self.writing.result()  # (raises what the thread raised: a full disk)
        os.makedirs(os.path.join(self.run_dir, "replay"), exist_ok=True)
        (pos, full), ring = self.position(part), self.replay.rows
        filled = ring if full else pos
        rows = filled if self.whole else (pos - self.written_to[part]) % ring
        first = (pos - rows) % ring
        while rows > 0:
            count = min(rows, ring - first)
            path = f"replay/{self.count:06d}.npy"  # "/" on every system: a run made on one resumes on another
            arrays = [field[first : first + count, self.parts[part]] for field in self.fields]
            if in_background:
                self.writing = self.thread.submit(write_rows, os.path.join(self.run_dir, path), arrays)
            else:
                write_rows(os.path.join(self.run_dir, path), arrays)
            self.chunks[part].append((path, first, count))
            self.count, first, rows = self.count + 1, (first + count) % ring, rows - count
        self.written_to[part] = first
        # the oldest file goes once the newer ones hold all the part's rows: they are all overwritten
        while len(self.chunks[part]) > 1 and sum(chunk[2] for chunk in list(self.chunks[part])[1:]) >= filled:
            path = self.chunks[part].popleft()[0]
            if path in self.named:
                self.retired.append(path)  # the last checkpoint still needs it
            else:
                self.thread.submit(os.remove, os.path.join(self.run_dir, path))  # (deleting tens of MB takes a while)

    def save(self):
        """At a checkpoint: the rows since the last files, then the state it saves (the files' names)."""
        for part in range(len(self.parts)):
            self.write(part, in_background=False)  # (after the file in the background: write waits for it first)
        sync_dir(os.path.join(self.run_dir, "replay"))
        positions = [self.position(part) for part in range(len(self.parts))]
        return {"pos": [p for p, _ in positions], "full": [f for _, f in positions], "chunks": [list(c) for c in self.chunks]}

    def files(self):
        return [(c[0], os.path.getsize(os.path.join(self.run_dir, c[0]))) for chunks in self.chunks for c in chunks]

    def saved(self, state):
        """The checkpoint that names `state`'s files is on disk: the files only the previous one named go."""
        for path in self.retired:
            self.thread.submit(os.remove, os.path.join(self.run_dir, path))
        self.retired, self.named = [], {c[0] for chunks in state["chunks"] for c in chunks} if state else set()

    def load(self, state):
        """--resume: the ring as the checkpoint saw it, from the files it names (and nothing else)."""
        os.makedirs(os.path.join(self.run_dir, "replay"), exist_ok=True)
        for part, chunks in enumerate(state["chunks"]):
            for path, first, count in chunks:
                with open(os.path.join(self.run_dir, path), "rb") as f:
                    for field in self.fields:
                        field[first : first + count, self.parts[part]] = np.load(f, allow_pickle=False)
        if self.each_column:
            self.replay.pos[:], self.replay.full[:] = state["pos"], state["full"]
        else:
            self.replay.pos, self.replay.full = state["pos"][0], state["full"][0]
        self.written_to = list(state["pos"])
        self.chunks = [collections.deque(tuple(chunk) for chunk in chunks) for chunks in state["chunks"]]
        self.named = {chunk[0] for chunks in self.chunks for chunk in chunks}
        self.count = 1 + max((int(os.path.basename(path)[:-4]) for path in self.named), default=-1)
        for name in os.listdir(os.path.join(self.run_dir, "replay")):  # written after the checkpoint, or cut by the kill
            if f"replay/{name}" not in self.named:
                os.remove(os.path.join(self.run_dir, "replay", name))

    def delete(self):
        self.thread.shutdown()  # its writing and deleting done
        shutil.rmtree(os.path.join(self.run_dir, "replay"), ignore_errors=True)
