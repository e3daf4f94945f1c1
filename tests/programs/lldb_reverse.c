/* The inferior of LLDB 22's own reverse-execution tests
 * (lldb/test/API/functionalities/reverse-execution/ in LLVM's
 * sources), written again: a watched variable on main's
 * stack set to 1, then 2 through a global pointer, between empty
 * functions the tests break on. */
#include <stdio.h>

__attribute__((noinline, used)) int false_condition(void) { return 0; }

int *g_watched_var_ptr;

__attribute__((noinline)) void start_recording(void) { __asm__ volatile(""); }
__attribute__((noinline)) void trigger_watchpoint(void) { *g_watched_var_ptr = 2; }
__attribute__((noinline)) void trigger_breakpoint(void) { __asm__ volatile(""); }
__attribute__((noinline)) void stop_recording(void) { __asm__ volatile(""); }

int main(void) {
    int watched_var = 1;
    g_watched_var_ptr = &watched_var;
    start_recording();
    trigger_watchpoint();
    trigger_breakpoint();
    stop_recording();
    return 0;
}
