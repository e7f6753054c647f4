"""dqn_atari_mp.py's worker processes: started out of reach of the terminal's stop signals, watched, stopped.

Nothing here changes what is learnt: the script's `worker` function plays and sends; these start it
in processes of their own, each with a pipe to the learner, and end them however the run ends."""

import multiprocessing.connection
import multiprocessing.resource_tracker
import signal
import time

from plumbing.run import STOP_SIGNALS


def start_workers(context, worker, count, *shared):
    """`count` processes of `context` (spawn: fork is unsafe with torch's threads and CUDA), each running
    worker(index, *shared, pipe); returns the pipes' read ends, the learner's, and the processes.

    A pipe a worker: if it dies, even halfway through a message, the learner reads an end (EOFError), not wait
    forever as on a queue shared by all; if the learner dies, the worker's next send fails and it ends. Ctrl-C
    and a closed terminal (sent to every process of the terminal) are blocked while the workers start: a worker
    keeps them blocked for good (a signal mask survives exec), the learner stops it before it saves the run; in
    the learner they wait till it unblocks them: none is lost. (Windows has no masks: a worker ignores SIGINT.)"""
    terminal_signals = [signum for signum in STOP_SIGNALS if signum != signal.SIGTERM]
    can_block = hasattr(signal, "pthread_sigmask")
    if can_block:
        # multiprocessing's resource tracker starts with the first worker otherwise, and unblocks SIGINT after
        multiprocessing.resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, terminal_signals)
    pipes, workers = [], []
    for index in range(count):
        pipe, worker_end = context.Pipe(duplex=False)
        workers.append(context.Process(target=worker, args=(index, *shared, worker_end), daemon=True))
        workers[-1].start()
        worker_end.close()
        pipes.append(pipe)
    if can_block:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, terminal_signals)
    return pipes, workers


def messages_waiting(pipes):
    """The pipes with a message to read, after up to 1 s."""
    try:
        return multiprocessing.connection.wait(pipes, timeout=1.0)
    except InterruptedError:  # Windows: Ctrl-C breaks the wait (after the stop signal's handler ran); Unix retries it
        return []


def dead_worker(workers):
    """Which worker has died and how, else None: a worker exits when told to, on an exception, or killed."""
    for index, process in enumerate(workers):
        if process.exitcode is not None:
            code = process.exitcode
            names = {number.value: number.name for number in signal.Signals}  # a real-time signal has none
            how = f"killed by {names.get(-code, f'signal {-code}')}" if code < 0 else f"exit code {code}"
            return f"worker {index} (pid {process.pid}) died: {how}"


def stop_workers(pipes, workers, stop):
    """Every worker ended and reaped (no zombie left while the evaluation runs), within 2 s."""
    stop.value = 1
    for pipe in pipes:
        pipe.close()  # a worker waiting to send gets BrokenPipeError and exits
    # A worker that plays sees the flag within a step; one still starting (importing torch) cannot
    # look before it plays, and nothing is lost by killing it.
    deadline = time.time() + 2
    for process in workers:
        process.join(timeout=max(deadline - time.time(), 0))
        process.kill()  # no-op for a worker that has exited
        process.join()
