/*
 * avr_trace: per-invocation cycles and block counts of AVR routines under libsimavr, to check
 * the builtin-avr analyser's per-region bounds, context facts and path constraints
 * (tests/test_wcet_avr_context.py; whole-call cycles come from nnbuild/runners/simavr_run.c).
 *
 * Usage: avr_trace ELF MCU READY IN N_IN_BYTES SPEC < cases
 *   For each case, N_IN_BYTES from stdin are written to IN (a data address) when the PC reaches
 *   READY. SPEC is a text file of lines:
 *     call ADDR SIZE          every call/rcall/icall instruction (hex byte address, bytes)
 *     ctx ID ENTRY            a context function (ID 0..31) and its entry address
 *     site ADDR               a call site that the analyser's contexts distinguish
 *     ctxsite ID ADDR         context bit ID (0..31) is active in and below every frame made
 *                             by the call instruction at ADDR (operand tags of that call)
 *     probe ID GROUP TARGET SITE MODE MASK N PC1 .. PCN
 *                             invocations (calls) of TARGET; an invocation goes to the first
 *                             matching probe (lowest ID) of each GROUP (0..31); SITE = address of the calling
 *                             instruction, '-' for any, '!' for any not given by a `site`
 *                             line; MODE 'eq' (the set of context
 *                             functions active outside the call equals MASK) or 'sup' (contains
 *                             MASK); PC1..PCN are counted while the invocation is the innermost
 *                             frame (tail jumps stay in the frame, calls push a new one), or
 *                             with MODE 'eq+'/'sup+' while it is anywhere on the call stack
 *                             (callees included).
 * A call pushes a frame (target, return address, SP); the frame ends when the PC is at the
 * return address with SP back. A context function is active in a frame once the PC has been
 * at its entry in that frame (so tail jumps into it count) or when it is the frame's target.
 *
 * Output (stdout, at EOF):
 *   probe ID invocations N maxcycles C
 *   vec ID MULTIPLICITY MAXCYCLES COUNT1 .. COUNTN     one line per distinct count vector
 * Cycles run from the target's first instruction through its RET (the CALL excluded).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_avr.h"
#include "sim_elf.h"

#define FLASH_WORDS 0x10000u
#define MAXP 192
#define MAXPC 96
#define MAXG 48
#define MAXDEPTH 64
#define HBITS 14

struct vec { uint64_t hash; unsigned mult; uint64_t maxc; uint16_t *c; };

struct probe {
    int used, group;
    uint32_t target, site;
    int any_site, other_site, sup, incl;
    uint32_t mask;
    int n;
    uint32_t pc[MAXPC];
    unsigned long long invocations;
    uint64_t maxc;
    struct vec *tab;   /* open addressing, 1 << HBITS slots */
    unsigned nvec;
};

struct frame {
    uint32_t target, ret, call;
    uint16_t sp;
    uint32_t active;   /* context functions active in this frame */
    uint64_t start;
    int probe[MAXG];   /* probe index per group, or -1 */
    uint16_t counts[MAXG][MAXPC];
};

static struct probe probes[MAXP];
static uint8_t call_size[FLASH_WORDS];      /* by word address: size of a call insn, 0 = none */
static int8_t ctx_at[FLASH_WORDS];           /* context id whose entry is here, -1 = none */
static uint8_t counted[FLASH_WORDS];         /* some probe counts this pc */
static uint8_t is_site[FLASH_WORDS];         /* call sites named by `site` lines */
static uint32_t site_bits[FLASH_WORDS];      /* context bits of `ctxsite` call sites */
static struct frame stack[MAXDEPTH];
static int depth;

static void quiet(avr_t *avr, const int level, const char *fmt, va_list ap)
{
    (void)avr; (void)level; (void)fmt; (void)ap;
}

static void die(const char *msg)
{
    fprintf(stderr, "avr_trace: %s\n", msg);
    exit(1);
}

static uint16_t get_sp(const avr_t *avr)
{
    return (uint16_t)(avr->data[0x5d] | (avr->data[0x5e] << 8));
}

