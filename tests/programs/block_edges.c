/* What a recorder running block by block (int3 at each block's branch)
 * must get right: direct, indirect and table jumps, calls through
 * pointers, a write watched in the middle of a block, a breakpoint in the
 * middle of straight-line code, a signal handler, and a forked child that
 * runs code the recorder had breakpoints in (it must not inherit them).
 * Exits 0 when the child computed what the parent does. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long watched;
volatile long sink;

__attribute__((noinline)) int twice(int x) { return 2 * x; }
__attribute__((noinline)) int inc(int x) { return x + 1; }
__attribute__((noinline)) int neg(int x) { return -x; }
static int (*ops[3])(int) = {twice, inc, neg};

static void on_usr1(int signal) { sink += signal; }

__attribute__((noinline)) long churn(int n) {
  long acc = 0;
  for (int i = 0; i < n; i++) {
    acc += ops[i % 3](i);
    switch (i & 7) {
      case 0: acc ^= 5; break;
      case 1: acc += 3; break;
      case 2: acc -= 1; break;
      case 3: acc *= 3; break;
      case 4: acc >>= 1; break;
      default: acc += i; break;
    }
    if (i == n / 2) watched = acc;
  }
  return acc;
}

__attribute__((noinline)) void done(long value) { sink = value; }

int main(void) {
  signal(SIGUSR1, on_usr1);
  raise(SIGUSR1);
  long a = churn(200);
  long b = a * 3 + 1;
  b ^= a >> 2; /* straight-line code: a breakpoint here is inside a block */
  sink = b;
  /* The parent runs `churn` again right before the fork: the child
   * starts with memory as it was, where the recorder had int3s. */
  b += churn(20);
  pid_t child = fork();
  if (child == 0) _exit((int)(churn(100) & 0x7f));
  int status = 0;
  waitpid(child, &status, 0);
  long expected = churn(100) & 0x7f;
  done(b + expected);
  return WIFEXITED(status) && WEXITSTATUS(status) == expected ? 0 : 1;
}
