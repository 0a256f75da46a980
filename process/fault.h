/* process/fault.h — allocations that fail on cue, for tests.
 *
 * An out-of-memory path cannot be reached from a test by running out of
 * memory: the threads' node caches and glibc's arenas go on handing out
 * memory long after, and the whole test would fail with it. A build with
 * SX_FAULT_INJECTION defined (meson's stepx_fault library, which only
 * tests/engine/test_fault and tests/relay/test_fault link) compiles a check in
 * front of chosen allocations: while a test has armed a site, the allocation
 * there fails as if malloc had returned NULL, and the site counts the failure,
 * so that the test can tell the path was taken. In every other build SX__FAULT
 * is the constant false and the check compiles away.
 *
 * Threads: [any thread].
 */
#ifndef SX_ENGINE_FAULT_H
#define SX_ENGINE_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    /* engine/timer/sleep.c drain: no room in the timer set for a new sleep
     * (sx__tw_reserve or sx__tw_add failed); the sleep is answered
     * SX_ENOMEM. */
    SX__FAULT_TIMER_KEEP = 1u << 0,
    /* engine/timer/sleep.c answer_of: no node for a due sleep's answer; the
     * entry goes back into the set and is tried again on the next look. */
    SX__FAULT_TIMER_ANSWER = 1u << 1,
    /* engine/core/proc.c sx__spawn: no process slot; submit and spawn return
     * SX_ENOMEM. */
    SX__FAULT_SPAWN = 1u << 2,
    /* engine/core/dispatch.c sx__dispatch: no completer for a yield; the
     * process finishes SX_ENOMEM ("dispatch: out of memory"). */
    SX__FAULT_DISPATCH = 1u << 3,
    /* engine/core/proc.c sx__send: no node for a message; the send returns
     * SX_ENOMEM. */
    SX__FAULT_SEND = 1u << 4,
    /* engine/core/dispatch.c sx_complete: no room to copy a command's result;
     * the process gets its one answer as SX_ENOMEM. */
    SX__FAULT_RESULT = 1u << 5,
    /* engine/io/deadline.c timer_set: no room in a libuv loop's timer heap for
     * a timer not in it (clock handles, yield timeouts, exec's kill timers);
     * each caller answers SX_ENOMEM or gives up its timer. */
    SX__FAULT_IO_TIMER = 1u << 6,
    /* engine/io/loop.c sx__io_proc_finished: no cancel request for a process
     * that finished with ops or handles alive on its loop; the loop's
     * sweep request cancels them instead. */
    SX__FAULT_IO_CANCEL = 1u << 7,
    /* relay/accept.c sx__relay_accept: no sx__relay_conn for a new connection;
     * it is refused (taken off the listener and closed). */
    SX__FAULT_RELAY_CONN = 1u << 8,
    /* relay/accept.c refuse: no handle to take a refused connection off the
     * listener with; the server's spare handle for that listener does. */
    SX__FAULT_RELAY_REFUSE = 1u << 9,
    /* engine/commands/fs.c: no buffer for fs.read's bytes (the first one, or a
     * bigger one for a file of unknown size), or for fs.list's names; the
     * op closes its fd and answers SX_ENOMEM. */
    SX__FAULT_FS_BUF = 1u << 10,
    /* engine/commands/fs.c: a uv_fs request that copies its path (open, lstat,
     * scandir, unlink, rmdir) returns UV_ENOMEM, as libuv does when that
     * copy fails; the op answers SX_ENOMEM. */
    SX__FAULT_FS_REQ = 1u << 11,
    /* engine/commands/http_parse.c: no room for a response's head, its
     * growing body, or a joined header value of the result; net.http
     * answers SX_ENOMEM and closes its connection. */
    SX__FAULT_HTTP_BODY = 1u << 12,
    /* engine/commands/exec.c on_alloc: no bigger buffer for a child's stdout or
     * stderr; exec kills the child and answers SX_ENOMEM once it is
     * reaped. */
    SX__FAULT_EXEC_OUT = 1u << 13,
    /* engine/commands/exec_args.c sx__exec_parse: no room for a copy of the
     * arguments (the strings, argv, env, stdin); the yield is answered
     * SX_ENOMEM and no child is started. */
    SX__FAULT_EXEC_ARGS = 1u << 14,
    /* engine/store/sqlite.c sx__store_open: no memory for the store; open
     * answers SX_ENOMEM with nothing left open (no lock held). */
    SX__FAULT_STORE_OPEN = 1u << 15,
    /* engine/store/sqlite.c rec_new, under every record (sx__store_submit,
     * _finish, _restart, _checkpoint, _message): no room for a record; the
     * call returns SX_ENOMEM, nothing is queued and its done callback is
     * never called. (sx__store_meta_set, armed, fails as an I/O error.) */
    SX__FAULT_STORE_REC = 1u << 16,
    /* engine/core/ptable.c seg_map: a process-table segment cannot be
     * mapped. The carving returns SX_ENOMEM (submit and spawn answer it);
     * an idle worker mapping it ahead gives up on that segment. */
    SX__FAULT_SEG_MAP = 1u << 17,
    /* engine/sched/globalq.c sx__globalq_chunk_new: no chunk for the
     * injection ring's overflow (engine/sched/inject.c, inject_full); the
     * moved processes go to the global queue as a list through their
     * slots instead. */
    SX__FAULT_GQ_CHUNK = 1u << 18,
    SX__FAULT_LAST = SX__FAULT_GQ_CHUNK, /* the highest: fault.c's SITES */
};

/* Hook points: places where a test runs its own code in the middle of the
 * engine's, to force an interleaving that threads reach only by chance
 * (a thread descheduled at the wrong moment). A test sets the hook of a
 * point; the engine calls it there with one figure of the moment. In
 * other builds SX__FAULT_HOOK compiles away. */
enum {
    /* engine/sched/inject.c inject_full: after each grab from the full
     * injection ring, with how many it has moved so far. It runs under
     * the ring's spinlock: the hook may grab from the ring, as workers
     * do, but must not push into it (sx__inject would spin for good). */
    SX__HOOK_INJECT_MOVE = 0,
    /* relay/server.c listen_unix: the socket listening at "PATH.new", just
     * before it is linked at PATH (n: 0). The hook may make or remove
     * files there, as another program could at that moment. */
    SX__HOOK_RELAY_LINK,
    SX__HOOK_COUNT
};
typedef void sx__fault_hook_fn(void *arg, size_t n);

#ifdef SX_FAULT_INJECTION
bool sx__fault(unsigned site);      /* true: fail this allocation (counted) */
void sx__fault_arm(unsigned sites); /* the sites that fail from now; 0: none */
/* Arms one more site that lets the next `pass` allocations through and
 * fails those after them. */
void sx__fault_arm_after(unsigned site, unsigned pass);
uint64_t sx__fault_hits(unsigned site); /* failures made at site so far */
/* Sets point's hook (NULL: none), before the work that reaches it. */
void sx__fault_hook_set(unsigned point, sx__fault_hook_fn *fn, void *arg);
void sx__fault_hook(unsigned point, size_t n); /* calls the hook, if set */
#define SX__FAULT(site) sx__fault(site)
#define SX__FAULT_HOOK(point, n) sx__fault_hook(point, n)
#else
#define SX__FAULT(site) false
#define SX__FAULT_HOOK(point, n) ((void)0)
#endif

#endif
