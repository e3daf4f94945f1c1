/* The main thread ends with pthread_exit while a worker goes on: the
 * leader stays a zombie until the process ends. The worker calls
 * `worker_done` after the leader is gone, then exits the process with 3. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void worker_done(void) { __asm__ volatile(""); }

static void *worker(void *arg) {
  usleep(200000);
  worker_done();
  exit(3);
  return arg;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, 0, worker, 0);
  pthread_exit(0);
}
