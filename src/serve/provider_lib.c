/* Provider libraries (serving.md): loaded by explicit path only (QK_PROVIDER_LIB or
 * qk_serve_provider_load), through one versioned entry point (QK_PROVIDER_ENTRY). A missing
 * file, a file that is not a shared library, a missing entry point, an ABI mismatch or a
 * CPU the library's target cannot run on are actionable errors naming the file, what was
 * found and what is required; nothing stays loaded after a failure. */
#define _GNU_SOURCE
#include "serve/serve_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static const qk_provider_info *lib_info;   /* atomic: NULL when none is loaded */
static void *lib_handle;
static char *lib_path;
static int lib_refs;                        /* weights prepared by the library */

const qk_provider_info *qk_serve_lib(void)
{
    return __atomic_load_n(&lib_info, __ATOMIC_ACQUIRE);
}

void qk_serve_lib_ref(int delta) { __atomic_add_fetch(&lib_refs, delta, __ATOMIC_ACQ_REL); }

const char *qk_serve_provider_path(void) { return qk_serve_lib() ? lib_path : NULL; }

const qk_provider_info *qk_serve_provider_info(void) { return qk_serve_lib(); }

qk_status qk_serve_lib_fail(qk_status st, const char *what)
{
    const qk_provider_info *lib = qk_serve_lib();
    const char *m = lib && lib->last_error ? lib->last_error() : NULL;
    return qk_fail(st, "%s (provider library %s): %s", what,
                   lib_path ? lib_path : "?", m && *m ? m : qk_status_name(st));
}

static const char *REBUILD = "build one from this release: the qkern_provider CMake target "
                             "writes build/libqkern-provider-<target>.so";


qk_status qk_serve_provider_load_path(const char *path)
{
    static const char who[] = "qk_serve_provider_load";
    if (!path || !*path)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: the path is empty; a provider library is "
                       "loaded by explicit path only", who);
    pthread_mutex_lock(&lib_lock);
    qk_status st = QK_OK;
    void *h = NULL;
    if (lib_info) {
        st = qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: cannot load %.300s: provider library %.300s "
                     "is already loaded (unload it first)", who, path, lib_path);
        goto out;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        st = qk_fail(QK_ERR_IO, "%s: cannot load provider library %.300s: %s; pass the path of a "
                     "libqkern-provider-<target>.so (%s)", who, path, strerror(errno), REBUILD);
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = qk_fail(QK_ERR_IO, "%s: cannot load provider library %.300s: not a regular file",
                     who, path);
        goto out;
    }
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        st = qk_fail(QK_ERR_FORMAT, "%s: %.300s is not a loadable shared library (%.200s); "
                     "required: a qkern provider library with ABI %d (%s)", who, path,
                     e ? e : "dlopen failed", QK_ABI_VERSION, REBUILD);
        goto out;
    }
    dlerror();
    void *sym = dlsym(h, QK_PROVIDER_ENTRY);
    if (!sym) {
        st = qk_fail(QK_ERR_FORMAT, "%s: %.300s is not a qkern provider library: it exports no "
                     "entry point %s; required: a qkern provider library with ABI %d that "
                     "exports %s (%s)", who, path, QK_PROVIDER_ENTRY, QK_ABI_VERSION,
                     QK_PROVIDER_ENTRY, REBUILD);
        goto out;
    }
    qk_provider_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    const qk_provider_info *info = entry();
    if (!info) {
        st = qk_fail(QK_ERR_FORMAT, "%s: %s in %.300s returned NULL; required: a qkern provider "
                     "library with ABI %d (%s)", who, QK_PROVIDER_ENTRY, path, QK_ABI_VERSION,
                     REBUILD);
        goto out;
    }
    if (info->abi_version != QK_ABI_VERSION) {
        st = qk_fail(QK_ERR_FORMAT, "%s: requires a qkern provider library with ABI %d; found "
                     "ABI %d in %.300s; rebuild it from this release", who, QK_ABI_VERSION,
                     (int)info->abi_version, path);
        goto out;
    }
    if (info->size < sizeof(qk_provider_info)) {
        st = qk_fail(QK_ERR_FORMAT, "%s: %.300s reports ABI %d but an op table of %u bytes where "
                     "ABI %d has %zu; rebuild it from this release", who, path,
                     (int)info->abi_version, (unsigned)info->size, QK_ABI_VERSION,
                     sizeof(qk_provider_info));
        goto out;
    }
    if (info->init) {
        qk_status ist = info->init();
        if (ist != QK_OK) {
            const char *m = info->last_error ? info->last_error() : "";
            st = qk_fail(ist, "%s: provider library %.300s (target %.40s) cannot run here: "
                         "%.300s", who, path, info->target ? info->target : "?", m);
            goto out;
        }
    }
    char *p = qk_serve_strdup(path);
    if (!p) {
        st = qk_fail(QK_ERR_NOMEM, "%s: out of memory", who);
        goto out;
    }
    lib_handle = h;
    lib_path = p;
    h = NULL;
    __atomic_store_n(&lib_info, info, __ATOMIC_RELEASE);
    qk_serve_ok();
out:
    if (h) dlclose(h);
    pthread_mutex_unlock(&lib_lock);
    return st;
}

qk_status qk_serve_provider_load(const char *path)
{
    qk_serve_init_implicit();   /* QK_PROVIDER_LIB, if set, is loaded first */
    return qk_serve_provider_load_path(path);
}

qk_status qk_serve_provider_unload(void)
{
    qk_serve_init_implicit();
    pthread_mutex_lock(&lib_lock);
    qk_status st = QK_OK;
    if (!lib_info) {
        st = qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_provider_unload: no provider library is "
                     "loaded");
    } else if (__atomic_load_n(&lib_refs, __ATOMIC_ACQUIRE) > 0) {
        st = qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_provider_unload: %d weight(s) prepared by "
                     "%.300s are alive; destroy them (or their layers) first",
                     __atomic_load_n(&lib_refs, __ATOMIC_ACQUIRE), lib_path);
    } else {
        __atomic_store_n(&lib_info, NULL, __ATOMIC_RELEASE);
        dlclose(lib_handle);
        lib_handle = NULL;
        free(lib_path);
        lib_path = NULL;
        qk_serve_ok();
    }
    pthread_mutex_unlock(&lib_lock);
    return st;
}
