/* longjmp out of nested calls: returns that do not match their calls. */
#include <setjmp.h>
static jmp_buf env;
volatile int hops;
__attribute__((noinline)) static void inner(int n) { if (n == 0) longjmp(env, 7); inner(n - 1); hops++; }
int main(void) {
  int total = 0;
  for (int round = 0; round < 3; round++) {
    int v = setjmp(env);
    if (v == 0) inner(5 + round);
    else total += v;
  }
  return total;
}
