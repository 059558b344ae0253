/* io helpers: message lists, small-file reads, UTF-8 checking, the registry of open
 * inputs, and atomic placement of written files (temporary file beside the destination,
 * flush, then rename; an open input is never replaced, an existing file only on request). */
#define _GNU_SOURCE
#include "io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- strings and paths ---- */
char *qk_io_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *qk_io_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return qk_io_strdup(".");
    if (slash == path) return qk_io_strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

char *qk_io_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

size_t qk_utf8_check(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        uint32_t cp, min;
        if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1fu; min = 0x80; }
        else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0fu; min = 0x800; }
        else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07u; min = 0x10000; }
        else return i;
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0u) != 0x80u) return i;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffffu || (cp >= 0xd800u && cp <= 0xdfffu)) return i;
        i += len;
    }
    return n;
}

/* ---- message lists ---- */
void qk_msgs_add(qk_msgs *m, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        char **v = realloc(m->v, cap * sizeof *v);
        if (!v) return;
        m->v = v;
        m->cap = cap;
    }
    char *s = qk_io_strdup(buf);
    if (s) m->v[m->n++] = s;
}

void qk_msgs_free(qk_msgs *m)
{
    for (size_t i = 0; i < m->n; i++) free(m->v[i]);
    free(m->v);
    memset(m, 0, sizeof *m);
}

/* ---- opening inputs ---- */
const char *qk_io_file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a folder" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* open(2) without blocking on a FIFO (O_NONBLOCK changes nothing for regular files), then
   only a regular file is kept */
qk_status qk_io_open_regular(const char *who, const char *path, int *fd, struct stat *st)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) {
        const int e = errno;
        /* a socket cannot be opened at all (ENXIO): say what it is, as for a FIFO */
        if (e != EACCES && e != ENOENT && stat(path, st) == 0 && !S_ISREG(st->st_mode))
            return qk_fail(QK_ERR_IO, "%s: %s is %s; a checkpoint file must be a regular file", who,
                           path, qk_io_file_kind(st->st_mode));
        return qk_fail(QK_ERR_IO, "%s: cannot open %s: %s", who, path,
                       e == EACCES ? "permission denied" : strerror(e));
    }
    if (fstat(*fd, st) != 0) {
        const int e = errno;
        close(*fd);
        *fd = -1;
        return qk_fail(QK_ERR_IO, "%s: cannot stat %s: %s", who, path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(*fd);
        *fd = -1;
        return qk_fail(QK_ERR_IO, "%s: %s is %s; a checkpoint file must be a regular file", who,
                       path, qk_io_file_kind(st->st_mode));
    }
    return QK_OK;
}

/* ---- small files ---- */
qk_status qk_io_read_small(const char *path, size_t max, char **buf, size_t *n)
{
    *buf = NULL;
    *n = 0;
    int fd;
    struct stat st;
    qk_status os = qk_io_open_regular("read", path, &fd, &st);
    if (os != QK_OK) return os;
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return qk_fail(QK_ERR_FORMAT, "%s is %lld bytes, more than the %zu-byte limit for this file",
                       path, (long long)st.st_size, max);
    }
    size_t size = (size_t)st.st_size;
    char *b = malloc(size + 1);
    if (!b) {
        close(fd);
        return qk_fail(QK_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, b + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(b);
            close(fd);
            return qk_fail(QK_ERR_IO, "cannot read %s: %s", path, r < 0 ? strerror(errno) : "short read");
        }
        got += (size_t)r;
    }
    close(fd);
    b[size] = 0;
    *buf = b;
    *n = size;
    return QK_OK;
}

/* ---- registry of open inputs ---- */
typedef struct { dev_t dev; ino_t ino; long refs; } qk_input_ref;
static pthread_mutex_t qk_inputs_lock = PTHREAD_MUTEX_INITIALIZER;
static qk_input_ref *qk_inputs;
static size_t qk_ninputs, qk_inputs_cap;

