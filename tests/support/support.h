/* tests/support/support.h — what the test binaries share besides the
 * harness: include this one header for all of it.
 *
 *   harness.h  the cases table, sx_test_main and the CHECK macros (every
 *              test binary; a test that needs nothing else includes only
 *              this one)
 *   engine.h   an engine fixture: tx_engine_up / tx_engine_down, its parts
 *              for a test with a special set-up, tx_wait_done / tx_wait_int
 *   timing.h   tx_sleep_ms, tx_sleep_us, tx_now_ns, TX_WAIT_UNTIL
 *   fds.h      tx_count_fds, tx_settle_fds (open file descriptors)
 *   threads.h  tx_thread_start / tx_thread_join, tx_scaled (iterations
 *              under SX_STRESS_SCALE)
 *   tmp.h      tx_mkdtemp, tx_rm_tree (scratch directories under /tmp)
 *   tsan_fd.h  not included here: it defines the ThreadSanitizer hook
 *              __tsan_default_suppressions, which a binary opts into by
 *              including it itself (see there)
 *
 * Names: tx_ and TX_ for this folder (sx_ is the product's); the harness
 * keeps its sx_test_ names and CHECK macros, used by every test file.
 *
 * Header-only, every function static inline, rather than a static library:
 * each test binary is one .c file built against one of two builds of the
 * library (stepx_dep, or stepx_fault_dep with fault injection), and the
 * helpers call that library and CHECK (which exits the process), so a
 * library of them would have to be built once per build of libstepx; as
 * headers they need no meson entry, and the project's include directory
 * (the source root) already finds them as "tests/support/...". A helper a
 * binary does not call costs nothing (unused static inline functions are
 * not emitted and not warned about).
 *
 * Threads: every helper runs on the calling thread; the engine fixture and
 * tx_wait_done on a test's own threads, never inside a step or a handler
 * (engine rules for stop, free and wait).
 */
#ifndef TX_SUPPORT_SUPPORT_H
#define TX_SUPPORT_SUPPORT_H

#include "tests/support/harness.h"

#include "tests/support/engine.h"
#include "tests/support/fds.h"
#include "tests/support/threads.h"
#include "tests/support/timing.h"
#include "tests/support/tmp.h"

#endif