static void read_spec(const char *path)
{
    FILE *f = fopen(path, "r");
    char kind[16];
    if (!f)
        die("cannot open spec");
    memset(ctx_at, -1, sizeof ctx_at);
    while (fscanf(f, "%15s", kind) == 1) {
        if (!strcmp(kind, "call")) {
            unsigned a, s;
            if (fscanf(f, "%x %u", &a, &s) != 2)
                die("bad call line");
            call_size[(a >> 1) & 0xffff] = (uint8_t)s;
        } else if (!strcmp(kind, "ctx")) {
            int id;
            unsigned a;
            if (fscanf(f, "%d %x", &id, &a) != 2 || id < 0 || id > 31)
                die("bad ctx line");
            ctx_at[(a >> 1) & 0xffff] = (int8_t)id;
        } else if (!strcmp(kind, "ctxsite")) {
            int id;
            unsigned a;
            if (fscanf(f, "%d %x", &id, &a) != 2 || id < 0 || id > 31)
                die("bad ctxsite line");
            site_bits[(a >> 1) & 0xffff] |= 1u << id;
        } else if (!strcmp(kind, "site")) {
            unsigned a;
            if (fscanf(f, "%x", &a) != 1)
                die("bad site line");
            is_site[(a >> 1) & 0xffff] = 1;
        } else if (!strcmp(kind, "probe")) {
            int id, g, n;
            unsigned t, m;
            char site[32], mode[8];
            if (fscanf(f, "%d %d %x %31s %7s %x %d", &id, &g, &t, site, mode, &m, &n) != 7 || id < 0
                || id >= MAXP || g < 0 || g >= MAXG || n < 0 || n > MAXPC)
                die("bad probe line");
            struct probe *p = &probes[id];
            p->used = 1;
            p->group = g;
            p->target = t;
            p->any_site = !strcmp(site, "-");
            p->other_site = !strcmp(site, "!");
            p->site = p->any_site || p->other_site ? 0 : (uint32_t)strtoul(site, NULL, 16);
            p->sup = !strncmp(mode, "sup", 3);
            p->incl = mode[strlen(mode) - 1] == '+';
            p->mask = m;
            p->n = n;
            p->tab = calloc(1u << HBITS, sizeof *p->tab);
            for (int k = 0; k < n; ++k) {
                unsigned pc;
                if (fscanf(f, "%x", &pc) != 1)
                    die("bad probe pc");
                p->pc[k] = pc;
                counted[(pc >> 1) & 0xffff] = 1;
            }
        } else {
            die("unknown spec line");
        }
    }
    fclose(f);
}

static void count_pc(uint32_t pc)
{
    if (!counted[(pc >> 1) & 0xffff])
        return;
    for (int d = depth - 1; d >= 0; --d) {
        struct frame *fr = &stack[d];
        for (int g = 0; g < MAXG; ++g) {
            if (fr->probe[g] < 0)
                continue;
            struct probe *p = &probes[fr->probe[g]];
            if (d != depth - 1 && !p->incl)
                continue;
            for (int k = 0; k < p->n; ++k)
                if (p->pc[k] == pc && fr->counts[g][k] < 0xffff)
                    ++fr->counts[g][k];
        }
    }
}

static void record(struct frame *fr, int g, uint64_t cycles)
{
    struct probe *p = &probes[fr->probe[g]];
    const uint16_t *counts = fr->counts[g];
    uint64_t h = 1469598103934665603ull;
    ++p->invocations;
    if (cycles > p->maxc)
        p->maxc = cycles;
    for (int k = 0; k < p->n; ++k)
        h = (h ^ counts[k]) * 1099511628211ull;
    for (unsigned slot = (unsigned)h & ((1u << HBITS) - 1);; slot = (slot + 1) & ((1u << HBITS) - 1)) {
        struct vec *v = &p->tab[slot];
        if (!v->c) {
            if (p->nvec + 1 >= (1u << HBITS))
                die("too many distinct count vectors");
            v->c = malloc(sizeof(uint16_t) * (p->n ? p->n : 1));
            memcpy(v->c, counts, sizeof(uint16_t) * p->n);
            v->hash = h;
            v->mult = 1;
            v->maxc = cycles;
            ++p->nvec;
            return;
        }
        if (v->hash == h && !memcmp(v->c, counts, sizeof(uint16_t) * p->n)) {
            ++v->mult;
            if (cycles > v->maxc)
                v->maxc = cycles;
            return;
        }
    }
}

