/* A small program for debugger sessions: a global, a helper, a local. */
#include <stdio.h>
int counter = 41;
static int add(int a, int b) { int s = a + b; return s; }
int main(void) {
  int local = 7;
  counter = add(counter, 1);
  local += counter;
  printf("%d\n", local);
  return local & 0x7f;
}
