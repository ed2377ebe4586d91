"""C for a multi-item system: each item's segments in an existing code shape (one function per
segment, generated as any model is), and one `<name>.c` that runs the items and their
`variablesync` exchanges.

Synchronisation (`sync=`):
  flags     host, one POSIX thread per item; each variable is a static buffer with a flag (values
            written, readers that have not copied the current one) under a mutex: a reader waits
            for its writer, a writer waits only when it would overwrite a value not yet read;
  barrier   host, one thread per item; the paper's variant: one pthread barrier per variable
            (writer and readers all wait on it);
  schedule  single core (AVR): no threads; every item's actions in one static order, a
            topological firing order of the items' program-order Petri net; a reader's get reads
            the writer's tensor in place (one memory, no copy).

Every transition the code fires calls NN_MI_EVENT(code), and each action NN_MI_BEGIN(code of its
first transition) when it starts (threads: a barrier's writer again when the barrier releases it;
both empty unless the includer defines them):
the check program records the order and nnbuild replays it on the Petri net (`<name>.net.json`
maps codes to transitions).
"""

from pathlib import Path

import numpy as np

from nnbuild import codegen, names
from nnbuild.codegen import multiitem_pool
from nnbuild.errors import NNBuildError
from nnbuild.ir import petri
from nnbuild.ir.multiitem import PACKED
from nnbuild.numerics import graph_plan

SYNCS = ("flags", "barrier", "schedule")
#: precisions generated: float32 in every CNN shape; fixed point in shape v2, each segment in the
#: formats the unsplit model's plan proved (graph_plan.segment_plan), handing int16 tensors on
PRECISIONS = ("float32", "q16-acc32", "q16", "q8")
FIXED_SHAPES = ("v2",)
#: the input box the fixed-point formats are proved over when none is given
INPUT_RANGE = (-1.0, 1.0)


def outputs(system):
    """Every file a generation of `system` writes (its own three, then each segment's)."""
    own = [f"{system.name}.h", f"{system.name}.c", f"{system.name}.net.json"]
    return own + [f for item in system.items for seg in item.segments for f in codegen.outputs(seg)]


def check(sync, precision, shape="v2"):
    if sync not in SYNCS:
        raise NNBuildError(f"sync '{sync}' is unknown (known: {', '.join(SYNCS)})")
    if precision not in PRECISIONS:
        raise NNBuildError(f"multi-item systems are generated in {', '.join(PRECISIONS)} "
                           f"(precision '{precision}' asked)")
    if precision != "float32" and shape not in FIXED_SHAPES:
        raise NNBuildError(f"multi-item systems are generated in fixed point by shape "
                           f"{', '.join(FIXED_SHAPES)} only (shape '{shape}' asked)")


def generate(system, outdir, *, shape, precision="float32", storage="const", sync="flags", passes_logs=None,
             input_range=INPUT_RANGE):
    """Write the system's C into outdir; returns the files written. Fixed-point formats are the
    unsplit model's, proved over `input_range`."""
    check(sync, precision, shape)
    codegen.check_model_name(system.name)
    written = []
    whole_plan = None if precision == "float32" else whole_fixed_plan(system, precision, input_range)
    for item in system.items:
        for seg in item.segments.values():
            log = (passes_logs or {}).get(seg.name, ())
            if whole_plan is None:
                written += codegen.generate(seg.model, outdir, shape=shape, precision=precision, storage=storage,
                                            passes_log=log)
            else:
                written += generate_fixed_segment(system, item, seg, whole_plan, outdir, storage, log)
    net = petri.item_net(system, program_order=True)
    pool = schedule_pool(system, net, outdir, precision) if sync == "schedule" else None
    files = {f"{system.name}.h": header(system), f"{system.name}.c": source(system, net, sync, precision, pool),
             f"{system.name}.net.json": net_record(system, net, sync)}
    codegen.write_all(Path(outdir), files)
    made = [Path(outdir) / n for n in files] + written
    missing = set(outputs(system)) - {p.name for p in made}
    if missing:
        raise NNBuildError(f"multi-item generation did not produce {sorted(missing)}")
    return made


def whole_fixed_plan(system, precision, input_range):
    """The unsplit model's fixed-point plan, whose formats every segment takes; a layer it has no
    fixed-point form for refuses the system in one line naming its file (e.g. a split model's
    residual Add, which reads back from NNEF as an element-wise layer)."""
    try:
        return graph_plan.quantize_graph(system.whole, precision, input_range)
    except NNBuildError as error:
        where = system.source_files[0] if system.source_files else None
        raise NNBuildError(f"multi-item system '{system.name}' is not generated in {precision}: {error}",
                           path=where) from None