void qk_io_register_input(dev_t dev, ino_t ino)
{
    pthread_mutex_lock(&qk_inputs_lock);
    for (size_t i = 0; i < qk_ninputs; i++)
        if (qk_inputs[i].dev == dev && qk_inputs[i].ino == ino) {
            qk_inputs[i].refs++;
            pthread_mutex_unlock(&qk_inputs_lock);
            return;
        }
    if (qk_ninputs == qk_inputs_cap) {
        size_t cap = qk_inputs_cap ? qk_inputs_cap * 2 : 16;
        qk_input_ref *v = realloc(qk_inputs, cap * sizeof *v);
        if (!v) { pthread_mutex_unlock(&qk_inputs_lock); return; }
        qk_inputs = v;
        qk_inputs_cap = cap;
    }
    qk_inputs[qk_ninputs].dev = dev;
    qk_inputs[qk_ninputs].ino = ino;
    qk_inputs[qk_ninputs].refs = 1;
    qk_ninputs++;
    pthread_mutex_unlock(&qk_inputs_lock);
}

void qk_io_unregister_input(dev_t dev, ino_t ino)
{
    pthread_mutex_lock(&qk_inputs_lock);
    for (size_t i = 0; i < qk_ninputs; i++)
        if (qk_inputs[i].dev == dev && qk_inputs[i].ino == ino) {
            if (--qk_inputs[i].refs == 0) qk_inputs[i] = qk_inputs[--qk_ninputs];
            break;
        }
    pthread_mutex_unlock(&qk_inputs_lock);
}

bool qk_io_is_open_input(dev_t dev, ino_t ino)
{
    bool found = false;
    pthread_mutex_lock(&qk_inputs_lock);
    for (size_t i = 0; i < qk_ninputs && !found; i++)
        found = qk_inputs[i].dev == dev && qk_inputs[i].ino == ino;
    pthread_mutex_unlock(&qk_inputs_lock);
    return found;
}

/* ---- atomic placement ---- */
qk_status qk_io_check_dest(const char *who, const char *path, unsigned flags)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return QK_OK;
        return qk_fail(QK_ERR_IO, "%s: cannot check %s: %s", who, path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) return qk_fail(QK_ERR_IO, "%s: %s is a directory", who, path);
    if (qk_io_is_open_input(st.st_dev, st.st_ino))
        return qk_fail(QK_ERR_IO, "%s: refusing to overwrite %s: it is open as an input", who, path);
    if (!(flags & QK_ST_WRITE_REPLACE))
        return qk_fail(QK_ERR_IO, "%s: refusing to overwrite the existing file %s", who, path);
    return QK_OK;
}

qk_status qk_io_tmp_create(const char *who, const char *path, char **tmp, int *fd)
{
    *tmp = NULL;
    *fd = -1;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: %s names no file", who, path);
    char *dir = qk_io_dirname(path);
    if (!dir) return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
    size_t n = strlen(dir) + strlen(base) + 32;
    char *t = malloc(n);
    if (!t) { free(dir); return qk_fail(QK_ERR_NOMEM, "%s: out of memory", who); }
    snprintf(t, n, "%s/.%s.tmp.XXXXXX", dir, base);
    free(dir);
    int f = mkstemp(t);
    if (f < 0) {
        qk_status st = qk_fail(QK_ERR_IO, "%s: cannot create a temporary file beside %s: %s", who,
                               path, strerror(errno));
        free(t);
        return st;
    }
    (void)fchmod(f, 0644);
    *tmp = t;
    *fd = f;
    return QK_OK;
}

