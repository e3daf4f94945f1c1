/* The replay benchmark's workload: bench_loop's iterations (a call with a
 * conditional branch and a 3-trip inner loop, ~16 instructions each), and
 * one call of bench_mark, at iteration argv[2]: the breakpoint a reverse
 * continue from bench_end looks for, as far back as the caller chose. */
#include <stdlib.h>
volatile long sink;
volatile long marked = -1;
__attribute__((noinline)) void bench_mark(long i) { marked = i; }
__attribute__((noinline)) void bench_end(void) { sink++; }
__attribute__((noinline)) static long work(long i) {
  long acc = 0;
  if (i & 1) acc += i;
  for (int k = 0; k < 3; k++) acc += k * i;
  return acc;
}
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  long mark = argc > 2 ? atol(argv[2]) : n / 2;
  for (long i = 0; i < n; i++) {
    if (i == mark) bench_mark(i);
    sink += work(i);
  }
  bench_end();
  return 0;
}
