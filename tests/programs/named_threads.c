/* A worker thread with a name, for debuggers' thread lists. */
#define _GNU_SOURCE
#include <pthread.h>
static pthread_barrier_t ready;
static void *work(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "retrace-worker");
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&ready);
  return 0;
}
__attribute__((noinline)) void both_running(void) { __asm__ volatile("nop"); }
int main(void) {
  pthread_t t;
  pthread_barrier_init(&ready, 0, 2);
  pthread_create(&t, 0, work, 0);
  pthread_barrier_wait(&ready);
  both_running();
  pthread_barrier_wait(&ready);
  pthread_join(t, 0);
  return 0;
}
