"""The sitting of issue 63: dqn_atari_mp.py --workers-count 2 with its workers' pipes (a checkout of commit
110b02b) and with the queue (this checkout), learning and warm-up phases as experiments/dqn_speed.py times them,
with this checkout's dqn_atari.py as the yardstick, interleaved, the two orders in turn.

    git worktree add --detach /tmp/pipes 110b02b
    python experiments/results_mp_queue/sitting.py /tmp/pipes 3      # the pipes' checkout, rounds
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
import dqn_speed as ds  # noqa: E402

learn, warm = ds.LEARNING_FLAGS, ds.WARM_UP_FLAGS  # its phases: learning at epsilon's end; warm-up, 1 -> 0.92
mp = ["--workers-count", "2"]
pipes, rounds = sys.argv[1], int(sys.argv[2])
scripts = {
    "pipes": os.path.join(pipes, "dqn_atari_mp.py"),
    "queue": os.path.join(ROOT, "dqn_atari_mp.py"),
    "ref": os.path.join(ROOT, "dqn_atari.py"),
}
rates = {(s, ph): [] for s in scripts for ph in ("learning", "warm-up")}
for r in range(rounds):
    order = ["pipes", "queue"] if r % 2 == 0 else ["queue", "pipes"]
    for s in ["ref"] + order:
        for ph, flags in (("learning", learn), ("warm-up", warm)):
            rate = ds.phase_rate(scripts[s], flags + (mp if s != "ref" else []), learning=ph == "learning")
            rates[s, ph].append(rate)
            print(f"round {r + 1} {s:5s} {ph:8s} {rate:8.1f} steps/s", flush=True)
for ph in ("learning", "warm-up"):
    ref = np.array(rates["ref", ph])
    for s in ("pipes", "queue"):
        x = np.array(rates[s, ph]) / ref
        print(f"{ph:8s} {s}: {np.mean(x):.2f} x dqn_atari.py (per round: {', '.join(f'{v:.2f}' for v in x)})")
    q = np.array(rates["queue", ph]) / np.array(rates["pipes", ph])
    print(f"{ph:8s} queue / pipes per round: {', '.join(f'{v:.2f}' for v in q)}; mean {q.mean():.3f}, sd {q.std(ddof=1):.3f}")
