/* engine/commands/fs.c — the fs family: read, write, append, stat, list and
 * remove, on libuv's thread pool (uv_fs_* with callbacks on the loop,
 * engine/io/io.h). Ids, arguments, results and errors are in docs/COMMANDS.md.
 *
 * One op per yield. It owns one uv_fs_t and runs a chain of requests on
 * it, one at a time: read is open, fstat, read (in chunks of FS_CHUNK),
 * close; write and append are open, write (in chunks), close; stat is one
 * lstat, list one scandir, remove an unlink (then an rmdir when the path
 * is a directory). An op that opened a file answers only after its close
 * has returned, so a process that gets an answer holds no fd through it.
 *
 * Cancellation (the owner finished, the yield's timeout passed, the
 * engine stops): the pending request is uv_cancel'ed; if a pool thread is
 * already running it (UV_EBUSY), it finishes and its callback sees
 * op.cancelled. Either way the chain stops at that callback: an fd it
 * opened is closed, buffers are freed with the op, and the answer
 * (SX_ECANCELLED) is dropped by engine/io/. A close is never cancelled, or its
 * fd would leak. Chunking bounds how long a cancelled big read or write
 * keeps a pool thread busy (one chunk), and means a cancelled write may
 * leave a partial file.
 *
 * Costs: a read of n bytes allocates n + 5 once (the bytes are read
 * behind room for the msgpack bin header, so the answer needs no copy of
 * its own; sx_complete copies it into the event). A write copies its data
 * once, on the worker, into the op's own block (args are only valid
 * during the handler).
 *
 * Threads: handlers [worker]; everything else [loop]. The system calls
 * run on libuv's thread pool; every callback runs on the op's loop.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/commands/commands.h"
#include "engine/io/io.h"
#include "process/fault.h"

#define FS_READ_MAX ((uint64_t)64 << 20)   /* read's default and upper max */
#define FS_CHUNK ((size_t)4 << 20)         /* bytes per read / write request */
#define FS_STREAM_START ((size_t)64 << 10) /* first buffer, unknown sizes */
#define BIN_HDR 5                          /* msgpack bin32 header bytes */

typedef enum { F_READ, F_WRITE, F_APPEND, F_STAT, F_LIST, F_REMOVE } fs_kind;

static const char *const fs_name[] = { "fs.read", "fs.write", "fs.append",
                                       "fs.stat", "fs.list",  "fs.remove" };

/* The request in flight. */
typedef enum {
    S_OPEN,
    S_FSTAT,
    S_READ,
    S_WRITE,
    S_CLOSE,
    S_LSTAT,
    S_SCANDIR,
    S_UNLINK,
    S_RMDIR
} fs_stage;

/* One yield's work. Everything but the handler's fill-in is [loop]. */
typedef struct {
    sx__ioop op; /* first */
    fs_kind kind;
    fs_stage stage;
    bool busy;      /* req is submitted and its callback has not run */
    uv_fs_t req;    /* the one request of the chain in flight */
    uv_file fd;     /* the open file, or -1 */
    int err;        /* the first error; answered once the fd is closed */
    int unlink_err; /* remove: unlink's error while rmdir is tried */
    /* read: the window [offset, offset + max) */
    int64_t offset;
    uint64_t max;
    bool max_given; /* max came from args: a window, never SX_ELIMIT */
    bool stream;    /* size unknown (not a regular file, or size 0) */
    uint8_t *buf;   /* owned (fini): BIN_HDR bytes, then cap for data */
    size_t cap, want, got;
    /* write, append: data lives in the op's block, after the path */
    const uint8_t *data;
    size_t len, put;
    /* stat, list: the answer, packed before the answer is given */
    sx_pack res;
    char path[]; /* NUL-terminated; then the data, for write / append */
} fs_op;

static const sx_payload nil = { NULL, 0 };

static void fs_cb(uv_fs_t *req);

/* ---- ending [loop] ---- */

/* Answers (the result, or f->err with a message naming the op and the
 * path) and releases the op. Its fd is closed by now. */
