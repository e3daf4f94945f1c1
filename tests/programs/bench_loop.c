/* The recorder benchmark's workload: each iteration
 * calls a function with a conditional branch and a 3-trip inner loop. */
#include <stdlib.h>
volatile long sink;
__attribute__((noinline)) void bench_begin(void) { sink = 0; }
__attribute__((noinline)) void bench_end(void) { sink++; }
__attribute__((noinline)) static long work(long i) {
  long acc = 0;
  if (i & 1) acc += i;
  for (int k = 0; k < 3; k++) acc += k * i;
  return acc;
}
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  bench_begin();
  for (long i = 0; i < n; i++) sink += work(i);
  bench_end();
  return 0;
}
