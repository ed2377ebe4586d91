/*
 * nnbuild's reset code for the check program on a qemu-system-arm Cortex-M machine (ARMv6-M and
 * ARMv7E-M alike): the vector table (initial stack pointer, reset and fault handlers), the copy of
 * .data from its load address in flash, .bss zeroed, the FPU enabled where the build uses it, newlib's
 * semihosting handles opened (rdimon), then main() and exit() with its status through semihosting.
 * The linker script of the machine (mps2-an386.ld, microbit.ld) gives the symbols used here.
 */
#include <stdint.h>
#include <stdlib.h>

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _estack[];
extern int main(void);
extern void initialise_monitor_handles(void);
extern void __libc_init_array(void);

void nnbuild_reset(void);
void nnbuild_fault(void);

/* A fault stops the run with a non-zero status the runner reports (semihosting SYS_EXIT). */
void nnbuild_fault(void)
{
    _Exit(4);
}

void nnbuild_reset(void)
{
    uint32_t *src = _sidata, *dst = _sdata;

    while (dst < _edata)
        *dst++ = *src++;
    for (dst = _sbss; dst < _ebss; ++dst)
        *dst = 0u;
#if defined(__ARM_FP)
    /* CPACR: full access to CP10 and CP11, the FPU (ARMv7-M ARM B3.2.20) */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    initialise_monitor_handles();
    __libc_init_array();
    exit(main());
}

typedef void (*nnbuild_vector)(void);

/* Initial SP, reset, NMI, HardFault, then the ARMv7-M faults (unused on ARMv6-M: reserved there). */
__attribute__((section(".isr_vector"), used))
const nnbuild_vector nnbuild_vectors[16] = {
    (nnbuild_vector)(uintptr_t)_estack, nnbuild_reset, nnbuild_fault, nnbuild_fault,
    nnbuild_fault, nnbuild_fault, nnbuild_fault, 0, 0, 0, 0, nnbuild_fault, nnbuild_fault, 0,
    nnbuild_fault, nnbuild_fault,
};