static int match(const struct probe *p, uint32_t target, uint32_t call, uint32_t outer)
{
    if (!p->used || p->target != target)
        return 0;
    if (p->other_site ? is_site[(call >> 1) & 0xffff] : !p->any_site && p->site != call)
        return 0;
    return p->sup ? (outer & p->mask) == p->mask : outer == p->mask;
}

static void push(avr_t *avr, uint32_t target, uint32_t call, uint32_t ret)
{
    if (depth >= MAXDEPTH)
        die("call stack too deep");
    uint32_t outer = site_bits[(call >> 1) & 0xffff];
    for (int k = 0; k < depth; ++k)
        outer |= stack[k].active;
    struct frame *fr = &stack[depth++];
    memset(fr, 0, sizeof *fr);
    fr->target = target;
    fr->ret = ret;
    fr->call = call;
    fr->sp = (uint16_t)(get_sp(avr) + 2);
    fr->start = avr->cycle;
    fr->active = site_bits[(call >> 1) & 0xffff];
    for (int g = 0; g < MAXG; ++g)
        fr->probe[g] = -1;
    for (int k = 0; k < MAXP; ++k)
        if (match(&probes[k], target, call, outer) && fr->probe[probes[k].group] < 0)
            fr->probe[probes[k].group] = k;
}

int main(int argc, char **argv)
{
    if (argc != 7)
        die("usage: avr_trace ELF MCU READY IN N_IN_BYTES SPEC < cases");
    elf_firmware_t fw;
    memset(&fw, 0, sizeof fw);
    avr_global_logger_set(quiet);
    if (elf_read_firmware(argv[1], &fw) != 0)
        die("cannot read ELF");
    snprintf(fw.mmcu, sizeof fw.mmcu, "%s", argv[2]);
    fw.frequency = 20000000;
    uint32_t ready = strtoul(argv[3], NULL, 0), in = strtoul(argv[4], NULL, 0) & 0xffff;
    size_t nin = strtoul(argv[5], NULL, 0);
    read_spec(argv[6]);
    avr_t *avr = avr_make_mcu_by_name(fw.mmcu);
    if (!avr)
        die("unknown MCU");
    avr_init(avr);
    avr_load_firmware(avr, &fw);
    depth = 1;   /* the base frame (main and below) */
    for (int g = 0; g < MAXG; ++g)
        stack[0].probe[g] = -1;
    stack[0].ret = 0xffffffffu;
    uint32_t prev = 0;
    uint64_t limit = 0;
    for (;;) {
        int state = avr_run(avr);
        uint32_t pc = avr->pc;
        if (state == cpu_Crashed || state == cpu_Done || pc == 0 || avr->cycle - limit > 200000000ull) {
            fprintf(stderr, "avr_trace: firmware stopped at 0x%x\n", pc);
            return 4;
        }
        uint8_t cs = call_size[(prev >> 1) & 0xffff];
        if (cs && pc != prev + cs) {
            push(avr, pc, prev, prev + cs);
        } else {
            while (depth > 1 && pc == stack[depth - 1].ret && get_sp(avr) == stack[depth - 1].sp) {
                struct frame *fr = &stack[--depth];
                for (int g = 0; g < MAXG; ++g)
                    if (fr->probe[g] >= 0)
                        record(fr, g, avr->cycle - fr->start);
                break;
            }
        }
        int8_t c = ctx_at[(pc >> 1) & 0xffff];
        if (c >= 0)
            stack[depth - 1].active |= 1u << c;
        count_pc(pc);
        if (pc == ready) {
            if (fread(avr->data + in, 1, nin, stdin) != nin)
                break;
            limit = avr->cycle;
        }
        prev = pc;
    }
    for (int k = 0; k < MAXP; ++k) {
        struct probe *p = &probes[k];
        if (!p->used)
            continue;
        printf("probe %d invocations %llu maxcycles %llu\n", k, p->invocations, (unsigned long long)p->maxc);
        for (unsigned s = 0; s < (1u << HBITS); ++s) {
            struct vec *v = &p->tab[s];
            if (!v->c)
                continue;
            printf("vec %d %u %llu", k, v->mult, (unsigned long long)v->maxc);
            for (int j = 0; j < p->n; ++j)
                printf(" %u", v->c[j]);
            putchar('\n');
        }
    }
    return 0;
}
