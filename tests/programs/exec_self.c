/* Runs itself again through execv. `exec_self`: calls `before_exec` and
 * execs `exec_self again`, which calls `again` and exits 5.
 * `exec_self ticking N`: a thread calls `tick` over and over while main
 * execs `exec_self ticking N-1` (an exec racing another thread's stops),
 * down to `exec_self again`. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) int again(int n) { return n + 2; }
__attribute__((noinline)) void before_exec(void) { __asm__ volatile(""); }
__attribute__((noinline)) void tick(void) { __asm__ volatile(""); }

static void *ticker(void *arg) {
  for (;;) tick();
  return arg;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "again") == 0) return again(3);
  char count[16] = "0";
  char *args[] = {argv[0], "again", 0, 0};
  if (argc > 2 && strcmp(argv[1], "ticking") == 0) {
    int left = atoi(argv[2]);
    pthread_t t;
    pthread_create(&t, 0, ticker, 0);
    usleep(2000);
    if (left > 1) {
      count[0] = (char)('0' + (left - 1) % 10);
      args[1] = "ticking";
      args[2] = count;
    }
  }
  before_exec();
  execv("/proc/self/exe", args);
  return 1;
}