qk_status qk_io_pwrite_all(const char *who, const char *path, int fd, const void *buf, size_t n,
                           uint64_t off)
{
    const char *p = buf;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t r = pwrite(fd, p, chunk, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return qk_fail(QK_ERR_IO, "%s: writing %s failed: %s", who, path,
                           r < 0 ? strerror(errno) : "no progress");
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return QK_OK;
}

qk_status qk_io_place(const char *who, int fd, const char *tmp, const char *path, unsigned flags)
{
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return qk_fail(QK_ERR_IO, "%s: cannot flush %s: %s", who, tmp, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return qk_fail(QK_ERR_IO, "%s: cannot close %s: %s", who, tmp, strerror(e));
    }
    qk_status st = qk_io_check_dest(who, path, flags);
    if (st != QK_OK) { unlink(tmp); return st; }
    if (!(flags & QK_ST_WRITE_REPLACE)) {
        /* link() fails atomically when path appeared meanwhile */
        if (link(tmp, path) == 0) {
            unlink(tmp);
        } else if (errno == EEXIST) {
            unlink(tmp);
            return qk_fail(QK_ERR_IO, "%s: refusing to overwrite the existing file %s", who, path);
        } else if (rename(tmp, path) != 0) { /* file systems without hard links */
            int e = errno;
            unlink(tmp);
            return qk_fail(QK_ERR_IO, "%s: cannot rename %s to %s: %s", who, tmp, path, strerror(e));
        }
    } else if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return qk_fail(QK_ERR_IO, "%s: cannot rename %s to %s: %s", who, tmp, path, strerror(e));
    }
    char *dir = qk_io_dirname(path);
    if (dir) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    return QK_OK;
}

qk_status qk_write_file_atomic(const char *path, const void *data, size_t n, unsigned flags)
{
    static const char who[] = "qk_write_file_atomic";
    if (!path || (!data && n)) return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    qk_status st = qk_io_check_dest(who, path, flags);
    if (st != QK_OK) return st;
    char *tmp;
    int fd;
    st = qk_io_tmp_create(who, path, &tmp, &fd);
    if (st != QK_OK) return st;
    st = qk_io_pwrite_all(who, path, fd, data, n, 0);
    if (st != QK_OK) {
        close(fd);
        unlink(tmp);
    } else {
        st = qk_io_place(who, fd, tmp, path, flags);
    }
    free(tmp);
    return st;
}

/* ---- files that must lie in the model folder ---- */
qk_status qk_io_check_inside(const char *who, const char *dir, const char *path, const char *what,
                             bool allow_external, char **real)
{
    *real = NULL;
    if (allow_external) return QK_OK;
    char *rd = realpath(dir, NULL);
    if (!rd)
        return qk_fail(QK_ERR_IO, "%s: cannot resolve the model folder %s: %s", who, dir,
                       errno == EACCES ? "permission denied" : strerror(errno));
    char *rp = realpath(path, NULL);
    if (!rp) {
        const int e = errno;
        free(rd);
        return qk_fail(QK_ERR_IO, "%s: cannot resolve %s %s: %s", who, what, path,
                       e == EACCES ? "permission denied" : e == ENOENT ? "it is a link to nothing"
                                                                       : strerror(e));
    }
    const size_t n = strlen(rd);
    /* inside: rd itself is "/", or rp is rd + "/" + something */
    const bool inside = (n == 1 && rd[0] == '/') || (!strncmp(rp, rd, n) && rp[n] == '/');
    if (!inside) {
        /* what to do comes before the resolved path, so that a cut message still says it */
        qk_status st = qk_fail(QK_ERR_FORMAT, "%s: %s %.160s resolves outside the model folder "
                               "(rule: a checkpoint's files lie in its folder; --allow-external-shards "
                               "in qk, or QK_ST_SET_ALLOW_EXTERNAL_SHARDS / QK_MS_ALLOW_EXTERNAL_SHARDS, "
                               "follows such links, as a Hugging Face cache snapshot's into "
                               "../../blobs): to %s", who, what, path, rp);
        free(rp);
        free(rd);
        return st;
    }
    free(rd);
    *real = rp;
    return QK_OK;
}

qk_status qk_io_same_file(const char *who, const char *path, const char *real, dev_t dev, ino_t ino)
{
    if (!real) return QK_OK;
    struct stat sb;
    if (stat(real, &sb) != 0 || sb.st_dev != dev || sb.st_ino != ino)
        return qk_fail(QK_ERR_IO, "%s: %s changed while it was opened (it no longer is %s)", who,
                       path, real);
    return QK_OK;
}
