/* Counts through a function forever without system calls: a program to
 * attach to and record from then on (retrace-stub --attach PID --record). */
volatile long counter;
__attribute__((noinline)) void tick(long i) { counter = i; }
int main(void) {
  for (long i = 1;; i++) tick(i);
}
