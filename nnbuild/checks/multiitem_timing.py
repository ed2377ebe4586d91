"""The host's timed Petri net on measured times, with the synchronisation charged.

Each item is a chain of actions in program order (run a segment, send a variable, get a variable:
the program-order net's control places); a get also waits for its variable's send (the net's
sync places), and under `sync=barrier` every party of a variable waits for all of them. The check
program time-stamps, per run: the inference call and its return, each item thread's start, and
each action's arrival and completion (and, under barriers, the writer's release). From these
stamps every cost of the net is measured on its own:

    segment   an item's segment, start to last transition (the items' computation)
    gap       an item's own code between two actions (packing copies, the event hooks)
    spawn     inference call -> the item's thread runs (thread creation, start delay)
    send      a send_var, arrival -> published (lock, copy)
    wake      a get_var, the later of {its arrival, the value published} -> copied: the hand-off's
              wait-to-wake latency (condition-variable wake-up, scheduling, lock, copy)
    release   (barrier) the barrier opens -> its writer runs on
    join      the last item's end -> the inference returns

The critical path of the net weighted by one run's costs is then that run's end-to-end time: the
check that it is never below the measured time fails as soon as the net lacks a dependency the
code has or a cost is not charged (without the synchronisation terms it fails in nearly every run,
which is why the host bound of segment times alone was unsound). The bound for runs not yet made
is the path of the worst cost of each term over the runs; `held_out` says how often runs outside
the calibration exceeded it.
"""

from collections import defaultdict

import numpy as np

from nnbuild.errors import NNBuildError

SYNC_TERMS = ("spawn", "send", "wake", "release", "join")
ITEM_TERMS = ("segment", "gap")


def action_codes(system, net):
    """(item, index) -> (kind, name, code of the transition stamped on arrival, code stamped on
    completion) for every action of every item."""
    code = {t.name: i for i, t in enumerate(net.transitions)}
    actions = {}
    for item in system.items:
        for k, (kind, name) in enumerate(item.actions):
            if kind == "run":
                seg = item.segments[name]
                first, last = code[f"{item.name}.{seg.instructions[0]}"], code[f"{item.name}.{seg.instructions[-1]}"]
            else:
                first = last = code[f"sync.{name}" if kind == "send" else f"get.{name}@{item.name}"]
            actions[(item.name, k)] = (kind, name, first, last)
    return actions


def run_stamps(system, actions, events, times, item_starts, t0, t_end):
    """One run's stamps (ns after the call): per item its start, per action its arrival,
    completion and (barrier send) release."""
    begins, done = defaultdict(list), {}
    for c, t in zip(events, times):
        c, t = int(c), int(t) - t0
        if c < 0:
            begins[-1 - c].append(t)
        else:
            done[c] = t
    stamps = {"end": int(t_end) - t0,
              "start": {item.name: int(s) - t0 for item, s in zip(system.items, item_starts)}, "actions": {}}
    for key, (kind, name, first, last) in actions.items():
        if not begins.get(first) or last not in done:
            raise NNBuildError(f"item {key[0]}: {kind} {name} has no time stamp in the recorded run")
        stamp = {"arrive": begins[first][0], "done": done[last]}
        if kind == "send" and len(begins[first]) > 1:
            stamp["release"] = begins[first][1]
        stamps["actions"][key] = stamp
    return stamps


class _Net:
    """Who waits for whom in the timed net of one system and threading."""

    def __init__(self, system, sync):
        self.system, self.sync = system, sync
        self.sender = {}
        self.getters = defaultdict(list)
        for item in system.items:
            for k, (kind, name) in enumerate(item.actions):
                if kind == "send":
                    self.sender[name] = (item.name, k)
                elif kind == "get":
                    self.getters[name].append((item.name, k))

    def action(self, key):
        return self.system.item(key[0]).actions[key[1]]

    def last(self, item):
        return (item.name, len(item.actions) - 1)


def measured_costs(system, sync, stamps):
    """Every cost of the timed net in one run, measured from its stamps (see the module doc)."""
    net = _Net(system, sync)
    a = stamps["actions"]

    def after(key):   # when the item runs on after the action
        return a[key].get("release", a[key]["done"])

    def opened(name):   # a barrier opens when its writer has published and every reader has arrived
        return max([a[net.sender[name]]["done"]] + [a[g]["arrive"] for g in net.getters[name]])

    costs = {("spawn", item.name): stamps["start"][item.name] for item in system.items}
    for key, stamp in a.items():
        kind, name = net.action(key)
        item, k = key
        costs[("gap",) + key] = stamp["arrive"] - (stamps["start"][item] if k == 0 else after((item, k - 1)))
        if kind == "get":
            ready = opened(name) if sync == "barrier" else max(stamp["arrive"], a[net.sender[name]]["done"])
            costs[("wake",) + key] = stamp["done"] - ready
        else:
            costs[("segment" if kind == "run" else "send",) + key] = stamp["done"] - stamp["arrive"]
        if "release" in stamp:
            costs[("release",) + key] = stamp["release"] - opened(name)
    costs[("join",)] = stamps["end"] - max(after(net.last(i)) for i in system.items)
    return costs


