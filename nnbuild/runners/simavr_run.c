/*
 * simavr_run: cycle-exact measurement of one AVR function with libsimavr (simavr 1.6).
 *
 * Build:  gcc -O2 -std=gnu99 -I/usr/include/simavr simavr_run.c -o simavr_run -lsimavr -lelf
 *
 * Usage:
 *   simavr_run ELF --mcu atmega1284 --freq 20000000 --entry 0xADDR
 *              [--ready 0xADDR --in 0xADDR --n-in N] [--out 0xADDR --n-out M]
 *              [--stop 0xADDR] [--max-cycles K] [--timeout SECONDS]
 *
 * Addresses are numbers (decimal or 0x hex) as printed by avr-nm: flash byte addresses
 * for --entry/--ready/--stop, data addresses for --in/--out (the 0x800000 offset avr-nm
 * adds to RAM symbols is accepted and removed).
 *
 * A "call" is one outermost execution of the function at --entry: it starts when the
 * PC reaches --entry (after the CALL) and ends when the PC reaches the return address
 * with SP back to its value before the CALL, so it counts the first instruction
 * through RET, excluding the CALL.
 *
 * Case mode (--ready given): stdin holds N little-endian float32 per case.  Each time
 * the PC reaches --ready, the previous case's record is printed, then the next case's
 * input bytes are written to --in, or, at EOF, the harness exits 0.  One record per case.
 * Call mode (no --ready): stdin is not read; the firmware runs until it sleeps with
 * interrupts off, or the PC reaches --stop (e.g. _exit).  One record per call.
 *
 * Record (stdout, one line):  cycles=<decimal> calls=<decimal> stack=<decimal> out=<hex>
 *   cycles  sum over the calls of the record (case mode) or of the one call
 *   calls   number of outermost calls in the record (always 1 in call mode)
 *   stack   bytes of stack the call used: (SP just before the CALL) - (lowest SP seen from
 *           the entry's first instruction through its RET); AVR's SP points at the next free
 *           byte, so this counts the CALL's return address and every byte pushed or reserved
 *           below it, the convention of nnbuild/wcet/avr_stack.py.  Max over the record's
 *           calls (0 if none).  SP is sampled after every instruction; a new minimum is not
 *           taken while the next or next-but-one instruction writes SPL/SPH, i.e. between the
 *           two OUT halves of a 16-bit SP write (avr-gcc: out SPH; out SREG; out SPL), whose
 *           intermediate value (new high byte, old low byte) is no real SP.
 *   out     the 4*M bytes at --out in memory order (lowercase hex, empty if M = 0),
 *           read at the next --ready (case mode) or at the call's return (call mode)
 *
 * --max-cycles bounds the cycles of each case (counted from its --ready), or of the
 * whole run in call mode (default 2e9); --timeout bounds wall-clock seconds (default none).
 *
 * A crash is simavr's cpu_Crashed state or any jump to the reset vector (PC 0).
 *
 * Exit status: 0 done; 1 usage/load error; 2 bad stdin; 3 cycle limit; 4 crash;
 * 5 firmware stopped early; 6 timeout.  Errors print one line "simavr_run: ..." on stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_avr.h"
#include "sim_elf.h"

#define RAM_OFFSET 0x800000u
#define SPL_ADDR 0x5d

struct options {
    const char *elf, *mcu;
    uint32_t freq;
    uint32_t entry, ready, stop, in, out;
    int has_ready, has_stop, has_in, has_out;
    uint32_t n_in, n_out;
    uint64_t max_cycles;
    double timeout;
};

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("simavr_run: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

/* simavr's default logger prints to stdout, which would corrupt our records. */
static void quiet_logger(avr_t *avr, const int level, const char *fmt, va_list ap)
{
    (void)avr;
    if (level <= LOG_ERROR)
        vfprintf(stderr, fmt, ap);
}

