/* Reverse stepping in LLDB through the retrace shim: a loop with calls,
   recursion, an inlined function and a signal handler, one statement a
   line, so that every line has a start LLDB's stepping stops at. */
#include <signal.h>

volatile int counter;

static void on_usr1(int sig) {
  counter += sig;
}

__attribute__((noinline)) int square(int x) {
  int y = x * x;
  return y;
}

__attribute__((noinline)) int depth(int n) {
  if (n == 0)
    return 0;
  return 1 + depth(n - 1);
}

static inline __attribute__((always_inline)) int twice(int x) {
  int t = x + x;
  return t;
}

int main(void) {
  int sum = 0;
  signal(SIGUSR1, on_usr1);
  for (int i = 0; i < 3; i++) {
    sum += square(i);
    counter += i;
  }
  int deep = depth(3);
  int doubled = twice(sum);
  raise(SIGUSR1);
  counter += sum + deep + doubled;
  return counter == 0;
}
