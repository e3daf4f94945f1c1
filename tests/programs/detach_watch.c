/* Waits for a debugger to attach (its TracerPid), then writes `counter`
 * a thousand times and says what it computed: a program for a debugger
 * that sets a watchpoint and detaches. Its output and exit status must be
 * those of a run without a debugger. argv[1]: a file to write the pid to
 * once it waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile long counter;

__attribute__((noinline)) void work(long i) { counter += i; }

static int traced(void) {
  char line[256];
  int tracer = 0;
  FILE *status = fopen("/proc/self/status", "r");
  while (status && fgets(line, sizeof line, status))
    if (strncmp(line, "TracerPid:", 10) == 0) tracer = atoi(line + 10);
  if (status) fclose(status);
  return tracer != 0;
}

int main(int argc, char **argv) {
  if (argc > 1) {
    FILE *pid = fopen(argv[1], "w");
    fprintf(pid, "%d\n", getpid());
    fclose(pid);
    while (!traced()) usleep(1000);
  }
  for (long i = 1; i <= 1000; i++) work(i);
  printf("counter=%ld\n", counter);
  return (int)(counter % 251);
}