def generate_fixed_segment(system, item, seg, whole_plan, outdir, storage, passes_log):
    """One segment in shape v2's fixed point with the unsplit model's formats: int16 in and out but
    where it reads the system input (rounded as the unsplit model rounds it) or writes the system
    output (scaled back to float as the unsplit model does)."""
    reads_input = system.input in seg.inputs
    if reads_input and len(seg.inputs) > 1:
        raise NNBuildError(f"item {item.name}: segment {seg.name} packs the system input with other tensors: "
                           "not generated in fixed point")
    for s in system.syncs.values():
        if s.writer == item.name and s.tensor in (system.input, system.output):
            raise NNBuildError(f"item {item.name}: variablesync {s.name} sends the system's "
                               f"{'input' if s.tensor == system.input else 'output'}: not generated in fixed point")
    received = {}
    for n in seg.inputs:
        tensor = _global(system, item, n)
        received.update({n: tensor, f"{PACKED}_{n}": tensor, f"{PACKED}_{n}_flat": tensor})
    if len(seg.inputs) > 1:
        received[PACKED] = _global(system, item, seg.inputs[0])   # the vector's nominal format: its parts have their own
    plan = graph_plan.segment_plan(whole_plan, seg.model, {k: v for k, v in received.items() if k != system.input})
    files = codegen.shape_module("v2").render(seg.model, precision=whole_plan.precision, storage=storage,
                                               passes_log=list(passes_log), plan=plan, int_input=not reads_input,
                                               int_output=seg.output != system.output)
    trace = f"{seg.model.name}.trace.json"
    files[trace] = codegen.portable_trace(files[trace])
    codegen.write_all(Path(outdir), files)
    return [Path(outdir) / n for n in codegen.outputs(seg.model.name, "v2")]


def net_record(system, net, sync):
    return {"system": system.name, "sync": sync, "items": [i.name for i in system.items],
            "transitions": [t.name for t in net.transitions],
            "schedule": [f"{item.name}.{kind}.{name}" for item, kind, name in action_order(system, net)]}


def _size(system, item, tensor):
    return int(np.prod(system.shapes[_global(system, item, tensor)]))


def _global(system, item, tensor):
    """The system-wide name of an item-local tensor (a get_var's local name -> the sent tensor)."""
    for sync in system.syncs.values():
        for reader, local in sync.readers:
            if reader == item.name and local == tensor:
                return sync.tensor
    return tensor


def header(system):
    up = system.name.upper()
    n_in, n_out = int(np.prod(system.input_shape)), int(np.prod(system.output_shape))
    items = ", ".join(i.name for i in system.items)
    return f"""/* {system.name}: multi-item system (items {items}), generated by nnbuild. Do not edit. */
#ifndef {up}_H
#define {up}_H

#define {up}_INPUTS {n_in}
#define {up}_OUTPUTS {n_out}
#define {up}_ITEMS {len(system.items)}

/* One inference through every item; 0, or non-zero when a thread could not be started. */
int {system.name}_infer(const float in[{up}_INPUTS], float out[{up}_OUTPUTS]);

#endif
"""


class _ItemBuffers:
    """Names of an item's buffers in the generated C."""

    def __init__(self, system, item, sync):
        self.system, self.item, self.sync = system, item, sync

    def buffer(self, tensor):
        if tensor == self.system.input:
            return "nn_mi_in"
        if tensor == self.system.output:
            return "nn_mi_out"
        if self.sync == "schedule":
            got = self.got(tensor)
            if got is not None:
                return _ItemBuffers(self.system, self.system.item(got.writer), self.sync).buffer(got.tensor)
        return f"nn_mi_t_{self.item.name}_{tensor}"

    def got(self, tensor):
        for sync in self.system.syncs.values():
            if (self.item.name, tensor) in sync.readers:
                return sync
        return None

    def local_buffers(self):
        """Tensors the item keeps in its own static buffers: segment outputs and gets."""
        tensors = [seg.output for seg in self.item.segments.values()]
        tensors += [local for s in self.system.syncs.values() for r, local in s.readers if r == self.item.name]
        return [t for t in dict.fromkeys(tensors) if self.buffer(t) == f"nn_mi_t_{self.item.name}_{t}"]


def schedule_pool(system, net, outdir, precision="float32"):
    """The static schedule's one memory (multiitem_pool) of the values the items hand on (float, or
    int16 in fixed point), the segments' arenas of that type moved into it."""
    ctype = _value_type(precision)
    views = {item.name: _ItemBuffers(system, item, "schedule") for item in system.items}
    spans = multiitem_pool.lifetimes(system, action_order(system, net), views, lambda i, t: _size(system, i, t),
                                     multiitem_pool.segment_arenas(outdir, system, ctype))
    pool = multiitem_pool.plan(f"{system.name}_mi_pool", spans, ctype)
    multiitem_pool.redirect_arenas(outdir, system, pool)
    return pool


