/* Writes its pid to argv[1], then loops until killed. The loop has a
 * conditional branch: a loop of only direct jumps emits no packets at all, so
 * no Intel PT decoder (hardware traces included) could count its iterations. */
#include <stdio.h>
#include <unistd.h>
volatile unsigned long spins;
int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "w");
  fprintf(f, "%d\n", getpid());
  fclose(f);
  while (spins != ~0UL) spins++;
  return 0;
}
