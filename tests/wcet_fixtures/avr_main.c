/* Measurement main for the WCET fixtures, following nnbuild/runners/check_main.c's contract (the
 * ready hook is check_io.h's): the simavr harness writes each case into nnbuild_in while the PC
 * sits in nnbuild_ready, then times ENTRY(nnbuild_in, nnbuild_out). Kept in its own translation
 * unit so the kernel cannot be inlined into main or specialised on the buffers' addresses. */
#include "../../nnbuild/runners/check_io.h"

extern void ENTRY(const void *in, void *out);
float nnbuild_in[N_IN];
float nnbuild_out[N_OUT];

int main(void)
{
    for (;;) {
        nnbuild_ready();
        ENTRY(nnbuild_in, nnbuild_out);
    }
}
