/* Four threads, each with its own loop. */
#include <pthread.h>
static volatile long results[4];
static void *work(void *arg) {
  long id = (long)arg, sum = 0;
  for (long i = 0; i < 50 + 10 * id; i++) sum += (i % 3 == 0) ? i : -1;
  results[id] = sum;
  return 0;
}
int main(void) {
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, work, (void *)i);
  for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
  return (int)((results[0] + results[1] + results[2] + results[3]) & 0x7f);
}
