#!/usr/bin/env python3
"""MPI smoke test: proves that every rank starts, can talk to every other rank, and that
the job's exit code reflects the result.

Each rank prints one line, `rank R of N on HOST`. Then all ranks sum their rank numbers
with an allreduce; rank 0 prints `sum of ranks 0..N-1 = X (expected X) OK` and every rank
exits 1 when the sum is wrong, so mpirun (and with it the job) fails.

Optional environment (set through `parameters:` in hvdctl.yaml):
  ROUNDS            how many allreduce rounds to run (default 1); each round but the last
                    prints `round K of R: ...` on rank 0
  INTERVAL_SECONDS  pause between rounds (default 0), handy to watch `hvdctl logs -f`
"""

import os
import socket
import sys
import time

from mpi4py import MPI


def env_number(name, default, kind):
    """Reads a number from the environment; an unset or empty variable gives the default."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        sys.exit("%s=%r is not a valid %s" % (name, text, kind.__name__))


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    size = comm.Get_size()
    host = MPI.Get_processor_name() or socket.gethostname()

    rounds = max(1, env_number("ROUNDS", 1, int))
    interval = max(0.0, env_number("INTERVAL_SECONDS", 0.0, float))

    print("rank %d of %d on %s" % (rank, size, host), flush=True)

    expected = size * (size - 1) // 2
    ok = True
    for round_no in range(1, rounds + 1):
        total = comm.allreduce(rank, op=MPI.SUM)
        good = total == expected
        ok = ok and good
        if rank == 0:
            line = "sum of ranks 0..%d = %d (expected %d) %s" % (
                size - 1, total, expected, "OK" if good else "WRONG")
            if round_no < rounds:
                line = "round %d of %d: %s" % (round_no, rounds, line)
            print(line, flush=True)
        if round_no < rounds and interval > 0:
            time.sleep(interval)

    # Everyone agrees on the verdict before anyone leaves, so no rank exits early while
    # others still wait in a collective.
    comm.Barrier()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
