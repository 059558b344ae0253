/* ptrace_insn_count — counts the x86-64 instructions a program executes natively between two
 * code addresses, by single-stepping it with ptrace. For hosts where neither a hardware
 * counter (perf_event_open) nor callgrind can be used, e.g. AVX-512 code under valgrind
 * 3.19, which does not decode AVX-512.
 *
 *   ptrace_insn_count [-o FILE] BEGIN END -- PROG ARGS...
 *
 * BEGIN and END are hex addresses (0x...) of instructions in a non-PIE PROG (take them with
 * nm). PROG runs at full speed up to its first execution of BEGIN (an int3 planted there),
 * is then single-stepped until it reaches END, and runs on at full speed to its exit; the
 * count covers BEGIN (included) to END (excluded) and, again, each later BEGIN..END pair.
 * A step that leaves the instruction pointer where it was (a rep-prefixed string
 * instruction doing one more iteration) is not counted again, so a rep movsb counts once,
 * as the CPU's instructions-retired counter does. Only the thread that reaches BEGIN is
 * stepped: a region that hands work to other threads is undercounted, so the tool says
 * how many threads the process had at each BEGIN.
 *
 * Prints: ptrace_insn_count: region=N regions=K threads=T status=S */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "ptrace_insn_count is for x86-64 Linux hosts"
#endif

static void die(const char *what)
{
    fprintf(stderr, "ptrace_insn_count: %s: %s\n", what, strerror(errno));
    exit(2);
}

static int count_threads(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static uint64_t get_rip(pid_t pid)
{
    errno = 0;
    long v = ptrace(PTRACE_PEEKUSER, pid, (void *)offsetof(struct user_regs_struct, rip), NULL);
    if (errno) die("PEEKUSER rip");
    return (uint64_t)v;
}

static void set_rip(pid_t pid, uint64_t rip)
{
    if (ptrace(PTRACE_POKEUSER, pid, (void *)offsetof(struct user_regs_struct, rip),
               (void *)rip) < 0)
        die("POKEUSER rip");
}

static long peek(pid_t pid, uint64_t addr)
{
    errno = 0;
    long v = ptrace(PTRACE_PEEKTEXT, pid, (void *)addr, NULL);
    if (errno) die("PEEKTEXT (is the address right and PROG non-PIE?)");
    return v;
}

static void poke(pid_t pid, uint64_t addr, long v)
{
    if (ptrace(PTRACE_POKETEXT, pid, (void *)addr, (void *)v) < 0) die("POKETEXT");
}

static int parse_addr(const char *s, uint64_t *a)
{
    char *e;
    if (strncmp(s, "0x", 2) != 0) return 0;
    *a = strtoull(s + 2, &e, 16);
    return e != s + 2 && *e == '\0';
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    int a = 1;
    if (a + 1 < argc && !strcmp(argv[a], "-o")) { out = argv[a + 1]; a += 2; }
    uint64_t begin, end;
    if (argc - a < 4 || !parse_addr(argv[a], &begin) || !parse_addr(argv[a + 1], &end) ||
        strcmp(argv[a + 2], "--") != 0) {
        fprintf(stderr, "usage: ptrace_insn_count [-o FILE] 0xBEGIN 0xEND -- PROG ARGS...\n");
        return 2;
    }
    char **prog = argv + a + 3;

    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0) die("TRACEME");
        execvp(prog[0], prog);
        die("exec");
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFSTOPPED(st)) die("wait for exec");
    ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)PTRACE_O_EXITKILL);

    const long orig = peek(pid, begin);
    const long trap = (orig & ~0xFFL) | 0xCC;
    poke(pid, begin, trap);

    uint64_t region = 0, regions = 0;
    int max_threads = 0, sig = 0;
    for (;;) {
        if (ptrace(PTRACE_CONT, pid, NULL, (void *)(long)sig) < 0) die("CONT");
        sig = 0;
        if (waitpid(pid, &st, 0) < 0) die("waitpid");
        if (WIFEXITED(st) || WIFSIGNALED(st)) break;
        if (!WIFSTOPPED(st)) continue;
        if (WSTOPSIG(st) != SIGTRAP || get_rip(pid) != begin + 1) {
            sig = WSTOPSIG(st) == SIGTRAP ? 0 : WSTOPSIG(st);
            continue;
        }
        /* At BEGIN: put the byte back, step from BEGIN to END. */
        poke(pid, begin, orig);
        set_rip(pid, begin);
        int nt = count_threads(pid);
        if (nt > max_threads) max_threads = nt;
        uint64_t rip = begin, n = 0;
        while (rip != end) {
            if (ptrace(PTRACE_SINGLESTEP, pid, NULL, (void *)(long)sig) < 0) die("SINGLESTEP");
            sig = 0;
            if (waitpid(pid, &st, 0) < 0) die("waitpid (step)");
            if (WIFEXITED(st) || WIFSIGNALED(st)) {
                fprintf(stderr, "ptrace_insn_count: PROG ended inside a region\n");
                goto done;
            }
            if (WIFSTOPPED(st) && WSTOPSIG(st) != SIGTRAP) sig = WSTOPSIG(st);
            uint64_t r = get_rip(pid);
            if (r != rip) n++;
            rip = r;
        }
        region += n;
        regions++;
        /* Re-arm BEGIN for the next region (END differs from BEGIN, so we are past it). */
        poke(pid, begin, trap);
    }
done:;
    int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    FILE *f = out ? fopen(out, "w") : stderr;
    if (!f) die("open output");
    fprintf(f, "ptrace_insn_count: region=%" PRIu64 " regions=%" PRIu64 " threads=%d status=%d\n",
            region, regions, max_threads, status);
    if (f != stderr) fclose(f);
    return status;
}
