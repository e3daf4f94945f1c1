/* Calls work() five times, then finish(): a reverse-continue to a breakpoint
   in work() lands on its last call, the next one on the call before. */
volatile int total;
__attribute__((noinline)) int work(int i) {
  total += i * 3;
  return total;
}
__attribute__((noinline)) void finish(void) { total += 1; }
int main(void) {
  for (int i = 0; i < 5; i++)
    work(i);
  finish();
  return 0;
}
