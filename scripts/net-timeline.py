#!/usr/bin/env python3
"""Connections and Broadcast subscriptions per node of a kept localnet home, from its logs.

usage: scripts/net-timeline.py HOME [-v]

Needs the nodes run with the network's events logged:
  RUST_LOG=info,arc_malachitebft_network=trace,libp2p_scatter=debug ccron-malachite localnet ...
Prints, per node, every interval longer than 0.5 s during which a peer was connected but had not
announced its `/consensus` subscription (the engine's Broadcast sends nothing to such a peer:
libp2p-scatter announces subscriptions on a peer's first connection only); `-v` also prints
each node's connection timeline (`conn PEER N` / `close PEER N`: N connections left). Peers are
named by the last 4 characters of their libp2p peer id. See docs/malachite.md, "Process-level
faults", the net campaign's seeds 60 and 186.
"""
import glob
import re
import sys
from datetime import datetime

CONNECTED = re.compile(r"Connected to (\w+) with connection id (\d+)")
CLOSED = re.compile(r"ConnectionClosed: peer_id=(\w+), connection_id=(\d+), num_established=(\d+)")
SUBSCRIBED = re.compile(r"Peer (\w+) subscribed to Topic \{ len: (\d+), bytes: \[([0-9, ]+)\]")


def topic(m):
    n = int(m.group(2))
    return bytes(int(x) for x in m.group(3).split(",")[:n]).decode(errors="replace")


def at(line):
    return datetime.strptime(line[:26], "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    home, verbose = sys.argv[1], "-v" in sys.argv[2:]
    for log in sorted(glob.glob(home + "/node-*/node.log")):
        node = log.split("/")[-2]
        conns, subs, since, last = {}, {}, {}, None
        print(node)
        for line in open(log, errors="replace"):
            if not line.startswith("20"):
                continue
            t, peer = at(line), None
            last = t
            if m := CONNECTED.search(line):
                peer = m.group(1)[-4:]
                conns[peer] = conns.get(peer, 0) + 1
                verbose and print(f"  {line[11:23]} conn {peer} {conns[peer]}")
            elif m := CLOSED.search(line):
                peer = m.group(1)[-4:]
                conns[peer] = int(m.group(3))
                if conns[peer] == 0:
                    subs[peer] = set()
                verbose and print(f"  {line[11:23]} close {peer} {conns[peer]}")
            elif m := SUBSCRIBED.search(line):
                peer = m.group(1)[-4:]
                subs.setdefault(peer, set()).add(topic(m))
            if peer is None:
                continue
            for p in conns:
                mute = conns[p] > 0 and "/consensus" not in subs.get(p, set())
                if mute and p not in since:
                    since[p] = (t, line[11:23])
                elif not mute and p in since:
                    start, label = since.pop(p)
                    if t - start > 0.5:
                        print(f"  {p}: connected without /consensus from {label} for {t - start:.2f} s")
        for p, (start, label) in since.items():
            if last is not None and last - start > 0.5:
                print(f"  {p}: connected without /consensus from {label} to the end ({last - start:.2f} s)")


if __name__ == "__main__":
    main()
