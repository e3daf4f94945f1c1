/* The main job's program, with a planted bug: fill() writes one sample
   past the end of `samples`, over `limit`, which then reads 64, not 100.
   docs/examples/record-and-find-the-writer.sh finds the write by running
   backwards from the wrong value to the instruction that stored it. */
#include <stdio.h>

struct settings {
  int samples[8];
  int limit;
};

static void fill(int *samples, int count) {
  for (int i = 0; i <= count; i++) /* the bug: <= count */
    samples[i] = i * i;            /* line:writer */
}

int main(void) {
  struct settings settings = { .limit = 100 };
  fill(settings.samples, 8);
  printf("limit = %d\n", settings.limit); /* line:wrong */
  return 0;
}
