/* A global written twice and read once in between: read and access
 * watchpoints in the past (retrace-stub --record). */
volatile long shared;
volatile long copy;
__attribute__((noinline)) void writer(long value) { shared = value; }
__attribute__((noinline)) void reader(void) { copy = shared; }
__attribute__((noinline)) void done(void) { __asm__ volatile(""); }
int main(void) {
  writer(1);
  reader();
  writer(2);
  done();
  return 0;
}
