/* The example program for README's main job: a few calls and a loop. */
#include <stdio.h>

static int collatz_steps(unsigned long n) {
  int steps = 0;
  while (n != 1) {
    n = (n & 1) ? 3 * n + 1 : n / 2;
    steps++;
  }
  return steps;
}

int main(void) {
  int longest = 0;
  for (unsigned long n = 1; n < 30; n++) {
    int s = collatz_steps(n);
    if (s > longest) longest = s;
  }
  printf("longest Collatz chain below 30: %d steps\n", longest);
  return 0;
}
