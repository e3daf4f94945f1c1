/* Stops racing each other while the stub stops every thread for one: a
 * thread calls `tick` (a breakpoint) over and over, another raises SIGUSR1
 * over and over, while main creates and joins short-lived threads (clone
 * events). At `done` it prints how many signals were raised and handled:
 * a signal lost on the way is a handled count short. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile int finished, handled, raised, ticks;

static void on_usr1(int sig) { (void)sig; handled++; }
__attribute__((noinline)) void tick(void) { ticks++; }
__attribute__((noinline)) void done(void) { __asm__ volatile(""); }

static void *ticker(void *arg) {
  while (!finished) tick();
  return arg;
}
static void *raiser(void *arg) {
  while (!finished) {
    raised++;
    raise(SIGUSR1);
  }
  return arg;
}
static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
  int clones = argc > 1 ? atoi(argv[1]) : 20;
  signal(SIGUSR1, on_usr1);
  pthread_t t, r;
  pthread_create(&t, 0, ticker, 0);
  pthread_create(&r, 0, raiser, 0);
  for (int i = 0; i < clones; i++) {
    pthread_t c;
    pthread_create(&c, 0, nothing, 0);
    pthread_join(c, 0);
  }
  finished = 1;
  pthread_join(t, 0);
  pthread_join(r, 0);
  done();
  printf("raised %d handled %d ticks %d\n", raised, handled, ticks);
  return 0;
}