static uint64_t parse_num(const char *opt, const char *s)
{
    char *end;
    unsigned long long v;
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno || end == s || *end)
        die(1, "bad number for %s: '%s'", opt, s);
    return v;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    int i;
    memset(o, 0, sizeof *o);
    o->max_cycles = 2000000000ull;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v;
        if (a[0] != '-') {
            if (o->elf)
                die(1, "more than one ELF given ('%s')", a);
            o->elf = a;
            continue;
        }
        if (i + 1 >= argc)
            die(1, "missing value for %s", a);
        v = argv[++i];
        if (!strcmp(a, "--mcu")) o->mcu = v;
        else if (!strcmp(a, "--freq")) o->freq = (uint32_t)parse_num(a, v);
        else if (!strcmp(a, "--entry")) o->entry = (uint32_t)parse_num(a, v);
        else if (!strcmp(a, "--ready")) { o->ready = (uint32_t)parse_num(a, v); o->has_ready = 1; }
        else if (!strcmp(a, "--stop")) { o->stop = (uint32_t)parse_num(a, v); o->has_stop = 1; }
        else if (!strcmp(a, "--in")) { o->in = (uint32_t)parse_num(a, v); o->has_in = 1; }
        else if (!strcmp(a, "--out")) { o->out = (uint32_t)parse_num(a, v); o->has_out = 1; }
        else if (!strcmp(a, "--n-in")) o->n_in = (uint32_t)parse_num(a, v);
        else if (!strcmp(a, "--n-out")) o->n_out = (uint32_t)parse_num(a, v);
        else if (!strcmp(a, "--max-cycles")) o->max_cycles = parse_num(a, v);
        else if (!strcmp(a, "--timeout")) o->timeout = (double)parse_num(a, v);
        else die(1, "unknown option %s", a);
    }
    if (!o->elf || !o->entry)
        die(1, "usage: simavr_run ELF --mcu MCU --freq HZ --entry ADDR [--ready ADDR --in ADDR "
               "--n-in N] [--out ADDR --n-out M] [--stop ADDR] [--max-cycles K] [--timeout S]");
    if (o->has_ready && (!o->has_in || !o->n_in))
        die(1, "--ready needs --in and --n-in");
    if (o->n_out && !o->has_out)
        die(1, "--n-out needs --out");
    if (o->in >= RAM_OFFSET) o->in -= RAM_OFFSET;
    if (o->out >= RAM_OFFSET) o->out -= RAM_OFFSET;
}

static avr_t *load(const struct options *o)
{
    elf_firmware_t fw;
    avr_t *avr;
    memset(&fw, 0, sizeof fw);
    if (elf_read_firmware(o->elf, &fw) != 0)
        die(1, "%s: cannot read ELF firmware", o->elf);
    if (o->mcu)
        snprintf(fw.mmcu, sizeof fw.mmcu, "%s", o->mcu);
    if (o->freq)
        fw.frequency = o->freq;
    if (!fw.mmcu[0] || !fw.frequency)
        die(1, "%s: no .mmcu section, give --mcu and --freq", o->elf);
    avr = avr_make_mcu_by_name(fw.mmcu);
    if (!avr)
        die(1, "unknown mcu '%s'", fw.mmcu);
    avr_init(avr);
    avr_load_firmware(avr, &fw);
    if ((o->has_in && o->in + 4ull * o->n_in > avr->ramend + 1ull) ||
        (o->has_out && o->out + 4ull * o->n_out > avr->ramend + 1ull))
        die(1, "--in/--out buffer outside RAM (ramend 0x%x)", avr->ramend);
    return avr;
}

static uint16_t get_sp(const avr_t *avr)
{
    return (uint16_t)(avr->data[SPL_ADDR] | (avr->data[SPL_ADDR + 1] << 8));
}

/* The CALL pushed the return word address big-endian just above SP. */
static uint32_t return_pc(const avr_t *avr, uint16_t sp)
{
    uint32_t w = 0;
    int k;
    for (k = 1; k <= avr->address_size; ++k)
        w = (w << 8) | avr->data[(uint16_t)(sp + k)];
    return w * 2;
}

static uint16_t opcode(const avr_t *avr, uint32_t pc)
{
    return pc + 1 <= avr->flashend ? (uint16_t)(avr->flash[pc] | (avr->flash[pc + 1] << 8)) : 0;
}

/* Bytes of the instruction at pc: LDS, STS, JMP and CALL are two words. */
static uint32_t insn_size(const avr_t *avr, uint32_t pc)
{
    uint16_t op = opcode(avr, pc);
    return ((op & 0xfc0f) == 0x9000 || (op & 0xfe0c) == 0x940c) ? 4 : 2;
}

/* True if the instruction at pc writes SPL or SPH (OUT 0x3d/0x3e or STS 0x5d/0x5e). */
static int writes_sp_half(const avr_t *avr, uint32_t pc)
{
    uint16_t op = opcode(avr, pc), k;
    if ((op & 0xf800) == 0xb800) {
        unsigned a = ((op >> 5) & 0x30) | (op & 0x0f);
        return a == SPL_ADDR - 0x20 || a == SPL_ADDR + 1 - 0x20;
    }
    if ((op & 0xfe0f) == 0x9200) {
        k = opcode(avr, pc + 2);
        return k == SPL_ADDR || k == SPL_ADDR + 1;
    }
    return 0;
}