static void conclude(fs_op *f)
{
    if (f->err != 0) {
        char msg[PATH_MAX + 160];
        char what[128];
        if (f->err == SX_ELIMIT)
            snprintf(msg, sizeof msg,
                     "fs.read: file larger than max (%llu bytes)",
                     (unsigned long long)f->max);
        else if (f->err == SX_ECANCELLED)
            snprintf(msg, sizeof msg, "%s: %s: cancelled", fs_name[f->kind],
                     f->path);
        else
            /* uv_strerror_r: uv_strerror leaks for unknown codes. */
            snprintf(msg, sizeof msg, "%s: %s: %s", fs_name[f->kind], f->path,
                     uv_strerror_r(f->err, what, sizeof what));
        sx__io_answer(&f->op, nil, f->err, msg);
        sx__io_release(&f->op);
        return;
    }
    uint8_t ibuf[SX_PAYLOAD_INT_MAX];
    sx_payload out = nil;
    switch (f->kind) {
    case F_READ: {
        /* The header goes right before the data: bin8, bin16 or bin32. */
        size_t n = f->got, h = n <= 0xff ? 2 : n <= 0xffff ? 3 : 5;
        uint8_t *p = f->buf + BIN_HDR - h;
        p[0] = h == 2 ? 0xc4 : h == 3 ? 0xc5 : 0xc6;
        for (size_t i = 1; i < h; i++)
            p[i] = (uint8_t)(n >> (8 * (h - 1 - i)));
        out = (sx_payload){ p, h + n };
        break;
    }
    case F_WRITE:
    case F_APPEND:
        out = sx_payload_int(ibuf, (int64_t)f->put);
        break;
    case F_STAT:
    case F_LIST:
        out = sx_pack_payload(&f->res);
        break;
    case F_REMOVE:
        break;
    }
    sx__io_answer(&f->op, out, 0, NULL);
    sx__io_release(&f->op);
}

/* The chain ends with err (0: success): close the fd if one is open, then
 * conclude. Keeps the first error. */
static void finish(fs_op *f, int err)
{
    if (f->err == 0)
        f->err = err;
    if (f->fd < 0) {
        conclude(f);
        return;
    }
    f->stage = S_CLOSE;
    if (uv_fs_close(sx__io_uv(&f->op), &f->req, f->fd, fs_cb) == 0) {
        f->busy = true;
        return;
    }
    /* Not reached with libuv 1.44 (a close with a callback only queues
     * work); closing inline still frees the fd. */
    uv_fs_close(sx__io_uv(&f->op), &f->req, f->fd, NULL);
    uv_fs_req_cleanup(&f->req);
    f->fd = -1;
    conclude(f);
}

/* A uv_fs_* call returned rc: 0 means its callback will run; an error
 * (UV_ENOMEM copying the path) means it never will. */
static void submitted(fs_op *f, int rc)
{
    if (rc == 0)
        f->busy = true;
    else
        finish(f, rc);
}

/* ---- read ---- */

static void read_next(fs_op *f)
{
    size_t room;
    int64_t pos;
    if (f->stream) {
        if (f->got == f->cap) {
            size_t cap = f->cap * 2 < f->want ? f->cap * 2 : f->want;
            uint8_t *b = SX__FAULT(SX__FAULT_FS_BUF)
                             ? NULL
                             : realloc(f->buf, BIN_HDR + cap);
            if (b == NULL) {
                finish(f, SX_ENOMEM);
                return;
            }
            f->buf = b;
            f->cap = cap;
        }
        room = f->cap - f->got;
        /* -1: read(2) at the current position, which is all a pipe
         * allows; with an offset, pread (ESPIPE where it cannot seek). */
        pos = f->offset == 0 ? -1 : f->offset + (int64_t)f->got;
    } else {
        room = f->want - f->got;
        pos = f->offset + (int64_t)f->got;
    }
    uv_buf_t b = uv_buf_init((char *)f->buf + BIN_HDR + f->got,
                             (unsigned)(room < FS_CHUNK ? room : FS_CHUNK));
    f->stage = S_READ;
    submitted(f,
              uv_fs_read(sx__io_uv(&f->op), &f->req, f->fd, &b, 1, pos, fs_cb));
}

