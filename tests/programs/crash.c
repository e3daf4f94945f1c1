/* Crashes with SIGSEGV after some work. */
volatile int *volatile target;
volatile int work;
int main(void) {
  for (int i = 0; i < 10; i++) work += i;
  *target = work;
  return 0;
}
