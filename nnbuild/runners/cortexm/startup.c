/*
 * nnbuild's reset code for the check program on a qemu-system-arm Cortex-M machine (ARMv6-M and
 * ARMv7E-M alike): the vector table (initial stack pointer, reset and fault handlers), the copy of
 * .data from its load address in flash, .bss zeroed, the FPU enabled where the build uses it, newlib's
 * semihosting handles opened (rdimon), then main() and exit() with its status through semihosting.
 * The linker script of the machine (mps2-an386.ld, microbit.ld) gives the symbols used here.
 *
 * The stack probe of the check program (check_io.h calls it around each inference):
 * nnbuild_stack_paint() fills the free stack below the caller's SP with a pattern, down to the
 * heap's end or _stack_paint_bytes below the SP, whichever is higher; nnbuild_stack_peak(), called
 * from the same frame after the inference, returns the bytes between that SP and the lowest word
 * that no longer holds the pattern: the high-water mark of the call, the convention of the static
 * bound (nnbuild/wcet/thumb2_stack.py, bytes below the SP at the BL). Both are written in assembly
 * (ARMv6-M Thumb, so one text serves both machines) so they use no stack of their own while the
 * pattern is laid or read: a C function's frame would overwrite the words it measures. They lay and
 * read 16 words a pass: QEMU's exec log (the cycle count's input) holds a line per translated
 * block executed, and the probe runs outside the inference, around each call.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _estack[];
extern int main(void);
extern void initialise_monitor_handles(void);
extern void __libc_init_array(void);

void nnbuild_reset(void);
void nnbuild_fault(void);
void nnbuild_stack_paint(void);
unsigned long nnbuild_stack_peak(void);
const void *nnbuild_heap_end(void);

extern void *_sbrk(ptrdiff_t increment);

/* The lowest address painted by the last nnbuild_stack_paint (read back by nnbuild_stack_peak). */
uintptr_t nnbuild_paint_floor;

/* The heap's current end (newlib's break): the stack may be painted down to here. */
const void *nnbuild_heap_end(void)
{
    return _sbrk(0);
}

__asm__(
    "    .text\n"
    "    .syntax unified\n"
    "    .thumb\n"
    "    .global nnbuild_stack_paint\n"
    "    .type nnbuild_stack_paint, %function\n"
    "    .thumb_func\n"
    "nnbuild_stack_paint:\n"
    "    push {lr}\n"                     /* the heap end, with the stack popped back after */
    "    bl nnbuild_heap_end\n"
    "    pop {r3}\n"
    "    mov lr, r3\n"
    "    mov r1, sp\n"
    "    ldr r2, =_stack_paint_bytes\n"
    "    subs r2, r1, r2\n"
    "    cmp r0, r2\n"
    "    bhs 1f\n"
    "    mov r0, r2\n"
    "1:  adds r0, #3\n"                   /* word aligned, up */
    "    lsrs r0, r0, #2\n"
    "    lsls r0, r0, #2\n"
    "    ldr r2, =nnbuild_paint_floor\n"
    "    str r0, [r2]\n"
    "    ldr r2, =0xc5a5f00d\n"
    "2:  movs r3, r0\n"                /* 16 words a pass while they fit below the SP */
    "    adds r3, #64\n"
    "    cmp r3, r1\n"
    "    bhi 4f\n"
    "    str r2, [r0, #0]\n"
    "    str r2, [r0, #4]\n"
    "    str r2, [r0, #8]\n"
    "    str r2, [r0, #12]\n"
    "    str r2, [r0, #16]\n"
    "    str r2, [r0, #20]\n"
    "    str r2, [r0, #24]\n"
    "    str r2, [r0, #28]\n"
    "    str r2, [r0, #32]\n"
    "    str r2, [r0, #36]\n"
    "    str r2, [r0, #40]\n"
    "    str r2, [r0, #44]\n"
    "    str r2, [r0, #48]\n"
    "    str r2, [r0, #52]\n"
    "    str r2, [r0, #56]\n"
    "    str r2, [r0, #60]\n"
    "    movs r0, r3\n"
    "    b 2b\n"
    "4:  cmp r0, r1\n"                 /* the rest a word at a time */
    "    bhs 3f\n"
    "    str r2, [r0]\n"
    "    adds r0, #4\n"
    "    b 4b\n"
    "3:  bx lr\n"
    "    .size nnbuild_stack_paint, . - nnbuild_stack_paint\n"
    "    .pool\n"
    "    .global nnbuild_stack_peak\n"
    "    .type nnbuild_stack_peak, %function\n"
    "    .thumb_func\n"
    "nnbuild_stack_peak:\n"
    "    ldr r0, =nnbuild_paint_floor\n"
    "    ldr r0, [r0]\n"
    "    ldr r2, =0xc5a5f00d\n"
    "1:  mov r1, sp\n"                 /* 16 words a pass while they fit below the SP and all */
    "    movs r3, r0\n"                /* hold the pattern (r1 a scratch, the SP read again) */
    "    adds r3, #64\n"
    "    cmp r3, r1\n"
    "    bhi 4f\n"
    "    ldr r3, [r0, #0]\n"
    "    eors r3, r2\n"
    "    ldr r1, [r0, #4]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #8]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #12]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #16]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #20]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #24]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #28]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #32]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #36]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #40]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #44]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #48]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #52]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #56]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    ldr r1, [r0, #60]\n"
    "    eors r1, r2\n"
    "    orrs r3, r1\n"
    "    cmp r3, #0\n"
    "    bne 4f\n"
    "    adds r0, #64\n"
    "    b 1b\n"
    "4:  mov r1, sp\n"                 /* from there a word at a time */
    "5:  cmp r0, r1\n"
    "    bhs 2f\n"
    "    ldr r3, [r0]\n"
    "    cmp r3, r2\n"
    "    bne 2f\n"
    "    adds r0, #4\n"
    "    b 5b\n"
    "2:  subs r0, r1, r0\n"
    "    bx lr\n"
    "    .size nnbuild_stack_peak, . - nnbuild_stack_peak\n"
    "    .pool\n");

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