/* fstat answered: size the window and the buffer. */
static void read_sized(fs_op *f, const uv_stat_t *st)
{
    if (S_ISDIR(st->st_mode)) {
        finish(f, UV_EISDIR);
        return;
    }
    uint64_t size = st->st_size;
    if (!S_ISREG(st->st_mode) || size == 0) {
        /* Size unknown (a pipe, a device, /proc): read to EOF, one byte
         * past max when max is the default, to tell "larger". */
        f->stream = true;
        f->want = (size_t)(f->max_given ? f->max : f->max + 1);
        f->cap = f->want < FS_STREAM_START ? f->want : FS_STREAM_START;
    } else {
        uint64_t off = (uint64_t)f->offset;
        uint64_t rest = off < size ? size - off : 0;
        if (!f->max_given && rest > f->max) {
            finish(f, SX_ELIMIT);
            return;
        }
        f->want = (size_t)(rest < f->max ? rest : f->max);
        f->cap = f->want;
    }
    f->buf = SX__FAULT(SX__FAULT_FS_BUF) ? NULL : malloc(BIN_HDR + f->cap);
    if (f->buf == NULL) {
        finish(f, SX_ENOMEM);
        return;
    }
    if (f->want == 0) {
        finish(f, 0);
        return;
    }
    read_next(f);
}

static void read_got(fs_op *f, ssize_t r)
{
    if (r == 0) { /* EOF: the file ended (or shrank) before the window */
        finish(f, 0);
        return;
    }
    f->got += (size_t)r;
    if (f->got < f->want) {
        read_next(f);
        return;
    }
    /* The window is full. Reading past max was only to detect this. */
    finish(f, f->stream && !f->max_given ? SX_ELIMIT : 0);
}

/* ---- write, append ---- */

static void write_next(fs_op *f)
{
    if (f->put == f->len) {
        finish(f, 0);
        return;
    }
    size_t n = f->len - f->put;
    uv_buf_t b = uv_buf_init((char *)f->data + f->put,
                             (unsigned)(n < FS_CHUNK ? n : FS_CHUNK));
    f->stage = S_WRITE;
    /* -1: at the current position (the end, for O_APPEND). */
    submitted(f,
              uv_fs_write(sx__io_uv(&f->op), &f->req, f->fd, &b, 1, -1, fs_cb));
}

/* ---- stat, list ---- */

/* s seconds and ns (0 <= ns < 1e9) as ns since the epoch, clamped to
 * int64 (1677-09-21 to 2262-04-11): a file system may hold any 64-bit
 * tv_sec (touch -d 2300-01-01), and the plain product would overflow. */
static int64_t epoch_ns(int64_t s, int64_t ns)
{
    const int64_t g = 1000000000;
    if (s >= 0)
        return s <= (INT64_MAX - ns) / g ? s * g + ns : INT64_MAX;
    /* (s + 1) * g + (ns - g): the same sum, with no step below INT64_MIN
     * while the result is in range (division truncates: a ceiling here). */
    return s + 1 >= (INT64_MIN + g - ns) / g ? (s + 1) * g + (ns - g)
                                             : INT64_MIN;
}

