/*
 * A pass-through SQLite VFS that counts what the benchmark reports:
 * xSync calls (every fsync/fdatasync the unix VFS would make) and
 * acquisitions of the WAL write lock (xShmLock of slot 0, exclusive),
 * which every write transaction takes once, BEGIN IMMEDIATE included.
 * Registered as the default VFS, it sees every connection of the
 * process, tokenbox's included.
 */
#include <sqlite3.h>
#include <stdatomic.h>
#include <string.h>

#include "bench/bench.h"

typedef struct cfile {
	sqlite3_file base;
	sqlite3_file *real; /* follows this struct in the same allocation */
} cfile_t;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs count_vfs;
static sqlite3_io_methods methods_v1, methods_v2, methods_v3;
static atomic_uint_fast64_t n_syncs, n_write_txns;

#define REAL(f) (((cfile_t *)(f))->real)

static int c_close(sqlite3_file *f)
{
	return REAL(f)->pMethods->xClose(REAL(f));
}
static int c_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
	return REAL(f)->pMethods->xRead(REAL(f), buf, amt, off);
}
static int c_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
	return REAL(f)->pMethods->xWrite(REAL(f), buf, amt, off);
}
static int c_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int c_sync(sqlite3_file *f, int flags)
{
	atomic_fetch_add(&n_syncs, 1);
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int c_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), size);
}
static int c_lock(sqlite3_file *f, int lock)
{
	return REAL(f)->pMethods->xLock(REAL(f), lock);
}
static int c_unlock(sqlite3_file *f, int lock)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), lock);
}
static int c_check(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int c_fcntl(sqlite3_file *f, int op, void *arg)
{
	return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int c_sector(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int c_devchar(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int c_shmmap(sqlite3_file *f, int pg, int pgsz, int extend,
		    void volatile **pp)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, pgsz, extend, pp);
}
static int c_shmlock(sqlite3_file *f, int offset, int n, int flags)
{
	int rc = REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags);

	/* Slot 0 is WAL_WRITE_LOCK (sqlite3/src/wal.c). */
	if (rc == SQLITE_OK && offset == 0 && n == 1 &&
	    flags == (SQLITE_SHM_LOCK | SQLITE_SHM_EXCLUSIVE))
		atomic_fetch_add(&n_write_txns, 1);
	return rc;
}
static void c_shmbarrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int c_shmunmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int c_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
	return REAL(f)->pMethods->xFetch(REAL(f), off, amt, pp);
}
static int c_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
	return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static int c_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f,
		  int flags, int *out_flags)
{
	cfile_t *cf = (cfile_t *)f;
	int rc;

	cf->real = (sqlite3_file *)(cf + 1);
	rc = real_vfs->xOpen(real_vfs, name, cf->real, flags, out_flags);
	if (!cf->real->pMethods) {
		f->pMethods = NULL;
		return rc;
	}
	switch (cf->real->pMethods->iVersion) {
	case 1:
		f->pMethods = &methods_v1;
		break;
	case 2:
		f->pMethods = &methods_v2;
		break;
	default:
		f->pMethods = &methods_v3;
		break;
	}
	return rc;
}

static int c_delete(sqlite3_vfs *v, const char *name, int dirsync)
{
	return real_vfs->xDelete(real_vfs, name, dirsync);
}
static int c_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
	return real_vfs->xAccess(real_vfs, name, flags, out);
}
static int c_fullpath(sqlite3_vfs *v, const char *name, int n, char *out)
{
	return real_vfs->xFullPathname(real_vfs, name, n, out);
}
static void *c_dlopen(sqlite3_vfs *v, const char *name)
{
	return real_vfs->xDlOpen(real_vfs, name);
}
static void c_dlerror(sqlite3_vfs *v, int n, char *msg)
{
	real_vfs->xDlError(real_vfs, n, msg);
}
static void (*c_dlsym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
	return real_vfs->xDlSym(real_vfs, h, sym);
}
static void c_dlclose(sqlite3_vfs *v, void *h)
{
	real_vfs->xDlClose(real_vfs, h);
}
static int c_random(sqlite3_vfs *v, int n, char *out)
{
	return real_vfs->xRandomness(real_vfs, n, out);
}
static int c_sleep(sqlite3_vfs *v, int us)
{
	return real_vfs->xSleep(real_vfs, us);
}
static int c_time(sqlite3_vfs *v, double *out)
{
	return real_vfs->xCurrentTime(real_vfs, out);
}
static int c_lasterr(sqlite3_vfs *v, int n, char *out)
{
	return real_vfs->xGetLastError
		   ? real_vfs->xGetLastError(real_vfs, n, out)
		   : 0;
}
static int c_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
	return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

int bench_countvfs_register(void)
{
	if (real_vfs)
		return SQLITE_OK;
	if (!(real_vfs = sqlite3_vfs_find(NULL)))
		return SQLITE_ERROR;
	methods_v1 = (sqlite3_io_methods){
	    1,	    c_close,  c_read,  c_write, c_truncate, c_sync,    c_size,
	    c_lock, c_unlock, c_check, c_fcntl, c_sector,   c_devchar, NULL,
	    NULL,   NULL,     NULL,    NULL,	NULL};
	methods_v2 = methods_v1;
	methods_v2.iVersion = 2;
	methods_v2.xShmMap = c_shmmap;
	methods_v2.xShmLock = c_shmlock;
	methods_v2.xShmBarrier = c_shmbarrier;
	methods_v2.xShmUnmap = c_shmunmap;
	methods_v3 = methods_v2;
	methods_v3.iVersion = 3;
	methods_v3.xFetch = c_fetch;
	methods_v3.xUnfetch = c_unfetch;

	count_vfs = (sqlite3_vfs){
	    .iVersion = 2,
	    .szOsFile = (int)sizeof(cfile_t) + real_vfs->szOsFile,
	    .mxPathname = real_vfs->mxPathname,
	    .zName = "bench-count",
	    .xOpen = c_open,
	    .xDelete = c_delete,
	    .xAccess = c_access,
	    .xFullPathname = c_fullpath,
	    .xDlOpen = c_dlopen,
	    .xDlError = c_dlerror,
	    .xDlSym = c_dlsym,
	    .xDlClose = c_dlclose,
	    .xRandomness = c_random,
	    .xSleep = c_sleep,
	    .xCurrentTime = c_time,
	    .xGetLastError = c_lasterr,
	    .xCurrentTimeInt64 = c_time64,
	};
	return sqlite3_vfs_register(&count_vfs, 1);
}

void bench_countvfs_get(bench_io_counts_t *counts)
{
	counts->syncs = atomic_load(&n_syncs);
	counts->write_txns = atomic_load(&n_write_txns);
}