def _value_type(precision):
    """The C type of the tensors the items hand on."""
    return "float" if precision == "float32" else "int16_t"


def _declare(symbol, values, comment, pool):
    if pool is not None and symbol in pool.offsets:
        return pool.declaration(symbol, values, comment)
    return f"static nn_mi_value {symbol}[{values}]; /* {comment} */"


def source(system, net, sync, precision="float32", pool=None):
    name = system.name
    value = _value_type(precision)
    codes = {t.name: i for i, t in enumerate(net.transitions)}
    lines = [f"/* {name}: the items of a multi-item system and their variablesync exchanges (sync={sync}),",
             " * generated by nnbuild from " + names.c_text(", ".join(f.split("/")[-1] for f in system.source_files))
             + ". Do not edit. */"]
    if sync != "schedule":
        lines += ["#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L",
                  "#undef _POSIX_C_SOURCE", "#define _POSIX_C_SOURCE 200809L", "#endif",
                  "#include <pthread.h>"]
    lines += ["#include <stdint.h>", "#include <string.h>", "", f'#include "{name}.h"']
    lines += [f'#include "{seg}.h"' for item in system.items for seg in item.segments]
    lines += ["", "#ifndef NN_MI_EVENT", "#define NN_MI_EVENT(code) ((void)0)", "#endif",
              "#ifndef NN_MI_BEGIN", "#define NN_MI_BEGIN(code) ((void)0)", "#endif",
              "#ifndef NN_MI_ITEM_START", "#define NN_MI_ITEM_START(item) ((void)0)", "#endif", "",
              f"static const float *nn_mi_in;", f"static float *nn_mi_out;",
              f"/* the tensors the items hand on ({precision}: {value} values) */",
              f"typedef {value} nn_mi_value;", ""]
    views = {item.name: _ItemBuffers(system, item, sync) for item in system.items}
    if pool is not None:
        lines.append(f"/* The schedule's buffers and the segments' arenas, placed by lifetime. */")
        lines.append(f"nn_mi_value {pool.symbol}[{max(pool.values, 1)}];")
    for item in system.items:
        view = views[item.name]
        for tensor in view.local_buffers():
            lines.append(_declare(view.buffer(tensor), _size(system, item, tensor), f"item {item.name}: '{tensor}'",
                                  pool))
        for seg in item.segments.values():
            if len(seg.inputs) > 1:
                total = sum(_size(system, item, t) for t in seg.inputs)
                lines.append(_declare(f"{seg.name}_packed", total, f"inputs {', '.join(seg.inputs)}", pool))
    lines.append("")
    lines += _sync_declarations(system, sync)
    if sync == "schedule":
        lines += _schedule_infer(system, net, views, codes)
    else:
        for item in system.items:
            lines += _item_function(system, item, views[item.name], sync, codes)
        lines += _threads_infer(system, sync)
    return "\n".join(lines) + "\n"