static void stat_pack(fs_op *f, const uv_stat_t *st)
{
    const char *type = S_ISREG(st->st_mode)   ? "file"
                       : S_ISDIR(st->st_mode) ? "dir"
                       : S_ISLNK(st->st_mode) ? "link"
                                              : "other";
    int64_t mtime = epoch_ns(st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    sx_pack_map(&f->res, 4);
    sx_pack_str(&f->res, "size");
    sx_pack_uint(&f->res, st->st_size);
    sx_pack_str(&f->res, "mode");
    sx_pack_uint(&f->res, st->st_mode & 07777);
    sx_pack_str(&f->res, "type");
    sx_pack_str(&f->res, type);
    sx_pack_str(&f->res, "mtime_ns");
    sx_pack_int(&f->res, mtime);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Packs scandir's n entries, sorted bytewise (libuv's order is not part
 * of its contract). 0 or SX_ENOMEM. */
static int list_pack(fs_op *f, size_t n)
{
    char **names = SX__FAULT(SX__FAULT_FS_BUF)
                       ? NULL
                       : calloc(n > 0 ? n : 1, sizeof(*names));
    if (names == NULL)
        return SX_ENOMEM;
    size_t k = 0;
    int rc = 0;
    uv_dirent_t ent;
    /* scandir_next frees each entry on the next call: copy the names.
     * Go on to its UV_EOF even after n names, or after a copy failed:
     * that call frees the last entry, which uv_fs_req_cleanup (libuv
     * 1.44) leaks when it was the final one. (Before any call, cleanup
     * frees them all: the names array failing needs no walk.) */
    while (uv_fs_scandir_next(&f->req, &ent) == 0) {
        if (k == n || rc != 0)
            continue; /* k == n: not reached, scandir said n */
        names[k] = SX__FAULT(SX__FAULT_FS_BUF) ? NULL : strdup(ent.name);
        if (names[k] == NULL)
            rc = SX_ENOMEM; /* the rest are only walked past */
        else
            k++;
    }
    if (rc == 0) {
        qsort(names, k, sizeof(*names), name_cmp);
        sx_pack_array(&f->res, (uint32_t)k);
        for (size_t i = 0; i < k; i++)
            sx_pack_str(&f->res, names[i]);
        rc = f->res.err;
    }
    for (size_t i = 0; i < k; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* ---- the chain ---- */

/* Every request's callback. Runs the next step of the chain, or ends it. */
static void fs_cb(uv_fs_t *req)
{
    fs_op *f = req->data;
    ssize_t r = req->result;
    f->busy = false;
    if (f->stage == S_CLOSE) {
        uv_fs_req_cleanup(req);
        f->fd = -1;
        finish(f, r < 0 ? (int)r : 0);
        return;
    }
    if (f->stage == S_OPEN && r >= 0)
        f->fd = (uv_file)r; /* closed by finish, cancelled or not */
    if (f->op.cancelled || r < 0) {
        int err = f->op.cancelled ? SX_ECANCELLED : (int)r;
        if (f->stage == S_UNLINK && !f->op.cancelled &&
            (err == UV_EISDIR || err == UV_EPERM)) {
            /* A directory (Linux says EISDIR, POSIX allows EPERM). */
            uv_fs_req_cleanup(req);
            f->unlink_err = err;
            f->stage = S_RMDIR;
            submitted(
                f, SX__FAULT(SX__FAULT_FS_REQ)
                       ? UV_ENOMEM
                       : uv_fs_rmdir(sx__io_uv(&f->op), req, f->path, fs_cb));
            return;
        }
        if (f->stage == S_RMDIR && err == UV_ENOTDIR)
            err = f->unlink_err; /* not a directory after all: unlink's */
        if (f->stage == S_READ && err == UV_EAGAIN && f->got > 0) {
            /* A FIFO (or device) with a writer ran dry: the answer is what
             * came so far. Those bytes have left the pipe, so an error
             * would lose them; -EAGAIN is only for "nothing at all". */
            uv_fs_req_cleanup(req);
            finish(f, 0);
            return;
        }
        uv_fs_req_cleanup(req);
        finish(f, err);
        return;
    }
    switch (f->stage) {
    case S_OPEN:
        uv_fs_req_cleanup(req);
        if (f->kind == F_READ) {
            f->stage = S_FSTAT;
            submitted(f, uv_fs_fstat(sx__io_uv(&f->op), req, f->fd, fs_cb));
        } else {
            write_next(f);
        }
        return;
    case S_FSTAT: {
        uv_stat_t st = req->statbuf;
        uv_fs_req_cleanup(req);
        read_sized(f, &st);
        return;
    }
    case S_READ:
        uv_fs_req_cleanup(req);
        read_got(f, r);
        return;
    case S_WRITE:
        uv_fs_req_cleanup(req);
        /* write(2) returning 0 for a non-empty buffer would loop forever;
         * no file system does it, but say EIO rather than spin. */
        if (r == 0) {
            finish(f, UV_EIO);
            return;
        }
        f->put += (size_t)r;
        write_next(f);
        return;
    case S_LSTAT: {
        uv_stat_t st = req->statbuf;
        uv_fs_req_cleanup(req);
        stat_pack(f, &st);
        finish(f, f->res.err);
        return;
    }
    case S_SCANDIR: {
        int rc = list_pack(f, (size_t)r);
        uv_fs_req_cleanup(req);
        finish(f, rc);
        return;
    }
    case S_UNLINK:
    case S_RMDIR:
        uv_fs_req_cleanup(req);
        finish(f, 0);
        return;
    case S_CLOSE:
        break; /* handled above */
    }
}

static void fs_start(sx__ioop *op)
{
    fs_op *f = (fs_op *)op;
    uv_loop_t *uv = sx__io_uv(op);
    f->req.data = f;
    int rc = 0;
    /* O_NONBLOCK: a FIFO neither blocks the open nor a pool thread (it
     * reads EAGAIN); regular files ignore it. libuv adds O_CLOEXEC too. */
    int ro = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
    int wo = O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC;
    /* Each of these copies the path first: UV_ENOMEM when it cannot. */
    if (SX__FAULT(SX__FAULT_FS_REQ)) {
        submitted(f, UV_ENOMEM);
        return;
    }
    switch (f->kind) {
    case F_READ:
        f->stage = S_OPEN;
        rc = uv_fs_open(uv, &f->req, f->path, ro, 0, fs_cb);
        break;
    case F_WRITE:
        f->stage = S_OPEN;
        rc = uv_fs_open(uv, &f->req, f->path, wo | O_TRUNC, 0644, fs_cb);
        break;
    case F_APPEND:
        f->stage = S_OPEN;
        rc = uv_fs_open(uv, &f->req, f->path, wo | O_APPEND, 0644, fs_cb);
        break;
    case F_STAT:
        f->stage = S_LSTAT;
        rc = uv_fs_lstat(uv, &f->req, f->path, fs_cb);
        break;
    case F_LIST:
        f->stage = S_SCANDIR;
        rc = uv_fs_scandir(uv, &f->req, f->path, 0, fs_cb);
        break;
    case F_REMOVE:
        f->stage = S_UNLINK;
        rc = uv_fs_unlink(uv, &f->req, f->path, fs_cb);
        break;
    }
    submitted(f, rc);
}

static void fs_cancel(sx__ioop *op)
{
    fs_op *f = (fs_op *)op;
    /* UV_EBUSY: a pool thread runs it (or ran it); its callback sees
     * op.cancelled and ends the chain. Never a close: see the top. */
    if (f->busy && f->stage != S_CLOSE)
        (void)uv_cancel((uv_req_t *)&f->req);
}

static void fs_fini(sx__ioop *op)
{
    fs_op *f = (fs_op *)op;
    free(f->buf);
    sx_pack_fini(&f->res);
}

static const sx__ioop_vt fs_vt = { "fs", fs_start, fs_cancel, fs_fini };

/* ---- handlers [worker] ---- */

static int bad_args(sx_completer *done, const char *msg)
{
    sx_complete(done, nil, SX_EINVAL, msg);
    return 0;
}

/* A new op for kind on path, with room for dlen bytes of data after the
 * path (copied by the caller). NULL when out of memory. */
static fs_op *fs_new(sx_completer *done, fs_kind kind, const char *path,
                     size_t plen, size_t dlen)
{
    fs_op *f =
        (fs_op *)sx__io_op_new(sizeof(fs_op) + plen + 1 + dlen, &fs_vt, done);
    if (f == NULL)
        return NULL;
    f->kind = kind;
    f->fd = -1;
    f->max = FS_READ_MAX;
    sx_pack_init(&f->res);
    memcpy(f->path, path, plen);
    f->path[plen] = 0;
    f->data = (const uint8_t *)f->path + plen + 1;
    f->len = dlen;
    return f;
}

/* A path: a non-empty string without NUL bytes, at most PATH_MAX bytes. */
static bool get_path(sx_unpack *u, const char **p, size_t *n)
{
    return sx_unpack_str(u, p, n) == 0 && *n > 0 && *n <= PATH_MAX &&
           memchr(*p, 0, *n) == NULL;
}

#define PATH_RULE                                                              \
    "a path is a non-empty string without NUL bytes, at most PATH_MAX bytes"

static bool key_is(const char *k, size_t kl, const char *name)
{
    return kl == strlen(name) && memcmp(k, name, kl) == 0;
}

static int cmd_read(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    static const char usage[] =
        "fs.read: args must be a path or a map {path, offset (int >= 0), "
        "max (int from 0 to 67108864)}; " PATH_RULE;
    sx_unpack u;
    const char *path = NULL;
    size_t plen = 0;
    int64_t offset = 0;
    uint64_t max = FS_READ_MAX;
    bool max_given = false, off_given = false;
    uint32_t n;
    sx_unpack_init(&u, args);
    if (sx_unpack_type(&u) == SX_MP_STR) {
        if (!get_path(&u, &path, &plen))
            return bad_args(done, usage);
    } else if (sx_unpack_map(&u, &n) == 0) {
        for (uint32_t i = 0; i < n; i++) {
            const char *k;
            size_t kl;
            bool ok = sx_unpack_str(&u, &k, &kl) == 0;
            if (!ok) {
                /* not a string key */
            } else if (key_is(k, kl, "path") && path == NULL) {
                ok = get_path(&u, &path, &plen);
            } else if (key_is(k, kl, "offset") && !off_given) {
                off_given = true;
                ok = sx_unpack_int(&u, &offset) == 0 && offset >= 0;
            } else if (key_is(k, kl, "max") && !max_given) {
                max_given = true;
                ok = sx_unpack_uint(&u, &max) == 0 && max <= FS_READ_MAX;
            } else {
                ok = false; /* an unknown or repeated key */
            }
            if (!ok)
                return bad_args(done, usage);
        }
    }
    if (path == NULL || !sx_unpack_done(&u))
        return bad_args(done, usage);
    fs_op *f = fs_new(done, F_READ, path, plen, 0);
    if (f == NULL)
        return SX_ENOMEM;
    f->offset = offset;
    f->max = max;
    f->max_given = max_given;
    sx__io_submit(&f->op); /* the op is the loop's now */
    return 0;
}

/* write, append: args are [path, data (str or bin)]. */
static int cmd_put(sx_completer *done, fs_kind kind, sx_payload args)
{
    static const char *const usage[] = {
        [F_WRITE] =
            "fs.write: args must be [path, data (str or bin)]; " PATH_RULE,
        [F_APPEND] =
            "fs.append: args must be [path, data (str or bin)]; " PATH_RULE,
    };
    sx_unpack u;
    uint32_t n;
    const char *path;
    size_t plen, dlen = 0;
    const void *data = NULL;
    sx_unpack_init(&u, args);
    if (sx_unpack_array(&u, &n) != 0 || n != 2 || !get_path(&u, &path, &plen))
        return bad_args(done, usage[kind]);
    int t = sx_unpack_type(&u);
    int rc = t == SX_MP_STR   ? sx_unpack_str(&u, (const char **)&data, &dlen)
             : t == SX_MP_BIN ? sx_unpack_bin(&u, &data, &dlen)
                              : SX_EINVAL;
    if (rc != 0 || !sx_unpack_done(&u))
        return bad_args(done, usage[kind]);
    fs_op *f = fs_new(done, kind, path, plen, dlen);
    if (f == NULL)
        return SX_ENOMEM;
    if (dlen > 0)
        memcpy(f->path + plen + 1, data, dlen);
    sx__io_submit(&f->op); /* the op is the loop's now */
    return 0;
}

/* stat, list, remove: args are one path. */
static int cmd_path(sx_completer *done, fs_kind kind, sx_payload args)
{
    static const char *const usage[] = {
        [F_STAT] = "fs.stat: args must be a path; " PATH_RULE,
        [F_LIST] = "fs.list: args must be a path; " PATH_RULE,
        [F_REMOVE] = "fs.remove: args must be a path; " PATH_RULE,
    };
    sx_unpack u;
    const char *path;
    size_t plen;
    sx_unpack_init(&u, args);
    if (!get_path(&u, &path, &plen) || !sx_unpack_done(&u))
        return bad_args(done, usage[kind]);
    fs_op *f = fs_new(done, kind, path, plen, 0);
    if (f == NULL)
        return SX_ENOMEM;
    sx__io_submit(&f->op); /* the op is the loop's now */
    return 0;
}

/* write, append, stat, list, remove; user points at the kind. */
static int cmd_fs(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                  sx_payload args, sx_completer *done)
{
    (void)e, (void)pid, (void)tag;
    fs_kind kind = *(const fs_kind *)user;
    if (kind == F_WRITE || kind == F_APPEND)
        return cmd_put(done, kind, args);
    return cmd_path(done, kind, args);
}

_Static_assert(SX_CMD_FS_WRITE == SX_CMD_FS_READ + F_WRITE &&
                   SX_CMD_FS_REMOVE == SX_CMD_FS_READ + F_REMOVE,
               "fs ids follow fs_kind");

void sx__cmd_fs_register(sx_engine *e)
{
    static const fs_kind kinds[] = { F_READ, F_WRITE, F_APPEND,
                                     F_STAT, F_LIST,  F_REMOVE };
    e->cmds[SX_CMD_FS_READ] =
        (sx__cmd){ cmd_read, NULL, fs_name[F_READ], false };
    for (int k = F_WRITE; k <= F_REMOVE; k++)
        e->cmds[SX_CMD_FS_READ + k] =
            (sx__cmd){ cmd_fs, (void *)&kinds[k], fs_name[k], false };
}
