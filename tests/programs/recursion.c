/* Deep recursion: more nested calls than the 64-entry return-compression stack. */
volatile int sink;
__attribute__((noinline)) static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) static int depth(int n) { return n == 0 ? 0 : 1 + depth(n - 1); }
int main(void) {
  sink = fib(12);
  sink += depth(100);
  return sink & 0x7f;
}