/* Called only when SP reaches a new low (rare), so the decoding costs nothing per instruction:
 * true if pc (the next instruction) or the one after it writes half of SP. */
static int inside_sp_write(const avr_t *avr, uint32_t pc)
{
    return writes_sp_half(avr, pc) || writes_sp_half(avr, pc + insn_size(avr, pc));
}

static void emit(const avr_t *avr, const struct options *o, uint64_t cycles, unsigned calls,
                 unsigned stack)
{
    uint32_t k;
    printf("cycles=%llu calls=%u stack=%u out=", (unsigned long long)cycles, calls, stack);
    for (k = 0; k < 4 * o->n_out; ++k)
        printf("%02x", avr->data[o->out + k]);
    putchar('\n');
    fflush(stdout); /* one record per case as it happens: progress lines in the parent */
}

/* Returns 1 if a case was loaded, 0 at a clean EOF. */
static int load_case(avr_t *avr, const struct options *o, unsigned long index)
{
    size_t want = 4u * o->n_in;
    size_t got = fread(avr->data + o->in, 1, want, stdin);
    if (got == 0 && feof(stdin))
        return 0;
    if (got != want)
        die(2, "truncated input for case %lu (%lu of %lu bytes)", index,
            (unsigned long)got, (unsigned long)want);
    return 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Case index for messages: the case being simulated, or -1 before the first one. */
static long case_index(int have_case, unsigned long ncase)
{
    return have_case ? (long)ncase - 1 : -1;
}

static void finish(void)
{
    if (fflush(stdout) != 0)
        die(1, "write error on stdout");
    exit(0);
}

int main(int argc, char **argv)
{
    struct options o;
    avr_t *avr;
    int active = 0, have_case = 0;
    unsigned calls = 0, stack = 0;
    unsigned long ncase = 0;
    uint32_t ret_pc = 0;
    uint16_t ret_sp = 0, min_sp = 0;
    uint64_t start = 0, sum = 0, limit_base = 0, steps = 0;
    double deadline;

    parse_args(argc, argv, &o);
    avr_global_logger_set(quiet_logger);
    avr = load(&o);
    deadline = o.timeout > 0 ? now() + o.timeout : 0;

    for (;;) {
        int state = avr_run(avr);
        uint32_t pc = avr->pc;

        if (active) {
            uint16_t sp = get_sp(avr);
            if (sp < min_sp && !inside_sp_write(avr, pc))
                min_sp = sp;
        }

        if (state == cpu_Crashed)
            die(4, "firmware crashed at pc 0x%x, cycle %llu (case %ld)", pc,
                (unsigned long long)avr->cycle, case_index(have_case, ncase));
        if (pc == 0)    /* simavr 1.6 silently re-runs the firmware after a jump to 0 */
            die(4, "firmware crashed: jump to the reset vector at cycle %llu (case %ld)",
                (unsigned long long)avr->cycle, case_index(have_case, ncase));
        if (state == cpu_Done) {
            if (o.has_ready)
                die(5, "firmware stopped (sleep with interrupts off) at pc 0x%x before case %lu",
                    pc, ncase);
            finish();
        }
        if (active && pc == ret_pc && get_sp(avr) == ret_sp) {
            active = 0;
            sum += avr->cycle - start;
            ++calls;
            if ((unsigned)(ret_sp - min_sp) > stack)
                stack = (unsigned)(ret_sp - min_sp);
            if (!o.has_ready) {
                emit(avr, &o, avr->cycle - start, 1, stack);
                sum = 0;
                calls = 0;
                stack = 0;
            }
        }
        if (!active && pc == o.entry) {
            uint16_t sp = get_sp(avr);
            ret_pc = return_pc(avr, sp);
            ret_sp = (uint16_t)(sp + avr->address_size);
            min_sp = sp;
            start = avr->cycle;
            active = 1;
        }
        if (o.has_ready && !active && pc == o.ready) {
            if (have_case)
                emit(avr, &o, sum, calls, stack);
            sum = 0;
            calls = 0;
            stack = 0;
            if (!load_case(avr, &o, ncase))
                finish();
            have_case = 1;
            ++ncase;
            limit_base = avr->cycle;
        }
        if (o.has_stop && pc == o.stop && !active)
            finish();
        if (avr->cycle - limit_base > o.max_cycles)
            die(3, "cycle limit %llu exceeded at pc 0x%x (case %ld)",
                (unsigned long long)o.max_cycles, pc, case_index(have_case, ncase));
        if (deadline > 0 && (++steps & 0xfffff) == 0 && now() > deadline)
            die(6, "timeout after %g s at pc 0x%x (case %ld)", o.timeout, pc,
                case_index(have_case, ncase));
    }
}
