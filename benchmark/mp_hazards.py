"""Why dqn_atari_mp.py's queue carries only small messages: both hazards, shown with real processes.

    python benchmark/mp_hazards.py                # 5 tries of each
    python benchmark/mp_hazards.py --tries 20

(a) A large message (226 KB: a worker's 32 frames) on a `torch.multiprocessing` queue, its writer
    killed while it writes it (the pipe full, its 64 KiB taken): the reader gets the header and
    waits for the rest. Counted as hung where `get(timeout=1)` has not returned 10 s later.
(b) Small messages, (worker, batch number) as dqn_atari_mp.py's workers put them, their writer
    killed at a random moment while it waits on a full pipe: the reader then gets every message
    the pipe holds; each must be whole, in order.
Each try's writer is a process of its own (spawned, as the script's workers); a reader left
waiting in (a) is a thread this tool leaves behind when it exits.
"""

import argparse
import os
import queue
import random
import signal
import sys
import threading
import time

import torch.multiprocessing as mp

BATCH_BYTES = 32 * 84 * 84  # a worker's 32 frames


def large_writer(messages):
    while True:
        messages.put(bytes(BATCH_BYTES))


def small_writer(messages):
    for batch in range(2**62):
        messages.put((1, batch))


def killed_writer(context, writer, delay):
    """A queue, and its writer SIGKILLed `delay` s after it started putting (its pipe full by then)."""
    messages = context.Queue()
    process = context.Process(target=writer, args=(messages,), daemon=True)
    process.start()
    messages.get(timeout=60)  # the writer has started
    time.sleep(delay)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    return messages


def reads_hang(messages, seconds=10):
    """Does reading the queue hang? (a reader thread, given `seconds` to get its messages)"""
    reader = threading.Thread(target=lambda: [messages.get(timeout=1) for _ in range(2)], daemon=True)
    reader.start()
    reader.join(seconds)
    return reader.is_alive()


def read_all(messages):
    """The messages a killed writer left, read until 1 s goes by without one: (count, whole and in order)."""
    got = []
    while True:
        try:
            got.append(messages.get(timeout=1))
        except queue.Empty:
            return len(got), got == [(1, got[0][1] + n) for n in range(len(got))] if got else True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=5, help="tries of each hazard")
    p.add_argument("--seed", type=int, default=1, help="seed of the kills' moments in (b)")
    args = p.parse_args(argv)
    if not 1 <= args.tries <= 1000:
        p.error(f"argument --tries: must be an integer from 1 to 1,000, got {args.tries}")
    if not hasattr(signal, "SIGKILL"):  # Windows
        p.exit(2, "mp_hazards.py: needs Linux or macOS (it kills its writers with SIGKILL)\n")
    context, rng = mp.get_context("spawn"), random.Random(args.seed)
    hung = sum(reads_hang(killed_writer(context, large_writer, 1.0)) for _ in range(args.tries))
    print(f"(a) a {BATCH_BYTES:,}-byte message, its writer killed mid-write: the reader hung {hung} of {args.tries} times")
    counts, whole = [], 0
    for _ in range(args.tries):
        count, in_order = read_all(killed_writer(context, small_writer, rng.uniform(0.2, 1.0)))
        counts.append(count)
        whole += in_order
    print(
        f"(b) (worker, batch) messages, their writer killed on a full pipe: {sum(counts):,} messages read, "
        f"all whole and in order in {whole} of {args.tries} tries"
    )
    return 0 if hung == args.tries and whole == args.tries else 1


if __name__ == "__main__":
    sys.exit(main())