def _sync_declarations(system, sync):
    lines = []
    if sync == "flags":
        lines += [
            "/* A variablesync: its value, how many values were written, how many readers have not",
            " * copied the current one; one mutex and condition per variable. */",
            "typedef struct {",
            "    pthread_mutex_t lock;",
            "    pthread_cond_t changed;",
            "    unsigned written;",
            "    unsigned unread;",
            "} nn_mi_sync;", ""]
    if sync == "flags" and system.syncs:   # one item (a split with nothing in parallel) has no variable
        lines += [
            "/* send_var: wait only while the previous value is unread, then publish. */",
            "static void nn_mi_send(nn_mi_sync *s, nn_mi_value *buf, const nn_mi_value *value, unsigned n, unsigned readers, int event)",
            "{",
            "    (void)event; /* used only when NN_MI_EVENT records */",
            "    NN_MI_BEGIN(event); /* arrived */",
            "    pthread_mutex_lock(&s->lock);",
            "    while (s->unread > 0u)",
            "        pthread_cond_wait(&s->changed, &s->lock);",
            "    memcpy(buf, value, n * sizeof *buf);",
            "    s->written++;",
            "    s->unread = readers;",
            "    NN_MI_EVENT(event);",
            "    pthread_cond_broadcast(&s->changed);",
            "    pthread_mutex_unlock(&s->lock);",
            "}", "",
            "/* get_var: wait for a value this reader has not copied, copy it, mark it read. */",
            "static void nn_mi_get(nn_mi_sync *s, unsigned *seen, nn_mi_value *value, const nn_mi_value *buf, unsigned n, int event)",
            "{",
            "    (void)event; /* used only when NN_MI_EVENT records */",
            "    NN_MI_BEGIN(event); /* arrived */",
            "    pthread_mutex_lock(&s->lock);",
            "    while (*seen == s->written)",
            "        pthread_cond_wait(&s->changed, &s->lock);",
            "    memcpy(value, buf, n * sizeof *value);",
            "    *seen = s->written;",
            "    s->unread--;",
            "    NN_MI_EVENT(event);",
            "    pthread_cond_broadcast(&s->changed);",
            "    pthread_mutex_unlock(&s->lock);",
            "}", ""]
        for s in system.syncs.values():
            size = int(np.prod(s.shape))
            lines += [f"/* variablesync {s.name}: {s.writer} -> {', '.join(s.reader_items)}, "
                      f"shape {list(s.shape)} */",
                      f"static nn_mi_value nn_mi_v_{s.name}[{size}];",
                      f"static nn_mi_sync nn_mi_s_{s.name} = {{PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0u, 0u}};",
                      f"static unsigned nn_mi_r_{s.name}[{len(s.readers)}];"]
    if sync == "barrier":
        for s in system.syncs.values():
            size = int(np.prod(s.shape))
            lines += [f"/* variablesync {s.name}: {s.writer} -> {', '.join(s.reader_items)}, "
                      f"shape {list(s.shape)}; a barrier of {len(s.readers) + 1} */",
                      f"static nn_mi_value nn_mi_v_{s.name}[{size}];",
                      f"static pthread_barrier_t nn_mi_b_{s.name};"]
    lines.append("")
    return lines


def _item_function(system, item, view, sync, codes):
    lines = [f"/* item {item.name} (graph {item.graph}): its actions in program order */",
             f"static void nn_mi_item_{item.name}(void)", "{"]
    for kind, name in item.actions:
        lines += _action_lines(system, item, view, sync, codes, kind, name)
    return lines + ["}", ""]


def _action_lines(system, item, view, sync, codes, kind, name):
    """The C of one action of an item (run a segment, send or get a variable)."""
    lines = []
    if kind == "run":
        seg = item.segments[name]
        lines.append(f"    NN_MI_BEGIN({codes[f'{item.name}.{seg.instructions[0]}']}); /* segment {seg.name} starts */")
        if len(seg.inputs) > 1:
            offset = 0
            for t in seg.inputs:
                size = _size(system, item, t)
                lines.append(f"    memcpy({seg.name}_packed + {offset}, {view.buffer(t)}, "
                             f"{size} * sizeof(nn_mi_value));")
                offset += size
            src = f"{seg.name}_packed"
        else:
            src = view.buffer(seg.inputs[0])
        lines.append(f"    {seg.name}_infer({src}, {view.buffer(seg.output)}); "
                     f"/* {', '.join(seg.instructions)} */")
        for ins in seg.instructions:
            lines.append(f"    NN_MI_EVENT({codes[f'{item.name}.{ins}']}); /* fired: {item.name}.{ins} */")
    else:
        lines += _exchange_lines(system, item, view, sync, codes, kind, name)
    return lines


#: the C of a send_var and of a get_var under each sync (schedule: one core, the readers read the
#: sender's buffer in place), filled per action by _exchange_lines
EXCHANGE_C = {
    ("send", "flags"): ["    nn_mi_send(&nn_mi_s_{name}, nn_mi_v_{name}, {buffer}, {size}u, {readers}u, {event}); "
                        "/* send_var {name} */"],
    ("send", "barrier"): ["    NN_MI_BEGIN({event}); /* send_var {name}: arrived */",
                          "    memcpy(nn_mi_v_{name}, {buffer}, {size} * sizeof(nn_mi_value));",
                          "    NN_MI_EVENT({event});",
                          "    pthread_barrier_wait(&nn_mi_b_{name});",
                          "    NN_MI_BEGIN({event}); /* released: every reader has arrived */"],
    ("send", "schedule"): ["    NN_MI_EVENT({event}); /* send_var {name}: the readers read {buffer} in place */"],
    ("get", "flags"): ["    nn_mi_get(&nn_mi_s_{name}, &nn_mi_r_{name}[{index}], {buffer}, nn_mi_v_{name}, {size}u, "
                       "{event}); /* get_var {name} -> '{local}' */"],
    ("get", "barrier"): ["    NN_MI_BEGIN({event}); /* get_var {name} -> '{local}': arrived */",
                         "    pthread_barrier_wait(&nn_mi_b_{name});",
                         "    memcpy({buffer}, nn_mi_v_{name}, {size} * sizeof(nn_mi_value));",
                         "    NN_MI_EVENT({event});"],
    ("get", "schedule"): ["    NN_MI_EVENT({event}); /* get_var {name} -> '{local}' */"],
}


