#!/usr/bin/env python3
"""Writes a synthetic community-structured row-set file for starling-coordinator placement.

Client i belongs to community i % communities. Each of its draws (--draws per client)
is, with probability 0.93, a row of its community's block (--block rows at offset
community * universe / communities, skewed towards the block's start: offset
floor(block * u^2)); with 0.06 a row of the hot set shared by all (the --hot rows at
the top of the universe); with 0.01 any row of the universe. Repeats are dropped.
With --scatter every row r becomes (r * 2654435761) mod universe (a bijection when the
universe is a power of two), as feature hashing scatters related rows over the
universe: contiguous row ranges then no longer follow the communities.
Seeded: the same arguments write the same file. The generator of tests/placement's
Catch2 instance is the same.
"""
import argparse
import random

p = argparse.ArgumentParser()
p.add_argument("--clients", type=int, default=400)
p.add_argument("--communities", type=int, default=8)
p.add_argument("--universe", type=int, default=1 << 20)
p.add_argument("--block", type=int, default=1024)
p.add_argument("--hot", type=int, default=256)
p.add_argument("--draws", type=int, default=300)
p.add_argument("--seed", type=int, default=1)
p.add_argument("--scatter", action="store_true")
p.add_argument("--out", required=True)
a = p.parse_args()
rng = random.Random(a.seed)
stride = a.universe // a.communities
with open(a.out, "w") as f:
    f.write(f"# {a.clients} clients in {a.communities} communities, universe {a.universe}, seed {a.seed}\n")
    for i in range(a.clients):
        k = i % a.communities
        rows = set()
        for _ in range(a.draws):
            x = rng.random()
            u = rng.random()
            if x < 0.93:
                rows.add(k * stride + int(a.block * u * u))
            elif x < 0.99:
                rows.add(a.universe - a.hot + int(a.hot * u))
            else:
                rows.add(int(a.universe * u))
        if a.scatter:
            rows = {r * 2654435761 % a.universe for r in rows}
        f.write(f"client-{i} " + " ".join(map(str, sorted(rows))) + "\n")