def critical_path(system, sync, costs, charged=SYNC_TERMS + ITEM_TERMS):
    """The end-to-end time of the timed net weighted by `costs` (terms not in `charged` cost 0),
    and the share of each term on its critical path: (ns, {term: ns})."""
    net = _Net(system, sync)
    memo = {}

    def plus(path, term, key):
        ns = costs.get((term,) + key, 0) if term in charged else 0
        share = dict(path[1])
        share[term] = share.get(term, 0) + ns
        return (path[0] + ns, share)

    def latest(*paths):
        return max(paths, key=lambda p: p[0])

    def remembered(compute):
        def lookup(key):
            if (compute, key) not in memo:
                memo[(compute, key)] = compute(key)
            return memo[(compute, key)]
        return lookup

    @remembered
    def arrive(key):
        item, k = key
        before = plus((0, {}), "spawn", (item,)) if k == 0 else after((item, k - 1))
        return plus(before, "gap", key)

    @remembered
    def done(key):
        kind, name = net.action(key)
        if kind != "get":
            return plus(arrive(key), "segment" if kind == "run" else "send", key)
        ready = opened(name) if sync == "barrier" else latest(arrive(key), done(net.sender[name]))
        return plus(ready, "wake", key)

    def after(key):
        kind, name = net.action(key)
        return plus(opened(name), "release", key) if kind == "send" and sync == "barrier" else done(key)

    @remembered
    def opened(name):
        return latest(done(net.sender[name]), *[arrive(g) for g in net.getters[name]])

    return plus(latest(*[after(net.last(i)) for i in system.items]), "join", ())


def worst_costs(runs):
    """Each term's worst cost over the runs (the costs of a bound for runs not yet made)."""
    worst = {}
    for costs in runs:
        for key, ns in costs.items():
            worst[key] = max(worst.get(key, ns), ns)
    return worst


def soundness(system, sync, runs):
    """The timing record of a set of runs [(costs, measured end-to-end ns)]: in how many the
    measured time is within the critical path of the run's costs (gated), and without the
    synchronisation terms (what the check would say if they were not charged); the bound of the
    worst costs over all runs, and over the first half only, checked on the second half."""
    paths, bare, measured, shares = [], [], [], defaultdict(list)
    for costs, end_to_end in runs:
        path, share = critical_path(system, sync, costs)
        paths.append(path)
        bare.append(critical_path(system, sync, costs, charged=ITEM_TERMS)[0])
        measured.append(end_to_end)
        for term in SYNC_TERMS + ITEM_TERMS:
            shares[term].append(share.get(term, 0))
    measured, paths, bare = np.asarray(measured), np.asarray(paths), np.asarray(bare)
    within = measured <= paths
    bound = critical_path(system, sync, worst_costs(c for c, _ in runs))[0]
    half = len(runs) // 2
    held_bound = critical_path(system, sync, worst_costs(c for c, _ in runs[:half]))[0] if half else None
    record = {
        "runs": len(runs), "within_critical_path": int(within.sum()),
        "first_violation": None if within.all() else
        f"run {int(np.argmin(within))}: measured end-to-end {int(measured[~within][0])} ns > critical path "
        f"{int(paths[~within][0])} ns of its measured segment and synchronisation costs",
        "within_without_sync_costs": int((measured <= bare).sum()),
        "median_end_to_end_ns": float(np.median(measured)), "max_end_to_end_ns": int(measured.max()),
        "median_critical_path_ns": float(np.median(paths)),
        "median_critical_path_without_sync_ns": float(np.median(bare)),
        "median_share_on_critical_path_ns": {t: float(np.median(v)) for t, v in sorted(shares.items())},
        "bound_of_worst_costs_ns": int(bound),
        "held_out": None if not half else {
            "calibration_runs": half, "bound_ns": int(held_bound),
            "checked_runs": len(runs) - half, "within": int((measured[half:] <= held_bound).sum())}}
    return record