def _exchange_lines(system, item, view, sync, codes, kind, name):
    """The C of a send_var (kind "send") or get_var of variablesync `name` by `item` (EXCHANGE_C)."""
    s = system.syncs[name]
    fields = {"name": name, "size": int(np.prod(s.shape)), "readers": len(s.readers)}
    if kind == "send":
        fields.update(event=codes[f"sync.{name}"], buffer=view.buffer(s.tensor))
    else:
        local = dict(s.readers)[item.name]
        fields.update(event=codes[f"get.{name}@{item.name}"], buffer=view.buffer(local), local=local,
                      index=s.reader_items.index(item.name))
    return [line.format(**fields) for line in EXCHANGE_C[kind, sync if sync in ("flags", "barrier") else "schedule"]]


def _threads_infer(system, sync):
    name, up = system.name, system.name.upper()
    lines = []
    for index, item in enumerate(system.items):
        lines += [f"static void *nn_mi_thread_{item.name}(void *unused)", "{", "    (void)unused;",
                  f"    NN_MI_ITEM_START({index});", f"    nn_mi_item_{item.name}();", "    return NULL;", "}", ""]
    starts = ", ".join(f"nn_mi_thread_{i.name}" for i in system.items)
    lines += [f"static void *(*const nn_mi_threads[{up}_ITEMS])(void *) = {{{starts}}};", "",
              f"int {name}_infer(const float in[{up}_INPUTS], float out[{up}_OUTPUTS])", "{",
              f"    pthread_t threads[{up}_ITEMS];", "    int started, failed = 0;", ""]
    if sync == "barrier":
        for s in system.syncs.values():
            lines.append(f"    pthread_barrier_init(&nn_mi_b_{s.name}, NULL, {len(s.readers) + 1}u);")
    lines += ["    nn_mi_in = in;", "    nn_mi_out = out;",
              f"    for (started = 0; started < {up}_ITEMS; ++started) /* bounded: {len(system.items)} items */",
              "        if (pthread_create(&threads[started], NULL, nn_mi_threads[started], NULL) != 0) {",
              "            failed = 1;", "            break;", "        }",
              "    while (started > 0)", "        pthread_join(threads[--started], NULL);"]
    if sync == "barrier":
        for s in system.syncs.values():
            lines.append(f"    pthread_barrier_destroy(&nn_mi_b_{s.name});")
    return lines + ["    return failed;", "}"]


def static_order(system, net):
    """A topological firing order of the program-order net: the first item (document order) that
    can move fires; the Petri checks proved this never stops before the final marking."""
    colours = [i.name for i in system.items]
    codes, marking = [], tuple(net.initial)
    while True:
        enabled = net.enabled(marking)
        if not enabled:
            break
        t = min(enabled, key=lambda e: (colours.index(net.transitions[e].colour), e))
        codes.append(t)
        marking = net.fire(marking, t)
    if marking != tuple(net.final):
        raise NNBuildError(f"{system.name}: no static schedule (the items' program order deadlocks)")
    return codes


def action_order(system, net):
    """static_order as (item, action) pairs: a segment's action at its first instruction."""
    cursor = {i.name: 0 for i in system.items}
    pending = {i.name: 0 for i in system.items}   # instructions of a started segment still to fire
    order = []
    for code in static_order(system, net):
        item = system.item(net.transitions[code].colour)
        if pending[item.name]:
            pending[item.name] -= 1
            continue
        kind, name = item.actions[cursor[item.name]]
        if kind == "run":
            pending[item.name] = len(item.segments[name].instructions) - 1
        order.append((item, kind, name))
        cursor[item.name] += 1
    return order


def _schedule_infer(system, net, views, codes):
    name, up = system.name, system.name.upper()
    lines = [f"/* One static schedule of every item (a topological firing order of the items' net). */",
             f"int {name}_infer(const float in[{up}_INPUTS], float out[{up}_OUTPUTS])", "{",
             "    nn_mi_in = in;", "    nn_mi_out = out;"]
    for item, kind, action in action_order(system, net):
        lines.append(f"    /* item {item.name}: {kind} {action} */")
        lines += _action_lines(system, item, views[item.name], "schedule", codes, kind, action)
    return lines + ["    return 0;", "}"]
