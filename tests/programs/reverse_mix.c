/* Loops and calls, recursion, a read() from a pipe into a buffer and a
   signal handler, for reverse execution compared with GDB's `record full`.
   `counter` is the watched global. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

volatile int counter;
static volatile int signalled;
char buffer[32];

__attribute__((noinline)) int square(int x) { return x * x; }

__attribute__((noinline)) int depth(int n) {
  if (n == 0)
    return 0;
  return 1 + depth(n - 1);
}

static void on_usr1(int sig) {
  signalled = sig;
  counter += 100;
}

__attribute__((noinline)) void done(void) { counter += 1; }

int main(void) {
  int sum = 0;
  for (int i = 0; i < 4; i++) {
    sum += square(i);
    counter += i;
  }
  int deep = depth(5);
  int fds[2];
  if (pipe(fds) != 0)
    return 1;
  if (write(fds[1], "hello, past", 11) != 11)
    return 1;
  ssize_t got = read(fds[0], buffer, sizeof buffer);
  counter += (int)got;
  signal(SIGUSR1, on_usr1);
  raise(SIGUSR1);
  counter += sum + deep;
  done();
  return 0;
}
