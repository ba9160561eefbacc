#!/usr/bin/env python3
"""A model of the `10 x 5` rollout bench (benches/rollout.rs): how long greedy, first-come
node locks take to let H hosts each deploy N application nodes, one host per node at a time,
against the lower bound H x script.

Each host tries its pending nodes in plan order and takes the first free one; a host with
nothing free waits, and when a node is released one of the waiting hosts that still need it
takes it, chosen by `--policy`:
- `fifo` (the agent now): the host that has waited longest, as waiting in the queue of every
  wanted node gives;
- `least`: a host with the fewest nodes left first (the agent before: a host queued for its
  last node got a freed node first, the others raced);
- `random`: whoever's request reaches ZooKeeper first;
- `most`: the host with the most nodes left (what no lock offers; for comparison). A script lasts `script`
seconds plus up to `jitter`; a hand-off to another host takes `handoff` plus an exponential
tail of mean `tail` (the measured hand-offs have a median near 10 ms and a long tail on the
2-core machine); the same host goes on to its next node after `own` seconds.

    scripts/rollout-model.py [--policy fifo|least|random|most] [--handoff S] [--tail S]
                             [--jitter S] [--runs N]

Prints the median, mean and worst ratio to the bound over `runs` seeded runs.
"""
import argparse
import heapq
import random
import statistics


def rollout(hosts, nodes, script, jitter, handoff, tail, own, rng, policy="fifo"):
    pending = {h: list(range(nodes)) for h in range(hosts)}
    holder = [None] * nodes
    waiting = set(range(hosts))
    since = {h: 0.0 for h in range(hosts)}
    events = []

    def choose(takers):
        if policy == "fifo":
            return min(takers, key=lambda x: (since[x], rng.random()))
        if policy == "least":
            return min(takers, key=lambda x: (len(pending[x]), rng.random()))
        if policy == "most":
            return max(takers, key=lambda x: (len(pending[x]), rng.random()))
        return rng.choice(takers)

    def run(h, n, at):
        holder[n] = h
        pending[h].remove(n)
        waiting.discard(h)
        heapq.heappush(events, (at + script + rng.uniform(0, jitter), h, n))

    def delay():
        return handoff + (rng.expovariate(1 / tail) if tail > 0 else 0.0)

    arrivals = list(range(hosts))
    rng.shuffle(arrivals)
    for i, h in enumerate(arrivals):
        free = [n for n in pending[h] if holder[n] is None]
        if free:
            run(h, free[0], i * 0.001)
    end = 0.0
    while events:
        now, h, n = heapq.heappop(events)
        end = max(end, now)
        holder[n] = None
        free = [m for m in pending[h] if holder[m] is None]
        if free:
            run(h, free[0], now + own)
        elif pending[h]:
            waiting.add(h)
            since[h] = now
        if holder[n] is None:
            takers = [x for x in waiting if n in pending[x]]
            if takers:
                run(choose(takers), n, now + delay())
        for x in sorted(waiting):
            free = [m for m in pending[x] if holder[m] is None]
            if free:
                run(x, free[0], now + delay())
    return end


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=10)
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--script", type=float, default=0.2)
    p.add_argument("--jitter", type=float, default=0.01)
    p.add_argument("--handoff", type=float, default=0.008)
    p.add_argument("--tail", type=float, default=0.01)
    p.add_argument("--own", type=float, default=0.005)
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--policy", choices=["fifo", "least", "random", "most"], default="fifo")
    a = p.parse_args()
    bound = a.hosts * a.script
    ratios = [
        rollout(
            a.hosts, a.nodes, a.script, a.jitter, a.handoff, a.tail, a.own, random.Random(s),
            a.policy,
        )
        / bound
        for s in range(a.runs)
    ]
    print(
        f"{a.policy}: {a.hosts} hosts x {a.nodes} nodes, {a.script} s scripts (+{a.jitter} s), hand-off "
        f"{a.handoff * 1000:.0f} ms + tail {a.tail * 1000:.0f} ms: ratio to the {bound:.1f} s "
        f"bound median {statistics.median(ratios):.3f}, mean {statistics.mean(ratios):.3f}, "
        f"worst {max(ratios):.3f} ({a.runs} runs)"
    )


if __name__ == "__main__":
    main()
