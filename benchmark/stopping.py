"""How a benchmark tool ends when it is stopped: Ctrl-C (SIGINT), kill (SIGTERM) or a closed terminal
(SIGHUP) raises `Stopped` where the tool is, so that its `finally` and `with` blocks run (the runs it
started are killed, its temporary folders deleted); then one line, no traceback, and the exit status
128 + the signal's number (130, 143, 129), as the training scripts end."""

import os
import signal
import sys

STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


class Stopped(BaseException):  # not an Exception: no `except Exception` of a tool keeps it from ending
    pass


def on_stop_signal(signum, frame):
    raise Stopped(signum)


def run_until_stopped(main):
    """main(), its exit status; or, stopped, 128 + the signal's number once its cleanup has run."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, on_stop_signal)
    try:
        return main()
    except Stopped as stop:
        signum = stop.args[0]
        print(f"{os.path.basename(sys.argv[0])}: stopped by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum
