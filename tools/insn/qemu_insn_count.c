/* qemu_insn_count — a minimal QEMU TCG plugin (linux-user) that counts executed guest
 * instructions, in total and, optionally, only inside marked regions.
 *
 * Build (host shared object; no QEMU headers needed, the few entry points used are declared
 * below from the documented plugin API, version 1 as QEMU 7.2 accepts):
 *     gcc -O2 -shared -fPIC -fvisibility=hidden -o qemu_insn_count.so qemu_insn_count.c
 * Run:
 *     qemu-aarch64 -plugin ./qemu_insn_count.so,begin=SYM,end=SYM,out=FILE ./prog args
 * Arguments (all optional, key=value):
 *     begin=SYM|0xADDR  an instruction that opens a region: a function name (the first
 *                       instruction of each entry into it) or a guest virtual address
 *     end=SYM|0xADDR    an instruction that closes the open region
 *     out=FILE          write the result there instead of stderr
 * Output, one line:
 *     qemu_insn_count: total=N region=N regions=K vcpus=V
 * total counts every guest instruction executed; region sums (count at end - count at
 * begin) over the K closed regions. Counting is exact per instruction: blocks without a
 * marker add their length when entered (a block always runs to its end in user mode unless
 * a signal interrupts it); blocks holding a marker count instruction by instruction. The
 * counter is one shared uint64, not atomic: with V > 1 guest threads the counts are
 * approximate (the line says V). */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QIC_EXPORT __attribute__((visibility("default")))

/* ---- The QEMU plugin ABI, as far as this plugin uses it ---- */
typedef uint64_t qic_id;                 /* the plugin's opaque id */
struct qemu_plugin_tb;                   /* opaque translation-block handle */
struct qemu_plugin_insn;                 /* opaque instruction handle */

typedef struct qic_info {                /* what qemu_plugin_install receives */
    const char *target_name;
    struct { int min, cur; } version;
    bool system_emulation;
    union { struct { int smp_vcpus, max_vcpus; } system; } u;
} qic_info;

enum qic_cb_flags { QIC_CB_NO_REGS = 0 };          /* callback reads no registers */
enum qic_inline_op { QIC_INLINE_ADD_U64 = 0 };     /* *(uint64_t *)ptr += imm */

typedef void (*qic_tb_trans_cb)(qic_id id, struct qemu_plugin_tb *tb);
typedef void (*qic_vcpu_udata_cb)(unsigned int vcpu, void *udata);
typedef void (*qic_vcpu_cb)(qic_id id, unsigned int vcpu);
typedef void (*qic_udata_cb)(qic_id id, void *udata);

void qemu_plugin_register_vcpu_tb_trans_cb(qic_id id, qic_tb_trans_cb cb);
void qemu_plugin_register_vcpu_init_cb(qic_id id, qic_vcpu_cb cb);
void qemu_plugin_register_atexit_cb(qic_id id, qic_udata_cb cb, void *udata);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qic_inline_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn,
                                                enum qic_inline_op op, void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qic_vcpu_udata_cb cb,
                                            enum qic_cb_flags flags, void *udata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t i);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *insn);

QIC_EXPORT extern int qemu_plugin_version;
QIC_EXPORT int qemu_plugin_version = 1;
QIC_EXPORT int qemu_plugin_install(qic_id id, const qic_info *info, int argc, char **argv);

/* ---- State ---- */
typedef struct marker {
    const char *sym;     /* function name, or NULL when addr is used */
    uint64_t addr;
    bool set;
} marker;

static uint64_t g_count;            /* every executed guest instruction */
static uint64_t g_region, g_region_start, g_regions;
static bool g_open;
static unsigned g_vcpus;
static marker g_begin, g_end;
static const char *g_out;

static void on_begin(unsigned int vcpu, void *udata)
{
    (void)vcpu; (void)udata;
    g_region_start = g_count;
    g_open = true;
}

static void on_end(unsigned int vcpu, void *udata)
{
    (void)vcpu; (void)udata;
    if (g_open) {
        g_region += g_count - g_region_start;
        g_regions++;
        g_open = false;
    }
}

/* Does insn (the i-th of its block; prev_sym is the symbol of the (i-1)-th) hit m? A symbol
 * marker hits at the first instruction of the symbol within a block: for a small leaf
 * function, reached by a call, that is its entry. */
static bool hits(const marker *m, const struct qemu_plugin_insn *insn, const char *sym,
                 const char *prev_sym)
{
    if (!m->set) return false;
    if (!m->sym) return qemu_plugin_insn_vaddr(insn) == m->addr;
    if (!sym || strcmp(sym, m->sym) != 0) return false;
    return !prev_sym || strcmp(prev_sym, m->sym) != 0;
}

static void on_translate(qic_id id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    int kind[64];   /* per instruction: 0 none, 1 begin, 2 end (first 64 of the block) */
    bool any = false;
    const char *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        const char *sym = (g_begin.sym || g_end.sym) ? qemu_plugin_insn_symbol(insn) : NULL;
        int k = hits(&g_begin, insn, sym, prev) ? 1 : hits(&g_end, insn, sym, prev) ? 2 : 0;
        if (i < 64) kind[i] = k;
        else if (k) fprintf(stderr, "qemu_insn_count: marker past the 64th instruction of a "
                                    "block ignored\n");
        any |= k != 0 && i < 64;
        prev = sym;
    }
    if (!any) {
        qemu_plugin_register_vcpu_tb_exec_inline(tb, QIC_INLINE_ADD_U64, &g_count, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (i < 64 && kind[i])
            qemu_plugin_register_vcpu_insn_exec_cb(insn, kind[i] == 1 ? on_begin : on_end,
                                                   QIC_CB_NO_REGS, NULL);
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QIC_INLINE_ADD_U64, &g_count, 1);
    }
}

static void on_vcpu_init(qic_id id, unsigned int vcpu)
{
    (void)id; (void)vcpu;
    __atomic_add_fetch(&g_vcpus, 1u, __ATOMIC_RELAXED);
}

static void on_atexit(qic_id id, void *udata)
{
    (void)id; (void)udata;
    FILE *f = stderr;
    if (g_out && !(f = fopen(g_out, "w"))) {
        fprintf(stderr, "qemu_insn_count: cannot write %s\n", g_out);
        f = stderr;
    }
    fprintf(f, "qemu_insn_count: total=%" PRIu64 " region=%" PRIu64 " regions=%" PRIu64
               " vcpus=%u%s\n", g_count, g_region, g_regions, g_vcpus,
            g_open ? " (a region was still open at exit)" : "");
    if (f != stderr) fclose(f);
}

static bool parse_marker(marker *m, const char *v)
{
    if (!*v) return false;
    m->set = true;
    if (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
        char *e;
        m->addr = strtoull(v + 2, &e, 16);
        m->sym = NULL;
        return e != v + 2 && *e == '\0';
    }
    m->sym = v;
    return true;
}

QIC_EXPORT int qemu_plugin_install(qic_id id, const qic_info *info, int argc, char **argv)
{
    if (info->system_emulation) {
        fprintf(stderr, "qemu_insn_count: linux-user emulation only\n");
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool ok;
        if (!strncmp(a, "begin=", 6)) ok = parse_marker(&g_begin, a + 6);
        else if (!strncmp(a, "end=", 4)) ok = parse_marker(&g_end, a + 4);
        else if (!strncmp(a, "out=", 4)) ok = (g_out = a + 4)[0] != '\0';
        else ok = false;
        if (!ok) {
            fprintf(stderr, "qemu_insn_count: bad argument '%s' (begin=SYM|0xADDR, "
                            "end=SYM|0xADDR, out=FILE)\n", a);
            return 1;
        }
    }
    if (g_begin.set != g_end.set) {
        fprintf(stderr, "qemu_insn_count: give both begin= and end=, or neither\n");
        return 1;
    }
    qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_atexit, NULL);
    return 0;
}
