/* Indirect calls to one of eight functions picked by a linear congruential
 * generator: a dense trace (a TIP every few instructions) for the tests of
 * small trace rings. The iteration count is the first argument. */
#include <stdlib.h>
volatile unsigned sink;
static unsigned f0(unsigned x) { return x + 1; }
static unsigned f1(unsigned x) { return x ^ 3; }
static unsigned f2(unsigned x) { return x << 1; }
static unsigned f3(unsigned x) { return x >> 2; }
static unsigned f4(unsigned x) { return x * 5; }
static unsigned f5(unsigned x) { return x - 7; }
static unsigned f6(unsigned x) { return ~x; }
static unsigned f7(unsigned x) { return x | 9; }
__attribute__((noinline)) void done(void) { sink++; }
int main(int argc, char **argv) {
  unsigned (*table[8])(unsigned) = {f0, f1, f2, f3, f4, f5, f6, f7};
  unsigned state = 1;
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  for (int i = 0; i < n; i++) {
    state = state * 1103515245u + 12345u;
    sink += table[(state >> 16) & 7](state);
  }
  done();
  return 0;
}
