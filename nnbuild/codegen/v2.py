"""v2 code shape (ACETONE V2, the CNN default): every layer inlined in `<name>_infer` as loops with
literal bounds (the bound repeated in NN_LOOPBOUND and in the flow facts), channels-last tensors,
weights in `<name>_weights.c` (same storage rules and helpers as the MLP shape), intermediate
tensors in one static arena placed by liveness (see nnbuild.codegen.cnn)."""

from nnbuild.codegen import cnn, templating

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32",)



def render(model, *, precision, storage, passes_log, **_options):
    cnn.check_precision(precision, "v2")
    lowered = cnn.lower(model, storage)
    ctx = cnn.context(model, lowered, "v2", precision, storage)
    name = model.name
    code, facts, _ = cnn.render_code("v2.c.j2", ctx)
    return {
        f"{name}.h": templating.render("cnn.h.j2", ctx),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("cnn_weights.h.j2", ctx),
        f"{name}_weights.c": templating.render("cnn_weights.c.j2", ctx),
        f"{name}.flowfacts.json": facts,
        f"{name}.trace.json": cnn.trace(model, lowered, facts, passes_log, "v2", [cnn.memory_log(lowered["memory"])],
                                                   storage=storage),
    }
